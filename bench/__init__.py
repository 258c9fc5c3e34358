"""`rmqchaos bench …`: benchmarks that print ratios measured side by side (docs/benchmarks.md). Each
benchmark is a module of its own: producer.py (the platform's producer vs RocketMQ's benchmark
Producer), ledger.py (the send ledger's cost), locust.py (Locust's cost), analyze.py (seal + Spark
`analyze` vs DuckDB), powerfs.py (a broker on the powerfs layer vs one on a plain directory); what
they share: measure.py (one process's cost), rounds.py (the cluster, the topic and the ABBA rounds),
load.py (one measured Locust load); their command line: commands.py.
"""
from bench.commands import add_parsers

__all__ = ["add_parsers"]
