"""Benchmarks: each prints one JSON object; performance is measured here, never asserted in tests."""
