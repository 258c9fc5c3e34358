"""Assertions about what the platform left on the machine, a loopback connection probe, and the one
line a scenario text is refused with."""
from __future__ import annotations

import json
import socket
from pathlib import Path

from cluster.local import cgroups
from rmqchaos.machine.procs import alive


def started(run_dir: Path) -> list[tuple[str, int, int]]:
    f = run_dir / "processes.jsonl"
    if not f.exists():
        return []
    recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return [(r["node"], r["pid"], r["starttime"]) for r in recs if r.get("event") == "start"]


def live(run_dir: Path) -> list[tuple[str, int]]:
    return [(n, p) for n, p, s in started(run_dir) if alive(p, s)]


def cgroup_dirs(run_id: str) -> list[Path]:
    return [d for d in cgroups.Cgroup(f"{cgroups.PREFIX}/{run_id}").dirs() if d.exists()]


def run_id(run_dir: Path) -> str:
    return json.loads((run_dir / "state.json").read_text())["run_id"]


def assert_nothing_left(run_dir: Path) -> None:
    assert live(run_dir) == [], f"processes of {run_dir} still running"
    assert cgroup_dirs(run_id(run_dir)) == [], f"cgroups of {run_dir} still present"


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    import shutil
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Debian's chromium is installed by `make setup`"
    return exe


def rendered_verdicts(page: Path, profile: Path) -> list[str]:
    """The verdict sentences of an HTML report as headless Chromium renders them (its DOM after load)."""
    import html
    import re
    import subprocess
    dom = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                         capture_output=True, timeout=120, check=True, text=True).stdout
    section = re.search(r'<section id="verdict">(.*?)</section>', dom, re.S)
    assert section, "the report has a verdict section at the top"
    return [html.unescape(re.sub(r"<[^>]+>", "", p)) for p in re.findall(r'<p class="verdict">(.*?)</p>', section[1], re.S)]


def connects(src: str, dst: str, port: int) -> bool:
    """Whether a TCP connection from `src` (a loopback address) to `dst:port` opens within 1 s."""
    try:
        socket.create_connection((dst, port), timeout=1.0, source_address=(src, 0)).close()
        return True
    except OSError:
        return False


def one_line(text: str, name: str = "t.yaml") -> str:
    """The single line `parse_scenario` refuses `text` with (fails if it is accepted or says more)."""
    import pytest

    from rmqchaos.spec import SpecError, parse_scenario
    with pytest.raises(SpecError) as e:
        parse_scenario(text, name)
    assert len(e.value.lines) == 1, e.value.lines
    return e.value.lines[0]
