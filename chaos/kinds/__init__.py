"""One module per fault kind; each registers itself with chaos.protocol.register on import
(chaos/registry.py imports them all)."""
