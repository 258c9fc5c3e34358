#!/usr/bin/env bash
# `make test`: every test but the long ones, in three phases; each runs whatever the one before gave,
# and the exit status is 1 if any failed.
#   1. the fast tier (pure logic, no JVM) on two pytest-xdist workers, each module on one: a broken
#      spec fails in a minute;
#   2. the real tier on two workers: tests that share a port, a session cluster or the docker engine
#      are one xdist group and never overlap (tests/_groups.py), the longest groups first;
#   3. the tests marked `alone` (pyproject.toml), one at a time with nothing beside them: they measure
#      the host (disk noise against a quiet baseline, ratios side by side) or rest on its timing.
# Each phase's outcomes and durations: .cache/test-runs/ (tests/_outcomes.py); the last line sums them.
# Other pytest arguments go to every phase (scripts/test.sh -x).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export RMQCHAOS_TEST_RUNS=${RMQCHAOS_TEST_RUNS:-$PWD/.cache/test-runs/make-test-$(date -u +%Y%m%dT%H%M%SZ)-$$}
mkdir -p "$RMQCHAOS_TEST_RUNS"
rc=0
phase() {  # phase NAME ARGS...: one pytest session; exit 5 (nothing selected) is no failure
  local name=$1; shift
  printf '\n== make test: %s\n' "$name"
  "$PY" -m pytest -q -p no:cacheprovider "$@" tests
  local r=$?
  [ $r -eq 0 ] || [ $r -eq 5 ] || rc=1
  [ $r -ne 2 ] || { echo "== make test: interrupted in $name"; exit 2; }  # Ctrl-C: no later phase
}
phase "fast tier (2 workers, a module on one)" -m fast -n 2 --dist loadfile "$@"
phase "real tier (2 workers, tests/_groups.py)" -m "not fast and not long and not alone" -n 2 --dist loadgroup \
  --durations=15 "$@"
phase "real tests that run alone" -m "alone and not long" --durations=10 "$@"
"$PY" tests/_outcomes.py --totals "$RMQCHAOS_TEST_RUNS"/*.json
exit $rc
