"""The upgrade question's figures for docs/findings.md: the OOM, TSP, power-loss and partition
scenarios on RocketMQ 4.9.7 and 5.5.0, each repeated, then one table of ranges over the repeats
(lost, duplicated, p99 send, busy answers). Run it on a quiet host, one run at a time; ~2-3 min per run
(5 scenarios x 2 versions x 3 repeats: about 75 min).

    .venv/bin/python scripts/upgrade_figures.py [--repeat 3] [--versions 4.9.7,5.5.0] [--out DIR] [SCENARIO ...]
    .venv/bin/python scripts/upgrade_figures.py --table DIR      # the table again, from DIR's runs

SCENARIO: a file name under scenarios/ without .yaml (default: pipeline/workflows/upgrade.py SCENARIOS).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline.workflows import upgrade  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("scenarios", nargs="*", default=list(upgrade.SCENARIOS))
    a.add_argument("--repeat", type=int, default=3)
    a.add_argument("--versions", default=",".join(upgrade.VERSIONS))
    a.add_argument("--out", type=Path, default=REPO / "runs" / time.strftime("upgrade-%Y%m%d-%H%M%S", time.gmtime()))
    a.add_argument("--table", type=Path, help="only print the table of the runs in this directory")
    args = a.parse_args()
    out: Path = args.table or args.out
    rc = 0
    if not args.table:
        files = upgrade.overlays(args.scenarios, args.versions.split(","), out)
        # every run directory lands in `out` (RMQCHAOS_RUNS), the combined report beside them
        r = subprocess.run([str(REPO / ".venv" / "bin" / "rmqchaos"), "run", *map(str, files), "--repeat",
                            str(args.repeat), "--report", str(out / "report.html")], cwd=REPO,
                           env={**os.environ, "RMQCHAOS_RUNS": str(out)})
        rc = r.returncode  # a failed run is still counted in its row (unverified), the others measured
    runs = sorted(p for p in out.iterdir() if (p / "state.json").exists())
    print(upgrade.table(runs))
    print(f"runs: {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
