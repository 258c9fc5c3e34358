"""A replicated broker group under faults: which node stored each acknowledged send, how long each
failover took and what it cost, who served a repeated delivery.

May import: analysis.contracts and below."""
