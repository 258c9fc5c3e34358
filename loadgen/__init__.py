"""Locust load through the platform's producer, with the application's retry policies, writing the
send ledger. `loadgen.runner.run_load(run_dir)` runs a scenario's load (importing it imports Locust,
which monkey-patches the process); the platform runs it as `python -m loadgen RUN_DIR`."""
