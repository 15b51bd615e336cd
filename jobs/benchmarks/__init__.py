"""Benchmark suites behind ``jobs/benchmark.py``: each measures the store against a baseline run in the
same process (``send``: send and dispatch, key look-ups; ``filter``: filtered reads; ``pull``: pulls)."""
