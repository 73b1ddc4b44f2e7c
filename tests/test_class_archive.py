"""connectors.testing.class_archive: every Spark driver of a test run starts from one class archive."""

from __future__ import annotations

from connectors.testing import class_archive


def test_the_shared_session_starts_from_the_class_archive(spark):
    archive = class_archive.path()
    assert archive.stat().st_size > 0
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert f"-XX:SharedArchiveFile={archive}" in list(runtime.getInputArguments())
