"""PySpark reconciliation of the send ledger against the receive ledger, and the report."""
