"""connectors.core.digest: the same rows give the same digest however they are cut into batches;
other rows, or the same rows in another order, give another."""

from __future__ import annotations

import datetime as dt
import functools
import random
from decimal import Decimal

import pyarrow as pa
import pytest

from connectors.core.digest import RowsDigest, arrow_digest

ROWS = 3000


@functools.cache
def every_kind(seed: int = 7) -> pa.Table:
    """A column of each Arrow type Spark sends a Python writer, a fifth of the values null."""
    rng = random.Random(seed)

    def column(make):
        return [None if rng.random() < 0.2 else make() for _ in range(ROWS)]

    return pa.table({
        "boolean": column(lambda: rng.random() < 0.5),
        "long": column(lambda: rng.randrange(-(2**63), 2**63)),
        "double": column(rng.random),
        "decimal": pa.array(column(lambda: Decimal(rng.randrange(10**9)).scaleb(-2)), pa.decimal128(12, 2)),
        "string": column(lambda: "é" * rng.randrange(4)),
        "binary": column(lambda: rng.randbytes(rng.randrange(3))),
        "date": pa.array(column(lambda: dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(999))), pa.date32()),
        "timestamp": pa.array(column(lambda: dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rng.randrange(10**12))),
                              pa.timestamp("us", "UTC")),
        "array": column(lambda: [rng.choice([None, 1, 2]) for _ in range(rng.randrange(3))]),
        "struct": column(lambda: {"a": rng.choice([None, 1]), "b": rng.choice([None, "x", "yz"])}),
        "map": pa.array(column(lambda: [(f"k{i}", rng.choice([None, 1.5])) for i in range(rng.randrange(3))]),
                        pa.map_(pa.string(), pa.float64())),
        "null": pa.nulls(ROWS),
    })  # fmt: skip


def cut(table: pa.Table, rng: random.Random) -> list[pa.Table | pa.RecordBatch]:
    """``table``'s rows in random pieces: slices of it (offsets into shared buffers) or copies."""
    edges = sorted(rng.sample(range(1, table.num_rows), rng.randrange(1, 40)))
    pieces = [table.slice(a, b - a) for a, b in zip([0, *edges], [*edges, table.num_rows])]
    return [p.combine_chunks().to_batches()[0] if rng.random() < 0.5 else p for p in pieces]


def test_the_digest_does_not_depend_on_batch_boundaries():
    table, rng = every_kind(), random.Random(1)
    whole = arrow_digest([table])
    for _ in range(30):
        assert arrow_digest(cut(table, rng)) == whole
    # a prefix, continued: what a re-execution compares with what was committed
    digest = RowsDigest()
    for piece in cut(table.slice(0, 1234), rng):
        digest.update(piece)
    prefix = digest.copy()
    digest.update(table.slice(1234))
    assert (prefix.hexdigest(), digest.hexdigest()) == (arrow_digest([table.slice(0, 1234)]), whole)
    # Spark's large variable-width types (spark.sql.execution.arrow.useLargeVarTypes) hold the same rows
    large = table.set_column(4, "string", table["string"].cast(pa.large_string()))
    assert arrow_digest([large]) == whole


@pytest.mark.parametrize("column", range(11))
def test_any_changed_value_null_or_order_changes_the_digest(column):
    table = every_kind()
    whole = arrow_digest([table])
    values = table.column(column).to_pylist()
    first = next(i for i, v in enumerate(values) if v is not None)
    second = next(i for i, v in enumerate(values) if v is not None and v != values[first])
    swapped = list(range(ROWS))
    swapped[first], swapped[second] = second, first
    assert arrow_digest([table.select([column]).take(swapped)]) != arrow_digest([table.select([column])])
    nulled = values[:first] + [None] + values[first + 1 :]
    changed = table.set_column(column, table.field(column), pa.array(nulled, table.field(column).type))
    assert arrow_digest([changed]) != whole
    other = every_kind(seed=8)
    assert arrow_digest([other]) != whole


def test_values_under_nulls_do_not_count():
    # Arrow leaves the value slot of a null undefined: two writers may fill it differently
    valid = pa.py_buffer(bytes([0b101]))
    ones = pa.Array.from_buffers(pa.int64(), 3, [valid, pa.py_buffer(pa.array([1, 1, 1], pa.int64()).buffers()[1])])
    zeros = pa.Array.from_buffers(pa.int64(), 3, [valid, pa.py_buffer(pa.array([1, 0, 1], pa.int64()).buffers()[1])])
    assert ones.to_pylist() == zeros.to_pylist() == [1, None, 1]
    assert arrow_digest([pa.table({"x": ones})]) == arrow_digest([pa.table({"x": zeros})])
