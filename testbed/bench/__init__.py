"""The testbed's own benchmarks: its overhead against physical limits and peers.
``testbed bench`` or, from a source checkout, ``python -m benchmarks``.
"""
