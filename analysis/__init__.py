"""The analysis: a run's ledgers and evidence -> its summary, verdict and reports.

`job.py` is the `analyze` stage's entry (also a spark-submit script). The sub-packages, each answering
one question, import only downward in this order (pyproject.toml [tool.importlinter]):

    history      the run history: rows, trends, regression flags
    report       the HTML reports, their plots and the verdict's words
    judge        did a run reproduce its bug, show its signature, was it complete and served
    reconcile    the Spark pass: every key of the send ledger against the receive ledger
    replication  a replicated group's failovers: who stored each ack, who served a repeat
    contracts    order, transactions, timers and POP: the message contracts of a load
    durability   what the stores hold and what power losses took
    evidence     what a run's other files say (topology, logs, link probes, the summary's facts)
    ledgers      reading the ledgers in Spark: session, schemas, sealed copies, rules
"""
