"""The message contracts of a load, each checked from the ledgers: per-key order, transactions (halves,
check-backs, commits), timers (delivered on time), POP (invisible time, redelivery, acks).

May import: analysis.durability and below."""
