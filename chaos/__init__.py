"""Fault injectors acting on one named node of a running cluster."""
