"""Which directory under the base path a record goes to: :func:`bucketer` builds the runtime
assigner from the options ``bucketAssigner`` (``dateTime``, ``basePath``, ``column``),
``bucketFormat``, ``bucketTimeZone`` and ``bucketColumn``; it splits an Arrow batch by bucket.
The typed assigners with Flink's names are in ``config.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import datetime
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc

from connectors.files.datetime_patterns import strftime_pattern
from connectors.files.partition_directories import directory_name

DEFAULT_FORMAT = "yyyy-MM-dd--HH"


def parse_zone(text: str) -> str:
    try:
        ZoneInfo(text.strip())
    except Exception:
        raise ValueError("unknown time zone; use an IANA name such as UTC or Europe/Berlin") from None
    return text.strip()


# A batch split into (bucket directory, rows) pairs; "" is the base path itself.

Bucketer = Callable[[pa.RecordBatch, float], Iterator[tuple[str, pa.RecordBatch]]]


def bucketer(assigner: str, time_format: str, zone: str, column: str | None) -> Bucketer:
    if assigner == "basePath":
        return lambda batch, now: iter([("", batch)])
    if assigner == "dateTime":
        pattern, tz = strftime_pattern(time_format), ZoneInfo(zone)
        return lambda batch, now: iter([(datetime.fromtimestamp(now, tz).strftime(pattern), batch)])
    assert column is not None
    return lambda batch, now: _by_column(batch, column)


def _by_column(batch: pa.RecordBatch, column: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    # Group by the index of each row's distinct value, so every row lands in exactly one bucket:
    # comparing values again would match 0.0 with -0.0 (two distinct values) and never match NaN.
    # Like Spark's partitionBy, 0.0 and -0.0 stay apart and every NaN is one value.
    encoded = pc.dictionary_encode(batch.column(column), null_encoding="encode")
    rest = batch.drop_columns([column])
    for index, value in enumerate(encoded.dictionary.to_pylist()):
        yield directory_name(column, _spark_text(value)), rest.filter(pc.equal(encoded.indices, index))


def _spark_text(value: object) -> object:
    """NaN and the infinities as Spark names them in a partition directory (and this project's
    file source reads back as doubles); Python's ``nan`` and ``inf`` would read back as strings."""
    if not isinstance(value, float) or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
