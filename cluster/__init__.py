"""Cluster backends: stand up, inspect, break and tear down a real RocketMQ cluster."""
