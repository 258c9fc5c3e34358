"""rmqchaos: the core every layer uses, importing nothing else of ours. Its sub-packages import only
downward (pyproject.toml [tool.importlinter]):

    run        one run's directory (rundir.py) and what lives in it: stage times, the producer's
               crash control, the consumers' serving status
    spec       the typed scenario spec: models, loading with line-precise errors, overlays, checks
    ledger     the ledgers, the contract between stages: the schema (schema.py, the one source), the
               self-verifying body, journals written and read back, their lines, sealing to Parquet
    rocketmq   a RocketMQ version's jars (dist.py) and the gRPC Java client's
    machine    this machine: processes (the one spawn helper), the one poll-until helper, paths,
               disk counters, the loopback check
    errors.py, progress.py, shortfall.py: the one user error, progress lines, the one "fell short" margin
"""
