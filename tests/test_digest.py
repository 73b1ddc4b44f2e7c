"""connectors.core.digest: the same rows give the same digest however they are cut into batches;
other rows, or the same rows in another order, give another ordered digest; the
order-free one tells the same rows in another order from other rows."""

from __future__ import annotations

import datetime as dt
import functools
import random
from decimal import Decimal

import pyarrow as pa
import pytest

from connectors.core.digest import Replayed, RowsDigest, arrow_digest

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


# A batch with a column of each kind a Kafka sink meets, digested by column name.

ROWS = 2000


@pytest.fixture(scope="module")
def batch() -> pa.RecordBatch:
    """One column of each kind a sink meets, nulls included."""
    rnd = random.Random(1)

    def maybe(value, null_share=0.2):
        return None if rnd.random() < null_share else value

    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.record_batch({
        "value": pa.array([maybe("x" * rnd.randrange(20), 0.1) for _ in range(ROWS)], pa.string()),
        "key": pa.array([maybe(bytes([rnd.randrange(256)]) * 3) for _ in range(ROWS)], pa.binary()),
        "partition": pa.array([maybe(rnd.randrange(5), 0.5) for _ in range(ROWS)], pa.int32()),
        "headers": pa.array([maybe([{"key": "h", "value": maybe(b"v", 0.5)}] * rnd.randrange(3)) for _ in range(ROWS)],
                            headers),
        "flag": pa.array([maybe(rnd.random() < 0.5) for _ in range(ROWS)]),
        "map": pa.array([maybe([("a", rnd.randrange(3))]) for _ in range(ROWS)], pa.map_(pa.string(), pa.int64())),
        "amount": pa.array([maybe(rnd.random()) for _ in range(ROWS)]).cast(pa.decimal128(20, 5)),
        "at": pa.array([maybe(rnd.randrange(10**9)) for _ in range(ROWS)], pa.timestamp("us", "UTC")),
        "label": pa.array([maybe(rnd.choice("abc")) for _ in range(ROWS)]).dictionary_encode(),
    })


def digest(*batches: pa.RecordBatch) -> str:
    result = RowsDigest(batches[0].schema.names)
    for batch in batches:
        result.update(batch)
    return result.hexdigest()


def test_batch_boundaries_do_not_matter(batch):
    rnd = random.Random(2)
    whole = digest(batch)
    for _ in range(20):
        cuts = [0, *sorted(rnd.sample(range(1, ROWS), rnd.randrange(1, 40))), ROWS]
        assert digest(*(batch.slice(a, b - a) for a, b in zip(cuts, cuts[1:]))) == whole


def test_large_offsets_do_not_matter(batch):
    large = pa.record_batch({name: batch.column(name).cast(pa.large_string()) if name == "value" else batch.column(name)
                             for name in batch.schema.names})
    assert digest(large) == digest(batch)


@pytest.mark.parametrize("column", ["value", "key", "partition", "headers", "flag", "map", "amount", "at", "label"])
def test_a_changed_value_changes_the_digest(batch, column):
    values = batch.column(column).to_pylist()
    row = next(i for i in range(100, ROWS) if values[i] is not None)
    values[row] = None
    changed = pa.record_batch({**{n: batch.column(n) for n in batch.schema.names},
                               column: pa.array(values, batch.column(column).type)})
    assert digest(changed) != digest(batch)


def test_order_matters_and_copies_are_independent(batch):
    assert digest(batch.take(pa.array([1, 0, *range(2, ROWS)]))) != digest(batch)
    running = RowsDigest(batch.schema.names)
    running.update(batch.slice(0, 10))
    snapshot = running.copy()
    running.update(batch.slice(10))
    assert snapshot.hexdigest() == digest(batch.slice(0, 10)) and running.hexdigest() == digest(batch)


def test_the_same_rows_in_another_order_compare_as_reordered(batch):
    """A re-execution after a shuffle brings the committed rows in another order."""
    rng = random.Random(3)
    order = list(range(ROWS))
    rng.shuffle(order)
    shuffled = RowsDigest(batch.schema.names)
    for piece in cut(pa.Table.from_batches([batch.take(pa.array(order))]), rng):
        shuffled.update(piece)
    assert shuffled.compare(digest(batch)) is Replayed.REORDERED
    assert shuffled.compare(digest(batch.take(pa.array(order)))) is Replayed.SAME
    # one column's values moved to other rows: the same values per column, other rows
    remixed = pa.record_batch({**{n: batch.column(n) for n in batch.schema.names},
                               "value": batch.column("value").take(pa.array(order))})
    assert _running(remixed).compare(digest(batch)) is Replayed.OTHER
    assert _running(batch.slice(1)).compare(digest(batch.slice(0, ROWS - 1))) is Replayed.OTHER


def test_every_kind_of_column_has_an_order_free_digest():
    table, rng = every_kind(), random.Random(4)
    order = list(range(ROWS))
    rng.shuffle(order)
    shuffled = RowsDigest()
    for piece in cut(table.take(pa.array(order)), rng):
        shuffled.update(piece)
    assert shuffled.compare(arrow_digest([table])) is Replayed.REORDERED


def test_a_type_without_a_row_hash_compares_by_order_only():
    intervals = pa.table({"id": [1, 2], "every": pa.array([None, (1, 2, 3)], pa.month_day_nano_interval())})
    reversed_rows = _running(intervals.take(pa.array([1, 0])))
    assert " " not in reversed_rows.hexdigest()  # the ordered digest alone
    assert reversed_rows.compare(arrow_digest([intervals])) is Replayed.OTHER


def _running(rows: pa.RecordBatch | pa.Table) -> RowsDigest:
    result = RowsDigest()
    result.update(rows)
    return result
