# The commands of the README ("The two commands"): `make run`, `make nightly`, `make test`,
# `make test-fast`. Each sets up what it needs first.
ROCKETMQ_VERSION ?=
export ROCKETMQ_VERSION
# The main job goes through Airflow: the nightly resilience DAG run with dag.test() on the embedded
# metadata DB (the same tasks a scheduler runs), ending with the combined report's path.
# `make run`: the quick matrix (scenarios/quick.yaml: the control, the OOM kill with
# transientStorePoolEnable on and off, the shared host, the %RETRY% topic flood), one of each kind of
# finding. `make nightly`: the full matrix (scenarios/nightly.yaml), the DAG's scheduled default.
DAG ?= rocketmq_nightly_resilience
MATRIX ?= scenarios/quick.yaml
# `make nightly PART=k/n`: every n-th scenario of the nightly from the k-th (n runs cover it once;
# the whole matrix runs for longer than CI's 90-minute cap on 2 cores)
PART ?= 1/1

.PHONY: setup run nightly test test-fast test-long test-slow-day test-flaky lint lock clean
setup:
	@scripts/setup.sh

run: setup
	@.venv/bin/rmqchaos airflow test $(DAG) --conf '{"matrix": "$(MATRIX)", "explore_runs": 0}'

nightly: setup
	@.venv/bin/rmqchaos airflow test $(DAG) --conf '{"matrix": "scenarios/nightly.yaml", "part": "$(PART)"}'

# The suite CI runs: the layering contracts, then every test but the long ones: the fast tier, the
# real tier on two pytest-xdist workers (tests that could collide share a group: tests/_groups.py),
# then the tests marked `alone` by themselves (scripts/test.sh).
test: setup lint
	@scripts/test.sh

# Everything, the long tests too (a nightly CI job's command): each long test has a shorter one in
# `make test` on the same path (pyproject.toml's markers).
test-long: setup lint
	@.venv/bin/python -m pytest -q --durations=20 tests

# `make test` on a slow day, reproducibly: a busy loop takes one of the two cores beside it
# (scripts/slow-day.sh; the README's figure for it).
test-slow-day:
	@scripts/slow-day.sh

# `make test-flaky N=5`: the real tier as make test runs it (two workers) N times, then each test's
# failure rate over them (failed/N, those that failed at least once, then a total line). Every session
# runs, failed or not; the exit status is 1 when something failed. Each pytest session writes its
# outcomes and durations to .cache/test-runs/ (tests/_outcomes.py); these N to .cache/test-runs/flaky-<UTC>-<pid>/.
# Other pytest arguments: .venv/bin/python scripts/test_flaky.py N ARGS...
N ?= 3
test-flaky: setup
	@.venv/bin/python scripts/test_flaky.py $(N)

# The fast tier: pure logic, no JVM (about a minute).
test-fast: setup lint
	@.venv/bin/python -m pytest -q -m fast tests

# Layers import only downward, no cycles between a package's modules (pyproject.toml [tool.importlinter]).
lint:
	@.venv/bin/lint-imports --no-logo --no-cache

# Re-resolve the locked Python set from requirements.txt (needs PyPI).
lock:
	rm -rf .lockvenv && python3 -m venv .lockvenv && .lockvenv/bin/pip install -q -r requirements.txt \
	  && .lockvenv/bin/pip freeze > requirements.lock && rm -rf .lockvenv

clean:
	-.venv/bin/rmqchaos cluster down --all
	rm -rf .venv .cache target runs .rmqchaos
