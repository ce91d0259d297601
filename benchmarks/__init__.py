"""Benchmarks: the testbed against physical limits and peers."""
