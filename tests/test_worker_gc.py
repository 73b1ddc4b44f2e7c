"""connectors.core.worker_gc: after PySpark's daemon collects between tasks, the survivors are
frozen, so its next collection walks only what the next task allocated."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pyarrow as pa

# Run as the code of a process whose __main__ is PySpark's daemon, as in a worker it forked.
IN_A_DAEMON_WORKER = textwrap.dedent(
    """
    import gc, importlib.machinery, sys
    sys.modules["__main__"].__spec__ = importlib.machinery.ModuleSpec("pyspark.daemon", None)
    import connectors.core

    class Node:
        pass

    live = [Node() for _ in range(5000)]
    exec("import gc; gc.collect()", {})  # a collection started inside a task's code
    assert gc.get_freeze_count() == 0, "a collection inside a task froze the task's objects"

    gc.collect()  # the daemon's own, between tasks
    frozen = gc.get_freeze_count()
    assert frozen > 5000, frozen
    assert len(gc.get_objects()) < 100, len(gc.get_objects())

    cycle = Node(); cycle.me = cycle; del cycle  # garbage a later task makes
    assert gc.collect() >= 1, "cyclic garbage of a later task was not collected"
    assert gc.get_freeze_count() == frozen, "the next collection froze more than it found live"
    print("ok")
    """
)


def test_a_daemon_workers_survivors_are_frozen_and_later_garbage_still_collected():
    out = subprocess.run([sys.executable, "-c", IN_A_DAEMON_WORKER], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_any_other_process_is_left_alone():
    import connectors.core  # noqa: F401 (this test process is no daemon worker)
    from connectors.core import worker_gc

    assert worker_gc._freeze_survivors not in gc.callbacks
    assert gc.get_freeze_count() == 0


def test_pyspark_daemon_workers_that_ran_connector_code_freeze_their_survivors(spark):
    def run_connector_code(batches):  # as a connector's reader or writer does when unpickled
        import connectors.core  # noqa: F401

        yield from batches

    def report(batches):  # a later task in the same pool of reused workers
        import gc as worker_gc_module
        import sys as worker_sys

        for _ in batches:
            pass
        ran = "connectors.core" in worker_sys.modules
        yield pa.RecordBatch.from_pylist([{"ran_connector": ran, "frozen": worker_gc_module.get_freeze_count()}])

    spark.range(0, 2, 1, 2).mapInArrow(run_connector_code, "id long").collect()
    workers = spark.range(0, 2, 1, 2).mapInArrow(report, "ran_connector boolean, frozen long").collect()
    assert any(w.ran_connector for w in workers), workers
    assert all(w.frozen > 10_000 for w in workers if w.ran_connector), workers
