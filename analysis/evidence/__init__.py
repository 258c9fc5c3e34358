"""What a run's files other than the ledgers say, Spark-free: the broker groups' topology, RocketMQ's
log marks and store log, the monitor's link probes, and the facts of a summary that the verdict, the
plots and the report share (findings).

May import: nothing else of `analysis`."""
