"""Judging an analyzed run from its summary: its named figures, whether it reproduced its `expect:` bug
and showed its `signature:`, whether its ledgers can support a verdict of loss, whether the consumers
were served, what an explored run is kept for, what one load step achieved.

May import: analysis.replication and below; never analysis.reconcile."""
