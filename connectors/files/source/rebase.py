"""Dates and timestamps written in the hybrid Julian+Gregorian calendar, read as Spark reads them.

Spark 2.x, and Spark 3+ with ``spark.sql.parquet.datetimeRebaseModeInWrite`` (``int96RebaseModeInWrite``,
``spark.sql.avro.datetimeRebaseModeInWrite``) set to LEGACY, store the days and microseconds a value has
in the hybrid calendar (Julian before 1582-10-15) and say so in the file's metadata. Spark's readers move
such values to the proleptic Gregorian calendar (``RebaseDateTime.rebaseJulianToGregorianDays/Micros``):
dates before 1582-10-15 and timestamps before 1900 change. Which files are rebased is decided per file
as ``DataSourceUtils.getRebaseSpec`` does; files not written by Spark follow the read options (CORRECTED,
Spark 4's default: as written; EXCEPTION: fail on values the two calendars may read differently; LEGACY).

Timestamps are rebased in the time zone the writer's session had (the file's ``org.apache.spark.timeZone``),
by per-zone tables in Spark; only the UTC table is implemented (it is the date table at midnights), so a
LEGACY timestamp before 1900 of another or an unrecorded zone fails the read instead of being shifted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.core.arrow import UTC_ZONES

MODES = ("EXCEPTION", "CORRECTED", "LEGACY")
VERSION_KEY = b"org.apache.spark.version"
ZONE_KEY = b"org.apache.spark.timeZone"
LEGACY_DATETIME_KEY = b"org.apache.spark.legacyDateTime"
LEGACY_INT96_KEY = b"org.apache.spark.legacyINT96"

# RebaseDateTime.julianGregDiffSwitchDay and julianGregDiffs: from each of these hybrid-calendar days
# on (days since 1970-01-01) a date is that many days off its proleptic Gregorian self.
_SWITCH_DAYS = np.array([-719164, -682945, -646420, -609895, -536845, -500320, -463795, -390745, -354220,
                         -317695, -244645, -208120, -171595, -141427], np.int64)
_DIFF_DAYS = np.array([2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, 0], np.int64)
LAST_SWITCH_DAY = -141427  # 1582-10-15: RebaseDateTime.lastSwitchJulianDay
LAST_SWITCH_SECONDS = -2208988800  # 1900-01-01T00:00:00Z: lastSwitchJulianTs, the latest switch of any zone
_PER_SECOND = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}

Fix = Callable[[pa.Array], pa.Array]


class CalendarError(RuntimeError):
    """Values the read would give differently from Spark's reader (Spark's SparkUpgradeException);
    not a corrupt file: ignoreCorruptFiles does not skip it."""


def file_mode(metadata: Mapping[bytes, bytes], configured: str, min_version: str, legacy_key: bytes) -> str:
    """The calendar of a file's values as Spark decides it: the read option's when Spark did not write the
    file, LEGACY when a Spark older than ``min_version`` did or it is marked ``legacy_key``."""
    version = metadata.get(VERSION_KEY)
    if version is None:
        return configured
    # Spark compares the version strings, not numbers
    return "LEGACY" if version.decode() < min_version or legacy_key in metadata else "CORRECTED"


@dataclasses.dataclass(frozen=True)
class FileCalendar:
    """How one file's dates and timestamps are read."""

    path: str
    dates: str  # the mode of dates and INT64 timestamps (datetimeRebaseMode)
    int96: str  # of INT96 timestamps (int96RebaseMode)
    zone: str | None  # the writer's session time zone, when the file records it

    @classmethod
    def of(cls, path: str, metadata: Mapping[bytes, bytes] | None, datetime_mode: str,
           int96_mode: str = "CORRECTED") -> FileCalendar:
        metadata = metadata or {}
        zone = metadata.get(ZONE_KEY)
        return cls(path, file_mode(metadata, datetime_mode, "3.0.0", LEGACY_DATETIME_KEY),
                   file_mode(metadata, int96_mode, "3.1.0", LEGACY_INT96_KEY), zone and zone.decode())

    def column_fixes(self, fields: Iterable[pa.Field], wanted: Collection[str],
                     physical: Iterator[str] | None = None) -> dict[str, Fix]:
        """The fixes of the columns ``wanted`` among the file's ``fields`` (all of them, for ``physical``)."""
        fixes = {f.name: self.fix(f.type, f.name, physical) for f in fields}
        return {name: fix for name, fix in fixes.items() if fix is not None and name in wanted}

    def fix(self, kind: pa.DataType, name: str, physical: Iterator[str] | None = None) -> Fix | None:
        """What turns arrays of ``kind`` (the column ``name``) into Spark's values; None when they are read
        as they are. ``physical``: the parquet physical types of the leaves, depth first (every leaf's is
        consumed), to tell INT96 timestamps; None for avro."""
        if pa.types.is_struct(kind):
            fields = [self.fix(f.type, f"{name}.{f.name}", physical) for f in kind]
            return None if not any(fields) else lambda array: _struct(array, fields)
        if pa.types.is_map(kind):
            keys, items = self.fix(kind.key_type, f"{name}.key", physical), self.fix(kind.item_type, f"{name}.value", physical)
            return None if keys is None and items is None else lambda array: _map(array, keys, items)
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            item = self.fix(kind.value_type, f"{name}.element", physical)
            return None if item is None else lambda array: _list(array, item)
        written = next(physical) if physical is not None else None
        if pa.types.is_date32(kind):
            mode, option = self.dates, "datetimeRebaseMode"
        elif pa.types.is_timestamp(kind) and written == "INT96":
            mode, option = self.int96, "int96RebaseMode"
        elif pa.types.is_timestamp(kind) and kind.tz is not None:  # zone-less ones (timestamp_ntz): never rebased
            mode, option = self.dates, "datetimeRebaseMode"
        else:
            return None
        if mode == "CORRECTED":
            return None
        return lambda array: self._rebased(array, mode, option, name)

    def _rebased(self, array: pa.Array, mode: str, option: str, name: str) -> pa.Array:
        dates = pa.types.is_date32(array.type)
        per_day = 1 if dates else 86400 * _PER_SECOND[array.type.unit]
        ints = array.view(pa.int32() if dates else pa.int64())
        lowest = pc.min(ints).as_py()
        last = LAST_SWITCH_DAY if dates else LAST_SWITCH_SECONDS * _PER_SECOND[array.type.unit]
        if lowest is None or lowest >= last:  # every modern column: the calendars agree
            return array
        what = "dates before 1582-10-15" if dates else "timestamps before 1900-01-01T00:00:00Z"
        if mode == "EXCEPTION":
            raise CalendarError(
                f"connectors.files: {self.path}: column {name!r} holds {what}, which the file (not written by Spark) "
                "may hold in the hybrid Julian+Gregorian calendar of Spark 2.x and legacy Hive or in the proleptic "
                f"Gregorian one: set the option {option} to LEGACY to rebase them from the hybrid calendar, or to "
                "CORRECTED to read them as written (Spark's reader fails the same way with EXCEPTION)")
        if not dates and self.zone not in UTC_ZONES:
            zone = f"time zone {self.zone}" if self.zone else "a time zone the file does not record (Spark takes its JVM's)"
            raise CalendarError(
                f"connectors.files: {self.path}: column {name!r} holds {what} written in the hybrid Julian+Gregorian "
                f"calendar (Spark's LEGACY mode) in {zone}: Spark rebases those by per-zone tables that this source "
                "implements for UTC only, so they are not read rather than read shifted; read the file with Spark's "
                "own format, or have it rewritten in CORRECTED mode")
        values = ints.fill_null(0).to_numpy() if ints.null_count else ints.to_numpy()
        # Spark's rebaseDays/rebaseMicros: the diff of the last switch at or before the value (the first's before it)
        at = np.maximum(np.searchsorted(_SWITCH_DAYS * per_day, values, side="right") - 1, 0)
        rebased = (values + _DIFF_DAYS[at] * per_day).astype(values.dtype)
        mask = ints.is_null().to_numpy(zero_copy_only=False) if ints.null_count else None
        return pa.array(rebased, mask=mask).view(array.type)


