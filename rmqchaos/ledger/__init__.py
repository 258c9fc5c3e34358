"""The ledgers, the contract between the load, the consumers and the analysis (docs/ledgers.md): the
one schema source (schema.py), the self-verifying message body (body.py), how a process appends its
records durably (journal_write.py) and how a journal reads back (journal_read.py), a record's line
(lines.py, in C where native/ is built), sealing a journal into Parquet (seal.py).

May import: rmqchaos.machine and the root modules."""
