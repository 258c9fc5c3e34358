"""What a broker's store holds, read offline from its files or asked of the broker: a message by topic
and key (messages.py), its topics, subscription groups and consumer offsets (metadata.py).

May import: cluster.plan."""
