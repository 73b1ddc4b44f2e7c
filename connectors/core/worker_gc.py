"""Keep the full garbage collection PySpark's daemon runs after every task cheap.

A Python worker forked by PySpark's daemon and reused across tasks runs ``gc.collect()`` after
every task. That pass walks every object the worker holds, and pyspark (with pandas), pyarrow
and a connector add up to tens of thousands of objects; when the workers of a micro-batch
collect at once, that costs more than a sink's own work and slows Spark's offset commit, which
runs at that moment (measured in docs/file-sink.md).

Once our code runs in such a worker, :func:`install` hooks the end of each of the daemon's
collections: what survives it is live and long-lived (modules, caches), and is frozen
(``gc.freeze``, Python's tool for long-lived heaps), so the next pass walks only what the next
task allocated. Cyclic garbage made by tasks is collected as before. Collections Python starts
on its own, in the middle of a task, freeze nothing: the task's own objects are alive then.

The price: an object kept across tasks that later becomes part of a reference cycle is never
collected. What the connectors keep across tasks (idle Kafka producers, an idle database
connection) is closed explicitly when dropped, so at most its small Python shell stays; over
300 micro-batches the frozen heap and the workers' memory stayed flat.
"""

from __future__ import annotations

import gc
import sys


def install() -> None:
    """Hook the daemon's collections, once, in a worker forked by PySpark's daemon; a no-op in
    any other process (a driver, a foreachBatch function, a worker started without the daemon)."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) != "pyspark.daemon":
        return
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)


def _freeze_survivors(phase: str, info: dict) -> None:
    if phase != "stop" or info["generation"] != 2:  # a full collection has just finished
        return
    # The collection was called by the daemon's own code (its loop between tasks), not by Python
    # when a task allocated.
    if sys._getframe(1).f_globals is vars(sys.modules["__main__"]):
        gc.freeze()