def fixed(batch: pa.RecordBatch, fixes: Mapping[str, Fix]) -> pa.RecordBatch:
    """``batch`` with the columns ``fixes`` names fixed."""
    if not fixes:
        return batch
    columns = [fixes[name](column) if name in fixes else column for name, column in zip(batch.schema.names, batch.columns)]
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def _struct(array: pa.StructArray, fields: list[Fix | None]) -> pa.Array:
    children = array.flatten()  # the struct's nulls are its children's too: nothing hidden is checked
    children = [fix(child) if fix else child for fix, child in zip(fields, children)]
    return pa.StructArray.from_arrays(children, fields=list(array.type), mask=_nulls(array))


def _spanned(array: pa.Array) -> tuple[pa.Array, int, int]:
    """The offsets of a (maybe sliced) list or map array from 0, and the range of its values they span."""
    offsets = array.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    return (pc.subtract(offsets, first) if first else offsets), first, last - first


def _list(array: pa.Array, item: Fix) -> pa.Array:
    offsets, first, count = _spanned(array)
    return type(array).from_arrays(offsets, item(array.values.slice(first, count)), type=array.type,
                                   mask=_nulls(array))


def _map(array: pa.MapArray, keys: Fix | None, items: Fix | None) -> pa.Array:
    offsets, first, count = _spanned(array)
    key_values, item_values = array.keys.slice(first, count), array.items.slice(first, count)
    return pa.MapArray.from_arrays(offsets, keys(key_values) if keys else key_values,
                                   items(item_values) if items else item_values, type=array.type, mask=_nulls(array))


def _nulls(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None
