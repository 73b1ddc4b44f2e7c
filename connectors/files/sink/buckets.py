"""Which directory under the base path a record goes to: :func:`bucketer` builds the runtime
assigner from the options ``bucketAssigner`` (``dateTime``, ``basePath``, ``column``),
``bucketFormat``, ``bucketTimeZone`` and ``bucketColumn``; it splits an Arrow batch by bucket.
The typed assigners with Flink's names are in ``config.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc

from connectors.files.partition_directories import directory_name

DEFAULT_FORMAT = "yyyy-MM-dd--HH"

# Java DateTimeFormatter letters (the subset meaningful in a directory name) -> strftime.
_JAVA_TO_STRFTIME = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_PATTERN_TOKEN = re.compile(r"'([^']*)'|(yyyy|yy|MM|dd|HH|mm|ss)|([A-Za-z])|([^A-Za-z']+)")


def strftime_pattern(java_pattern: str) -> str:
    """Flink's ``DateTimeBucketAssigner`` format (Java pattern letters) as a strftime pattern.

    Raises ValueError on letters other than yyyy, yy, MM, dd, HH, mm, ss (quoted text is literal).
    """
    out, position = [], 0
    for match in _PATTERN_TOKEN.finditer(java_pattern):
        if match.start() != position:
            break
        position = match.end()
        literal, token, unknown, other = match.groups()
        if unknown:
            raise ValueError(f"unsupported pattern letter {unknown!r}; use yyyy, yy, MM, dd, HH, mm, ss or 'quoted text'")
        text = literal if literal is not None else other
        out.append(_JAVA_TO_STRFTIME[token] if token else text.replace("%", "%%"))
    if position != len(java_pattern) or not java_pattern:
        raise ValueError("expected a date pattern such as yyyy-MM-dd--HH")
    return "".join(out)


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
    values = batch.column(column)
    rest = batch.drop_columns([column])
    for value in pc.unique(values).to_pylist():
        mask = pc.is_null(values) if value is None else pc.equal(values, pa.scalar(value, values.type))
        yield directory_name(column, value), rest.filter(pc.fill_null(mask, False))
