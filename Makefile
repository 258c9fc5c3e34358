# The two commands of the README: `make run` and `make test`. Both set up what they need first.
ROCKETMQ_VERSION ?=
export ROCKETMQ_VERSION
# The headline experiment: the same OOM kill of broker-a with transientStorePoolEnable on and off.
SCENARIO ?= scenarios/oom-tsp-on.yaml scenarios/oom-tsp-off.yaml

.PHONY: setup run test lock clean
setup:
	@scripts/setup.sh

run: setup
	@.venv/bin/rmqchaos run $(SCENARIO)

test: setup
	@.venv/bin/python -m pytest -q tests

# Re-resolve the locked Python set from requirements.txt (needs PyPI).
lock:
	rm -rf .lockvenv && python3 -m venv .lockvenv && .lockvenv/bin/pip install -q -r requirements.txt \
	  && .lockvenv/bin/pip freeze > requirements.lock && rm -rf .lockvenv

clean:
	-.venv/bin/rmqchaos cluster down --all
	rm -rf .venv .cache target runs .rmqchaos
