"""Embedded demo: deterministic synthetic GPU traces with a planted causal structure, in real formats."""
