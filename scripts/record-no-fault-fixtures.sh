#!/usr/bin/env bash
# Record the fault-free summaries tests/test_no_fault_twins.py judges every matrix signature against:
# one real run of each kind (tests/fixtures/no_fault/<kind>.yaml: a matrix scenario without its fault),
# its analysis/summary.json kept as <kind>.json.gz without the per-second series no figure reads.
# Usage: scripts/record-no-fault-fixtures.sh [kind ...]   (default: every kind; ~2 min each)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=tests/fixtures/no_fault
kinds=("$@"); [ ${#kinds[@]} -gt 0 ] || kinds=(normal ordered transactional timer pop replicated)
out=$(mktemp -d "${TMPDIR:-/tmp}/no-fault.XXXXXX")
for k in "${kinds[@]}"; do
  [ -f "$dir/$k.yaml" ] || { echo "record-no-fault-fixtures: no $dir/$k.yaml; kinds: $(ls $dir/*.yaml | xargs -n1 basename | sed 's/.yaml//' | tr '\n' ' ')" >&2; exit 2; }
  .venv/bin/rmqchaos run "$dir/$k.yaml" --out "$out/$k"
  .venv/bin/python - "$out/$k/analysis/summary.json" "$dir/$k.json.gz" <<'PY'
import gzip, json, sys
s = json.load(open(sys.argv[1]))
for k in ("series", "busy_series"):  # per-second figures for plots: no condition reads them
    s.pop(k, None)
with gzip.open(sys.argv[2], "wt") as f:
    json.dump(s, f, indent=0, sort_keys=True)
print(f"{sys.argv[2]}: complete={s['complete']}, keys={s['counts']['keys']}, lost={s['counts']['lost']}")
PY
done
echo "run directories kept in $out"
