"""An order-sensitive digest of Arrow rows that does not depend on how they are cut into batches.

A sink that skips work already committed when Spark re-executes a batch must know that the
re-execution brings the same rows: equal row counts over other rows (a source whose partition
count changed before a restart) would otherwise be taken for the rows committed, and the skip
would lose some rows and duplicate others. The sink records a digest of the rows it committed
and compares it with the digest of the same number of rows of the re-execution.

Cheap: it hashes Arrow's buffers (SHA-256, which current CPUs run in hardware at about 2 GB/s),
never a Python object per row. Independent of batch boundaries: each column feeds separate
streams (null positions, value bytes, value lengths, nested children) whose bytes for rows
[0, n) are the same however those rows are split into record batches or slices, so Spark's
batch sizes, which are configuration, never make equal rows look different. Fail-safe: a type it
has no canonical form for raises TypeError rather than being left out of the digest.

Beside it, an order-independent digest of the same rows: the sum of a hash per row (polars'
``hash_rows``), modulo 2**64. A batch re-executed after a shuffle can bring a partition the same
rows in another order (Spark fetches shuffle blocks in random order), and when it brings exactly
the rows committed, nothing more, skipping them all is right whatever their order. polars keeps
its row hash stable only within one version, so the text names the version (and the machine): a
replay under another compares by order only.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import platform
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@functools.cache
def _row_hash_name() -> str:
    """Names the row hash of the unordered digest: equal names, equal hashes for equal rows."""
    import polars  # noqa: PLC0415 - heavy; only exactly-once sinks pay for it

    return f"polars-{polars.__version__}-{platform.machine()}"


class Replayed(enum.Enum):
    """How rows compare with the rows a digest was made of."""

    SAME = "the same rows in the same order"
    REORDERED = "the same rows in another order"
    OTHER = "other rows"


class RowsDigest:
    """A running digest: ``update()`` with consecutive rows, ``hexdigest()`` of all rows so far;
    of the ``columns`` named (in that order), or of every column."""

    def __init__(self, columns: Sequence[str] | None = None) -> None:
        self.columns = None if columns is None else tuple(columns)
        self.rows = 0
        self._streams: dict[str, hashlib._Hash] = {}
        self._lengths: dict[str, int] = {}  # elements seen per array path: null positions are offset by it
        self._unordered: int | None = 0  # sum of the row hashes mod 2**64; None: a type polars cannot hash

    def update(self, rows: pa.RecordBatch | pa.Table) -> None:
        if self.columns is not None:
            rows = rows.select(list(self.columns))
        for index, column in enumerate(rows.columns):
            for array in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
                self._array(str(index), array)
        self.rows += rows.num_rows
        if self._unordered is not None and rows.num_rows:
            self._unordered = _add_row_hashes(self._unordered, rows)

    def copy(self) -> RowsDigest:
        clone = RowsDigest(self.columns)
        clone.rows, clone._lengths, clone._unordered = self.rows, dict(self._lengths), self._unordered
        clone._streams = {name: stream.copy() for name, stream in self._streams.items()}
        return clone

    def hexdigest(self) -> str:
        """The ordered digest, then (when every type has a row hash) the unordered one:
        ``<sha-256> <row hash name>:<sum>``."""
        total = hashlib.sha256(str(self.rows).encode())
        for name in sorted(self._streams):
            total.update(name.encode() + b"\0" + self._streams[name].digest())
        if self._unordered is None:
            return total.hexdigest()
        return f"{total.hexdigest()} {_row_hash_name()}:{self._unordered:016x}"

    def compare(self, expected: str) -> Replayed:
        """These rows against ``expected``, a :meth:`hexdigest` of the same number of rows (or a
        digest written before the unordered part existed: then only SAME or OTHER)."""
        ordered, _, unordered = expected.partition(" ")
        mine, _, my_unordered = self.hexdigest().partition(" ")
        if mine == ordered:
            return Replayed.SAME
        if unordered and unordered == my_unordered:
            return Replayed.REORDERED
        return Replayed.OTHER

    def _array(self, path: str, array: pa.Array) -> None:
        if len(array) == 0:
            return
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        seen = self._lengths.get(path, 0)
        self._lengths[path] = seen + len(array)
        if array.null_count:
            nulls = pc.indices_nonzero(pc.is_null(array))
            self._values(path + ":nulls", pc.add(nulls, pa.scalar(seen, pa.uint64())))
            array = pc.drop_null(array)  # values under a null are undefined: only valid ones count
            if len(array) == 0:
                return
        kind = array.type
        if pa.types.is_boolean(kind):
            self._values(path, pc.cast(array, pa.uint8()))  # bit-packed: a byte per value
        elif pa.types.is_binary(kind) or pa.types.is_string(kind) or pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
            self._values(path + ":lengths", pc.cast(pc.binary_length(array), pa.int64()))
            width = 8 if pa.types.is_large_binary(kind) or pa.types.is_large_string(kind) else 4
            offsets = np.frombuffer(array.buffers()[1], f"<i{width}", len(array) + 1, array.offset * width)
            if offsets[-1] > offsets[0]:
                self._stream(path).update(memoryview(array.buffers()[2])[offsets[0] : offsets[-1]])
        elif pa.types.is_map(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
            if pa.types.is_map(kind):  # the same entries as a list of key-value structs
                array = pa.ListArray.from_arrays(array.offsets, array.values)
            self._values(path + ":lengths", pc.cast(pc.list_value_length(array), pa.int64()))
            self._array(path + "[]", array.flatten())
        elif pa.types.is_fixed_size_list(kind):
            self._array(path + "[]", array.flatten())
        elif pa.types.is_struct(kind):
            for index, child in enumerate(array.flatten()):
                self._array(f"{path}.{index}", child)
        elif _fixed_width(kind):
            self._values(path, array)
        else:
            raise TypeError(f"no row digest for Arrow type {kind}")

    def _values(self, name: str, array: pa.Array) -> None:
        """The value bytes of a fixed-width array without nulls, from its offset on."""
        width = array.type.bit_width // 8
        self._stream(name).update(memoryview(array.buffers()[1])[array.offset * width : (array.offset + len(array)) * width])

    def _stream(self, name: str):
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = hashlib.sha256()
        return stream


def _add_row_hashes(total: int, rows: pa.RecordBatch | pa.Table) -> int | None:
    import polars  # noqa: PLC0415
    from polars.exceptions import PanicException  # noqa: PLC0415

    try:
        hashes = polars.from_arrow(rows).hash_rows().to_numpy()
    except (PanicException, Exception):  # noqa: BLE001 - a type polars cannot take (month_day_nano_interval): order only
        return None
    return (total + int(hashes.sum(dtype=np.uint64))) % 2**64  # numpy's uint64 sum wraps: the sum mod 2**64


def _fixed_width(kind: pa.DataType) -> bool:
    try:
        return kind.bit_width % 8 == 0 and kind.bit_width > 0
    except ValueError:  # not a fixed-width type
        return False


def arrow_digest(batches: Iterable[pa.RecordBatch | pa.Table]) -> str:
    """The digest of the rows of ``batches``, in order."""
    digest = RowsDigest()
    for batch in batches:
        digest.update(batch)
    return digest.hexdigest()
