"""How the analysis reads the ledgers: this process's Spark session (or a standalone cluster), the
ledgers' Spark schemas and sealed copies, what a send record says, the classification rules and exact
latency percentiles; and the synthetic ledgers and DuckDB reference that check the Spark job.

May import: nothing else of `analysis` (the core `rmqchaos` only)."""
