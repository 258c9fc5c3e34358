"""The live cluster observed: the monitor each second (monitor.py), who is master per group
(groups.py), each replica's heartbeats to the controllers (heartbeats.py), and the `expect:` block's
probes after the drain (end_probes.py).

May import: every other part of `cluster`."""
