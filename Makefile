# The two commands of the README: `make run` and `make test`. Both set up what they need first.
ROCKETMQ_VERSION ?=
export ROCKETMQ_VERSION
# The main job goes through Airflow: the nightly resilience DAG (its matrix, scenarios/nightly.yaml:
# control, the OOM kill of broker-a with transientStorePoolEnable on and off, the shared host and its
# controls, remedies and producer policies, the RocketMQ-internal faults) run with dag.test() on
# the embedded metadata DB, the same tasks a scheduler runs; it ends with the combined report's path.
DAG ?= rocketmq_nightly_resilience

.PHONY: setup run test test-fast lint lock clean
setup:
	@scripts/setup.sh

run: setup
	@.venv/bin/rmqchaos airflow test $(DAG)

# The whole suite: the layering contracts, then every test (the fast tier first, then the ones that
# run RocketMQ JVMs; tests/conftest.py orders them).
test: setup lint
	@.venv/bin/python -m pytest -q --durations=20 tests

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
