"""Test and demo support: local Kafka, PostgreSQL and Schema Registry, the local SparkSession,
the crash harness.

Shipped with the package (like ``pyspark.testing``) so the examples, benchmarks and users' own
tests can start the same real services and crash the same way.
"""
