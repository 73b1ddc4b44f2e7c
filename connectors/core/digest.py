"""A digest of the rows a sink wrote: equal for the same rows in the same order, however Arrow
cut them into batches.

Exactly-once sinks skip, by record count, the part of a re-run partition that an earlier attempt
committed. That is right only if the partition holds the same records as then; when the source's
partitioning changed before a restart (its partition count, a ``repartition``), the count lands
on other rows and records are lost or written twice. A sink keeps the :class:`RecordDigest` of
the committed records with its progress and compares it over the same prefix on replay, so such
a replay fails instead.

The digest reads Arrow buffers, never per-record Python objects: for each column, the row
numbers of its nulls, the lengths of variable-size values and the value bytes, each as its own
stream. Each stream of a whole input is the concatenation of the streams of its batches, so the
digest does not depend on batch boundaries (``spark.sql.execution.arrow.maxRecordsPerBatch``, a
retry that skips to the middle of a batch), nor on ``string`` against ``large_string`` offsets.
It does depend on the column types (an ``int`` column hashes 4 bytes a value, a ``bigint`` 8),
which a query does not change between attempts; a difference makes a replay fail, never skip.

Each stream is checked with CRC-32 (zlib, several times faster than a cryptographic hash; the
cost is in docs/kafka-sink.md), and the digest is the BLAKE2b of the streams' CRCs and lengths.
Different records of the same count thus go unnoticed with a chance of one in 2^32: a check
against a changed partitioning, not against an adversary.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["RecordDigest"]



class RecordDigest:
    """The running digest of ``columns`` of the record batches passed to :meth:`update`.

    Examples
    --------
    >>> whole, pieces = RecordDigest(["value"]), RecordDigest(["value"])
    >>> batch = pa.record_batch({"value": ["a", None, "bc"]})
    >>> whole.update(batch)
    >>> pieces.update(batch.slice(0, 1)); pieces.update(batch.slice(1))
    >>> whole.hexdigest() == pieces.hexdigest()
    True
    """

    def __init__(self, columns: Sequence[str]):
        self.columns = tuple(columns)
        self.rows = 0
        self._streams: dict[tuple[str, str], tuple[int, int]] = {}  # (path, part) -> (CRC-32, bytes)
        self._counts: dict[str, int] = {}  # values seen per column path: where a null lies

    def update(self, batch: pa.RecordBatch) -> None:
        for name in self.columns:
            self._array(name, batch.column(name))
        self.rows += batch.num_rows

    def copy(self) -> RecordDigest:
        twin = RecordDigest(self.columns)
        twin.rows, twin._counts = self.rows, dict(self._counts)
        twin._streams = dict(self._streams)
        return twin

    def hexdigest(self) -> str:
        final = hashlib.blake2b(str(self.rows).encode(), digest_size=16)
        for (path, part), (crc, size) in sorted(self._streams.items()):
            final.update(f"\0{path}\0{part}\0{crc}\0{size}".encode())
        return final.hexdigest()

    def _feed(self, path: str, part: str, data: pa.Buffer | bytes) -> None:
        if len(data):  # a stream exists only if it has bytes: its existence depends on content alone
            crc, size = self._streams.get((path, part), (0, 0))
            self._streams[(path, part)] = (zlib.crc32(data, crc), size + len(data))

    def _array(self, path: str, array: pa.Array) -> None:
        array = _plain(array)
        seen = self._counts.get(path, 0)
        self._counts[path] = seen + len(array)
        if array.null_count:
            nulls = pc.add(pc.indices_nonzero(array.is_null()), pa.scalar(seen, pa.uint64()))
            self._feed(path, "nulls", _fixed_width(nulls))
            array = array.drop_null()
        kind = array.type
        if pa.types.is_null(kind):
            return
        if pa.types.is_boolean(kind):
            self._feed(path, "values", _fixed_width(array.cast(pa.uint8())))
        elif pa.types.is_binary(kind) or pa.types.is_string(kind) or pa.types.is_large_binary(kind) \
                or pa.types.is_large_string(kind):
            self._array_bytes(path, array)
        elif pa.types.is_fixed_size_binary(kind) or _is_fixed_width(kind):
            self._feed(path, "values", _fixed_width(array))
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            self._feed(path, "lengths", _fixed_width(pc.list_value_length(array).cast(pa.int64())))
            self._array(path + "[]", array.flatten())
        elif pa.types.is_struct(kind):
            for index in range(kind.num_fields):
                self._array(f"{path}.{kind.field(index).name}", array.field(index))
        else:  # unions and other rare types: slow, but still independent of batch boundaries
            self._feed(path, "values", "".join(f"{value!r}\0" for value in array.to_pylist()).encode())

    def _array_bytes(self, path: str, array: pa.Array) -> None:
        self._feed(path, "lengths", _fixed_width(pc.binary_length(array).cast(pa.int64())))
        offsets, data = array.buffers()[1:3]
        if data is None or not len(array):
            return
        width = 8 if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type) else 4
        first, last = (int.from_bytes(offsets[i * width:(i + 1) * width], "little", signed=True)
                       for i in (array.offset, array.offset + len(array)))
        self._feed(path, "values", data[first:last])


def _plain(array: pa.Array) -> pa.Array:
    """``array`` in the types :meth:`RecordDigest._array` hashes: the same values, other encodings."""
    kind = array.type
    if isinstance(kind, pa.ExtensionType):
        return _plain(array.storage)
    if pa.types.is_dictionary(kind):
        return _plain(array.dictionary_decode())
    if pa.types.is_map(kind):  # as the list of its entries, which the list kernels take
        return array.cast(pa.list_(pa.struct([kind.key_field, kind.item_field])))
    if pa.types.is_binary_view(kind) or pa.types.is_string_view(kind):
        return array.cast(pa.large_binary())
    return array


def _is_fixed_width(kind: pa.DataType) -> bool:
    try:
        return kind.bit_width % 8 == 0 and not pa.types.is_boolean(kind)
    except ValueError:  # not a fixed-width type
        return False


def _fixed_width(array: pa.Array) -> pa.Buffer:
    """The value bytes of a null-free fixed-width array, without what a slice left out."""
    width = array.type.byte_width
    return array.buffers()[1][array.offset * width:(array.offset + len(array)) * width]
