"""The network faults' machinery, on loopback only (docs/safety.md): iptables rules in the platform's
chains (netrules.py), Toxiproxy link faults (toxiproxy.py, links.py), established connections
(conns.py), and what a fault cuts or slows with one round trip over it (roundtrip.py).

May import: cluster.plan."""
