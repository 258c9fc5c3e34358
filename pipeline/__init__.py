"""The pipeline: the only API the CLI, the Airflow DAGs and the tests call.

One module per stage, each `run(run_dir) -> small JSON-able result` against a run directory that
holds all state (so an Airflow task, a person or a test can run one stage on its own):

    up.run      start the cluster (returns once every broker is registered and routable)
    check.run   the scenario's checks (RocketMQ's own tools as witness)
    load.run    consumers, the Locust load with the faults on its clock
    drain.run   the consumers drained to lag 0 and stopped cleanly (in any process: found by record)
    down.run    stop everything the run started (always safe)
    analyze.run the PySpark reconciliation of the ledgers
    report.run  the text and HTML report

runs.py creates, opens and reaps runs; scenario.py holds the stage order and the failure policy.
For the DAGs: matrix.py (the nightly matrix, its combined report and verdict), prerelease.py (Params
over a base scenario), gates.py (pass gates), slot.py (the machine's one cluster slot).
"""
