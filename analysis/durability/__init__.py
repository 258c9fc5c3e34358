"""What the brokers' stores hold and what power losses took: the lost and indeterminate keys looked up
in the stores, damaged deliveries, queue positions acknowledged twice, the run's power cuts.

May import: analysis.ledgers, analysis.evidence."""
