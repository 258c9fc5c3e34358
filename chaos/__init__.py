"""Faults: the protocol and registry (protocol.py), one module per kind (kinds/), and the scheduler
that runs every occurrence on the load's clock (scheduler.py)."""
