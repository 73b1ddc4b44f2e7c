"""Benchmarks: each of our connectors side by side with Spark's own, on the same data, in one run."""
