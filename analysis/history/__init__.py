"""Runs over time: the run history (DuckDB, one row per analyzed run), regression flags against a
scenario's trailing runs, and the report's trends.

May import: every other sub-package of `analysis`."""
