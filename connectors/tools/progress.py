"""``ProgressListener``: one line per micro-batch, and the numbers behind it.

Attach it to a session (``spark.streams.addListener(ProgressListener())``) and every query prints
``batch id, input rows, rows/s, Kafka lag, rows written`` after each micro-batch. The same numbers
are kept per query in ``listener.stats[query_name_or_id]`` for programs that want them.

Kafka lag is read off the progress itself: a Kafka source reports its end offset and the latest
offset (``reportLatestOffset``) as ``{"topic": {"partition": offset}}``, so the lag of a batch is
the sum of ``latest - end`` over its partitions (Spark's own Kafka source reports the same shape).
Spark 4.1 asks no source for its latest offset, so there no lag is shown.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TextIO

from pyspark.sql.streaming import StreamingQueryListener

from connectors.core.spark_compat import ADMISSION_CONTROL


def kafka_lag(end_offset: str | None, latest_offset: str | None) -> int | None:
    """Records between a source's end and latest offsets, or None if they are not Kafka-shaped."""
    try:
        end, latest = json.loads(end_offset or "null"), json.loads(latest_offset or "null")
    except json.JSONDecodeError:
        return None
    if not isinstance(end, dict) or not isinstance(latest, dict):
        return None
    lag = 0
    for topic, partitions in latest.items():
        if not isinstance(partitions, dict):
            return None
        for partition, offset in partitions.items():
            done = end.get(topic, {}).get(partition, 0) if isinstance(end.get(topic), dict) else 0
            if not isinstance(offset, int) or not isinstance(done, int):
                return None
            lag += max(0, offset - done)
    return lag


@dataclasses.dataclass
class QueryStats:
    batches: int = 0
    input_rows: int = 0
    rows_written: int = 0
    kafka_lag: int | None = None
    last_rows_per_s: float = 0.0


class ProgressListener(StreamingQueryListener):
    """Prints per-batch progress lines and keeps :class:`QueryStats` per query."""

    def __init__(self, out: TextIO | None = None, quiet: bool = False):
        self.out = out or sys.stdout
        self.quiet = quiet
        self.stats: dict[str, QueryStats] = {}

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        name = progress.name or str(progress.id)
        stats = self.stats.setdefault(name, QueryStats())
        stats.batches += 1
        stats.input_rows += progress.numInputRows
        stats.last_rows_per_s = progress.processedRowsPerSecond
        written = progress.sink.numOutputRows
        if written > 0:
            stats.rows_written += written
        # Spark 4.1 reports what latestOffset() returned, the batch's end: no lag to read there.
        lags = [kafka_lag(s.endOffset, s.latestOffset) for s in progress.sources] if ADMISSION_CONTROL else []
        known = [lag for lag in lags if lag is not None]
        stats.kafka_lag = sum(known) if known else None
        if not self.quiet:
            parts = [f"[{name}] batch {progress.batchId}: {progress.numInputRows:,} rows",
                     f"{progress.processedRowsPerSecond:,.0f} rows/s"]
            if stats.kafka_lag is not None:
                parts.append(f"kafka lag {stats.kafka_lag:,}")
            if written >= 0:
                parts.append(f"{written:,} written")
            print(", ".join(parts), file=self.out, flush=True)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass
