"""A JVM class-data archive that makes a Spark driver start faster.

Most of a local Spark driver's start is the JVM reading and verifying the same thousands of
classes from Spark's jars. Java's dynamic class-data sharing writes the classes one run loaded
into an archive (``-XX:ArchiveClassesAtExit``) that later JVMs map instead
(``-XX:SharedArchiveFile``). The test suite starts a driver in every crash-harness run, so
:func:`ensure` makes the archive once per environment, Spark and Java, and exports its path in
:data:`connectors.testing.spark.CLASS_ARCHIVE_ENV`, which :func:`~connectors.testing.spark.local_session`
passes to the JVMs it starts, here and in child processes. What it saves: README, *Tests*.

A JVM of another build or class path ignores the archive; if making it fails, the tests run as
before, without it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from connectors.testing.spark import CLASS_ARCHIVE_ENV, DUMP_CLASS_ARCHIVE_ENV

BUILD_TIMEOUT = 300.0


def path() -> Path:
    """The archive for this interpreter's pyspark and the ``java`` it would start. It lives in the
    environment whose Spark jars it holds classes of, and goes with it (``make clean``, the wheel
    test's throwaway venvs)."""
    import pyspark

    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    key = "\0".join([pyspark.__version__, os.path.realpath(java or "java")])
    return Path(sys.prefix, "var", "connectors", f"spark-classes-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa")


def ensure(workload: str, pythonpath: Sequence[str] = ()) -> Path | None:
    """Make the archive unless it exists, export its path, and return it; None if it failed.

    ``workload``: a module (importable from ``pythonpath``) whose run loads the classes to archive
    and ends with :func:`exit_jvm`.
    """
    archive = path()
    if not archive.exists():
        try:
            archive.parent.mkdir(parents=True, exist_ok=True)
            fd, partial = tempfile.mkstemp(dir=archive.parent, suffix=".partial")
        except OSError as exc:
            print(f"connectors: no Spark class archive: {exc}", file=sys.stderr)
            return None
        os.close(fd)
        env = {**os.environ, CLASS_ARCHIVE_ENV: partial, DUMP_CLASS_ARCHIVE_ENV: "1",
               "PYTHONPATH": os.pathsep.join([*pythonpath, os.environ.get("PYTHONPATH", "")])}
        try:
            done = subprocess.run([sys.executable, "-m", workload], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, timeout=BUILD_TIMEOUT)
            if done.returncode != 0 or os.path.getsize(partial) == 0:
                print(f"connectors: no Spark class archive (exit {done.returncode}): "
                      f"{done.stderr.decode(errors='replace')[-2000:]}", file=sys.stderr)
                return None
            os.replace(partial, archive)  # whole or not at all: a killed build leaves only a .partial
        except subprocess.TimeoutExpired:
            print(f"connectors: no Spark class archive: its build took over {BUILD_TIMEOUT:.0f} s", file=sys.stderr)
            return None
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    os.environ[CLASS_ARCHIVE_ENV] = str(archive)
    return archive


def exit_jvm(spark) -> None:
    """Stop ``spark`` and wait for its driver JVM to exit, which writes the archive it was asked for."""
    gateway = spark.sparkContext._gateway.proc  # the JVM pyspark started; EOF on its stdin ends it
    spark.stop()
    gateway.stdin.close()
    gateway.wait(timeout=BUILD_TIMEOUT)
