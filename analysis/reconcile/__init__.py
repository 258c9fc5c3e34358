"""The reconciliation, in Spark: every business key of the send ledger against the receive ledger (the
key table, the answers the sends got, the run second by second, the load's pace), composing the
checkers below it into the summary's figures.

May import: analysis.replication and below; never analysis.judge (the two are independent)."""
