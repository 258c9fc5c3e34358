"""What a node stands on below RocketMQ: its store on a FUSE layer that can forget unsynced writes
(powerfs.py) and its own clock through libfaketime (clock.py).

May import: cluster.plan."""
