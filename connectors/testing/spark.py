"""The local SparkSession used by tests, the crash harness, examples and benchmarks."""

from __future__ import annotations

import os
import sys
from pathlib import Path

LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")
# A JVM class-data archive (:mod:`connectors.testing.class_archive`): the driver JVM maps the
# classes a Spark query loads instead of parsing them from the jars, which starts it faster.
CLASS_ARCHIVE_ENV = "CONNECTORS_SPARK_CLASS_ARCHIVE"
DUMP_CLASS_ARCHIVE_ENV = "CONNECTORS_SPARK_CLASS_ARCHIVE_DUMP"  # set while the archive is being made


def local_session(
    app_name: str = "connectors", cores: int = 2, conf: dict[str, str] | None = None, master: str | None = None,
    java_options: str = "",
):
    """A small local SparkSession: ``local[cores]``, UI off, few shuffle partitions.

    ``master`` points it at a cluster instead (e.g. ``spark://host:port``), with small executors.

    ``PYSPARK_PYTHON`` is pinned to this interpreter so executors import the installed package.
    ``conf`` adds Spark settings (e.g. ``spark.jars.packages``). Spark logs only errors, from its
    start on (:data:`LOG4J2_PROPERTIES`); ``CONNECTORS_SPARK_LOG_LEVEL=warn`` (or info, ...) shows more.
    The driver JVM maps the class archive :data:`CLASS_ARCHIVE_ENV` names, if the file exists, and
    takes ``java_options`` besides.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master or f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.default.parallelism", str(cores))
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.driver.memory", os.environ.get("CONNECTORS_DRIVER_MEMORY", "2g"))
        .config("spark.python.worker.reuse", "true")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executor.memory", "768m")
        .config("spark.ui.showConsoleProgress", "false")
        # read by the driver JVM's launch: a level set after getOrCreate() misses the start-up lines
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES} "
                f"-Dconnectors.spark.log.level={os.environ.get('CONNECTORS_SPARK_LOG_LEVEL', 'error')}"
                f"{_class_archive_option()} {java_options}".rstrip())
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _class_archive_option() -> str:
    archive = os.environ.get(CLASS_ARCHIVE_ENV)
    if archive and os.environ.get(DUMP_CLASS_ARCHIVE_ENV):
        return f" -XX:ArchiveClassesAtExit={archive}"
    # a JVM of another build, or another class path, ignores the archive and loads from the jars
    return f" -XX:SharedArchiveFile={archive}" if archive and os.path.exists(archive) else ""


def run_available_now(writer):
    """Start ``writer`` (a ``DataStreamWriter``) to read what its sources hold now, then stop.

    ``Trigger.AvailableNow`` where Spark runs it in micro-batches bounded by the sources' limits
    (4.2+); Spark 4.1's AvailableNow runs one micro-batch only (:mod:`connectors.core.spark_compat`),
    so there the query runs with the default trigger until ``processAllAvailable()`` returns and
    is stopped. Either way the caller may ``awaitTermination()`` the query returned.
    """
    from connectors.core.spark_compat import ADMISSION_CONTROL

    if ADMISSION_CONTROL:
        return writer.trigger(availableNow=True).start()
    query = writer.start()
    query.processAllAvailable()
    query.stop()
    return query
