"""connectors.core.digest: the same rows give the same digest however Arrow cut them into batches,
and other rows give another."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from connectors.core.digest import RecordDigest

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
    result = RecordDigest(batches[0].schema.names)
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
    running = RecordDigest(batch.schema.names)
    running.update(batch.slice(0, 10))
    snapshot = running.copy()
    running.update(batch.slice(10))
    assert snapshot.hexdigest() == digest(batch.slice(0, 10)) and running.hexdigest() == digest(batch)
