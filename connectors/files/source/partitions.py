"""Partition columns from ``key=value`` directories, as Spark's file sources discover them.

A file's partition values are the ``key=value`` names of the directories above it, read from its
own directory upwards until a directory that is not ``key=value`` or that is a base path:
``basePath`` if given, else each of the source's paths (a glob pattern is the base of the
directories it matches). So ``/data/dt=1`` read alone has no ``dt`` column, and with
``basePath=/data`` it has. Names are read as Spark's ``partitionBy`` and the file sink's
``bucketAssigner=column`` write them (``partition_directories``: ``%XX`` escapes, Hive's null).

Inferred types follow Spark's order (int, bigint, decimal(n,0), double, timestamp, date, else
string), and the values of one column widen to a type that holds them all, as Spark's do.
"""

from __future__ import annotations

import datetime
import fnmatch
import re
from collections.abc import Iterable, Sequence

import pyarrow as pa
from pyspark.sql.types import (
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    NullType,
    StringType,
    StructField,
    TimestampType,
)

from connectors.core.filesystem import filesystem, full_path
from connectors.core.options import OptionError
from connectors.files import FORMAT, partition_directories
from connectors.files.datetime_patterns import local_instants
from connectors.files.source.listing import is_glob


Values = tuple[tuple[str, "str | None"], ...]  # (column, raw value or None), top directory first


def bases(paths: Sequence[str], base_path: str | None, storage_options: dict | None) -> tuple[str, ...]:
    """The directories where the walk up from a file stops, spelled as the listing spells paths
    (a path naming a file: its directory, as Spark takes it)."""
    def spelled(path: str, file_to_directory: bool = False) -> str:
        fs, inner = filesystem(path, storage_options)
        if file_to_directory and not is_glob(path) and fs.isfile(inner):
            inner = inner.rstrip("/").rsplit("/", 1)[0]
        return full_path(fs, inner).rstrip("/") or "/"

    if base_path is None:
        return tuple(spelled(path, file_to_directory=True) for path in paths)
    base = spelled(base_path)
    for path in paths:
        fixed = spelled(path.split("*")[0].split("?")[0].split("[")[0])
        if fixed != base and not fixed.startswith(base.rstrip("/") + "/"):
            raise OptionError(FORMAT, "basePath", base_path, f"the path {path} is not under it")
    return (base,)


def path_values(base_paths: Sequence[str], path: str) -> Values:
    """The partition values of the file at ``path``."""
    parts = path.rstrip("/").split("/")[:-1]
    found = []
    while parts and not _is_base("/".join(parts) or "/", base_paths):
        pair = partition_directories.parse(parts[-1])
        if pair is None:
            break
        found.append(pair)
        parts.pop()
    return tuple(reversed(found))


def _is_base(directory: str, base_paths: Sequence[str]) -> bool:
    for base in base_paths:
        if directory == base:
            return True
        if is_glob(base):  # a directory the pattern matches, one path component at a time
            have, want = directory.split("/"), base.split("/")
            if len(have) == len(want) and all(fnmatch.fnmatchcase(h, w) for h, w in zip(have, want)):
                return True
    return False


def infer(base_paths: Sequence[str], files: Iterable[str]) -> list[StructField]:
    """The partition columns of ``files``: each file must have the same ones, in the same order."""
    columns: tuple[str, ...] | None = None
    example = ""
    types: dict[str, DataType | None] = {}
    directories: set[str] = set()  # files share directories: each is looked at once
    roots: dict[str, str] = {}  # table directory (in lower case, as Spark compares them) -> a partition one under it
    for path in files:
        directory = path.rsplit("/", 1)[0]
        if directory in directories:
            continue
        directories.add(directory)
        values = path_values(base_paths, path)
        names = tuple(name for name, _ in values)
        if columns is None:
            columns, example = names, path
        elif names != columns:
            raise OptionError(
                FORMAT, "path", ", ".join(base_paths),
                f"conflicting partition directories: {example} has the partition columns {list(columns)}, "
                f"{path} has {list(names)}; read a directory of one layout, or give basePath",
            )  # fmt: skip
        if values:
            roots.setdefault(directory.rsplit("/", len(values))[0].lower(), directory)
        if len(roots) > 1:  # e.g. table/* over table/a=1/b=1 and table/a=2/b=1: b under the tables a=1 and a=2
            raise OptionError(
                FORMAT, "path", ", ".join(base_paths),
                f"conflicting directory structures: {' and '.join(roots.values())} are partition directories under "
                "different tables, as Spark fails too (CONFLICTING_DIRECTORY_STRUCTURES); give basePath",
            )  # fmt: skip
        for name, raw in values:
            types[name] = _wider(types.get(name), _type_of(raw))
    # a column of nulls alone (__HIVE_DEFAULT_PARTITION__) is void, as in Spark 4 (checked on 4.3)
    return [StructField(name, types[name] or NullType(), True) for name in columns or ()]


_INTEGER = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(NaN|Infinity)")
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?")


def _type_of(raw: str | None) -> DataType | None:
    """Spark's inference for one value: None for null."""
    if raw is None:
        return None
    if _INTEGER.fullmatch(raw):
        number = int(raw)
        if -(2**31) <= number < 2**31:
            return IntegerType()
        if -(2**63) <= number < 2**63:
            return LongType()
        digits = len(raw.lstrip("+-").lstrip("0"))
        return DecimalType(digits, 0) if digits <= 38 else DoubleType()
    if _FLOAT.fullmatch(raw):
        return DoubleType()
    try:
        if _TIMESTAMP.fullmatch(raw):
            datetime.datetime.fromisoformat(raw)
            return TimestampType()
        if _DATE.fullmatch(raw):
            datetime.date.fromisoformat(raw)
            return DateType()
    except ValueError:  # a month 13, a February 30
        pass
    return StringType()


_NUMBER_DIGITS = {IntegerType: 10, LongType: 20}


def _wider(left: DataType | None, right: DataType | None) -> DataType | None:
    if left is None or left == right:
        return right
    if right is None:
        return left
    kinds = {type(left), type(right)}
    if kinds <= {IntegerType, LongType, DecimalType, DoubleType}:
        if DoubleType in kinds:
            return DoubleType()
        if DecimalType in kinds:
            digits = max(_NUMBER_DIGITS.get(type(t)) or t.precision for t in (left, right))  # type: ignore[attr-defined]
            return DecimalType(min(digits, 38), 0)
        return LongType()
    if kinds == {DateType, TimestampType}:
        return TimestampType()
    return StringType()


def column(raw: str | None, rows: int, kind: pa.DataType, path: str, name: str,
           zone: datetime.tzinfo = datetime.timezone.utc) -> pa.Array:
    """``rows`` copies of a partition value as the schema's type (a timestamp read in ``zone``); a
    value that is not of it fails, naming the file (as Spark's spark.sql.sources.validatePartitionColumns
    does)."""
    if raw is None:
        return pa.nulls(rows, kind)
    try:
        if pa.types.is_timestamp(kind):
            value = pa.array([raw]).cast(pa.timestamp(kind.unit))
            value = (local_instants(value, zone) if kind.tz is not None else value).cast(kind)
        elif pa.types.is_date(kind):
            value = pa.array([datetime.date.fromisoformat(raw)], kind)
        else:
            value = pa.array([raw]).cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        raise ValueError(
            f"{FORMAT}: {path}: the partition directory {name}={raw} does not hold a {kind} value for column "
            f"{name!r}; declare the column as a type that holds it (string holds any)"
        ) from None
    return pa.repeat(value[0], rows)
