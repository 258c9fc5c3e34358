"""This machine: processes the platform starts, ended by PID only (procs.py: the one spawn helper), the
one poll-until helper (wait.py), where things live (paths.py), a disk's I/O counters (diskstats.py),
the one loopback-address check (loopback.py).

May import: the root modules of `rmqchaos` only."""
