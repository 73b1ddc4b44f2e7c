"""PostgreSQL's binary COPY format, rendered from Arrow in C++ (``pyarrow.compute``).

The server takes binary values without parsing text, which for numbers and timestamps costs it
less CPU than CSV (docs/jdbc.md). A binary value must however be exactly the column's type (an int8 read as
a float8 is a wrong number, not an error), so the encoding of each column is chosen from its
PostgreSQL type when the query starts, and every transaction checks that type again (see
``statements.CopyStatement``). Types without an encoding here (json, uuid, arrays, ...) keep CSV.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, header extension length
TRAILER = b"\xff\xff"  # a field count of -1 ends the data

_EPOCH_DAYS = 10_957  # PostgreSQL counts from 2000-01-01, Arrow from 1970-01-01
_EPOCH_MICROS = _EPOCH_DAYS * 86_400 * 1_000_000


@functools.cache
def _scalars() -> tuple[pa.Scalar, pa.Scalar]:
    """(a null field: length -1, the empty separator), made at the first render: building an
    Arrow scalar from Python imports pandas, which the driver's Python processes that
    plan and commit each micro-batch never need."""
    return pa.scalar(b"\xff\xff\xff\xff", pa.large_binary()), pa.scalar(b"", pa.large_binary())


# the big-endian numpy type of each fixed-width encoding
_DTYPES = {"bool": "u1", "int2": ">i2", "int4": ">i4", "int8": ">i8", "float4": ">f4", "float8": ">f8",
           "date": ">i4", "timestamp": ">i8"}  # fmt: skip


def _decimal_words(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The unscaled values of a decimal128 column as (low, high) int64 halves of two's complement."""
    words = np.frombuffer(column.buffers()[1], "<i8", 2 * len(column), column.offset * 16).reshape(-1, 2)
    return words[:, 0], words[:, 1]


_EXACT_INTEGER = 2**53  # every integer up to this magnitude is exactly a double


def _decimal_doubles(column: pa.Array) -> np.ndarray:
    """A decimal128 column as the nearest doubles (nulls as 0): what float8 input makes of its text.

    Arrow's own cast multiplies by an inexact 10^-scale and can be one unit in the last place
    off. An unscaled value below 2^53 divided by 10^scale (exact up to 10^22) is one correctly
    rounded operation; any other value goes through its text, which Arrow parses correctly rounded.
    """
    scale = column.type.scale
    low, high = _decimal_words(column)
    exact = (high == low >> 63) & (-_EXACT_INTEGER <= low) & (low <= _EXACT_INTEGER) & (0 <= scale <= 22)
    if column.null_count:
        exact |= column.is_null().to_numpy(zero_copy_only=False)  # whatever lies under a null is never read
    values = np.where(exact, low, 0).astype(np.float64) / 10.0**scale
    if not exact.all():
        rest = np.flatnonzero(~exact)
        values[rest] = column.take(rest).cast(pa.string()).cast(pa.float64()).to_numpy()
    return values


# numeric: base-10000 digits, most significant first, after a header of (ndigits, weight of the
# first digit, sign, display scale). The server strips leading and trailing zero digits and
# rounds to the column's typmod, as it does with text input.
_NBASE, _NUMERIC_NEG = np.uint64(10_000), 0x4000
_LIMB = np.uint64(0xFFFF_FFFF)


def _magnitudes(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """(negative, |value| as 32-bit limbs in uint64s, least significant first) of 128-bit values."""
    negative = high < 0
    low, high = low.view(np.uint64), high.view(np.uint64)
    # two's complement negation, ~x + 1: the low word carries into the high one when it is 0
    low, high = np.where(negative, ~low + np.uint64(1), low), np.where(negative, ~high + (low == 0), high)
    return negative, [low & _LIMB, low >> np.uint64(32), high & _LIMB, high >> np.uint64(32)]


def _base_10000(limbs: list[np.ndarray], at_least: int) -> list[np.ndarray]:
    """The base-10000 digits of the numbers in ``limbs``, least significant first: at least
    ``at_least`` of them, and as many as the largest number needs."""
    digits: list[np.ndarray] = []
    while True:
        while len(limbs) > 2 and not limbs[-1].any():
            limbs = limbs[:-1]
        if len(limbs) <= 2:  # below 2^64: plain uint64 division from here on
            value = limbs[0] | (limbs[1] << np.uint64(32)) if len(limbs) == 2 else limbs[0]
            while len(digits) < at_least or value.any():
                value, digit = np.divmod(value, _NBASE)
                digits.append(digit)
            return digits
        remainder = np.zeros_like(limbs[0])  # long division by 10000, one 32-bit limb at a time
        quotient = []
        for limb in reversed(limbs):
            value = (remainder << np.uint64(32)) | limb
            remainder = value % _NBASE
            quotient.append(value // _NBASE)
        limbs = quotient[::-1]
        digits.append(remainder)


def _numeric_fields(column: pa.Array) -> list[np.ndarray]:
    """A decimal128 column in numeric's binary form, one width for the whole chunk: the field
    length, the header, and as many digits as its largest value needs (nulls as 0)."""
    scale, rows = column.type.scale, len(column)
    low, high = _decimal_words(column)
    if column.null_count:
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        low, high = np.where(valid, low, 0), np.where(valid, high, 0)
    negative, limbs = _magnitudes(low, high)
    groups, pad = -(-scale // 4), -scale % 4
    if pad:  # times 10^pad: the fraction fills whole digits (a fifth limb takes the carry)
        carry, scaled = np.zeros_like(limbs[0]), []
        for limb in [*limbs, np.zeros_like(limbs[0])]:
            value = limb * np.uint64(10**pad) + carry
            scaled.append(value & _LIMB)
            carry = value >> np.uint64(32)
        limbs = scaled
    digits = _base_10000(limbs, groups + 1)[::-1]  # at least one digit before the point
    header = [np.full(rows, len(digits), ">i2"), np.full(rows, len(digits) - groups - 1, ">i2"),
              np.where(negative, _NUMERIC_NEG, 0).astype(">u2"), np.full(rows, scale, ">i2")]  # fmt: skip
    return [np.full(rows, 8 + 2 * len(digits), ">i4"), *header, *(digit.astype(">u2") for digit in digits)]


def _values(column: pa.Array, fmt: str) -> np.ndarray:
    """The values of ``column`` as the big-endian numbers PostgreSQL reads (nulls as 0)."""
    if pa.types.is_decimal(column.type):
        return _decimal_doubles(column).astype(_DTYPES[fmt])
    if fmt == "date":
        column, offset = column.cast(pa.int32()), _EPOCH_DAYS
    elif fmt == "timestamp":
        column, offset = column.cast(pa.timestamp("us", column.type.tz)).cast(pa.int64()), _EPOCH_MICROS
    else:
        offset = 0
    if column.null_count:
        column = column.fill_null(False if fmt == "bool" else 0)
    values = column.to_numpy(zero_copy_only=False)
    return (values - offset if offset else values).astype(_DTYPES[fmt])


def _binary(records: np.ndarray) -> pa.Array:
    """A numpy record array as an Arrow binary array of one value per record (no copy)."""
    width, count = records.dtype.itemsize, len(records)
    offsets = pa.py_buffer(np.arange(0, (count + 1) * width, width, dtype=np.int64))
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), count, [None, offsets, pa.py_buffer(records)])


def _records(fields: list[np.ndarray]) -> np.ndarray:
    records = np.empty(len(fields[0]), dtype=[(f"f{i}", field.dtype) for i, field in enumerate(fields)])
    for i, field in enumerate(fields):
        records[f"f{i}"] = field
    return records


def render(chunk: pa.Table, formats: tuple[str, ...]) -> bytes:
    """The rows of ``chunk`` as binary COPY tuples (without the header and trailer).

    Runs of non-null fixed-width fields (with the field lengths and a tuple's field count) are
    one numpy record per row (a decimal's numeric has one width per chunk); strings and columns
    with nulls are joined in by Arrow.
    """
    rows = chunk.num_rows
    segments: list[pa.Array] = []
    pending = [np.full(rows, len(formats), ">i2")]  # the tuple's field count
    for column, fmt in zip((column.combine_chunks() for column in chunk.columns), formats):
        if fmt == "text":
            lengths = pc.binary_length(column)
            if column.null_count:  # a null is length -1 and no bytes
                lengths, column = lengths.fill_null(-1), column.fill_null("")
            pending.append(lengths.to_numpy().astype(">i4"))
            segments += [_binary(_records(pending)), column.cast(pa.large_binary())]
            pending = []
            continue
        if fmt == "numeric":
            fields = _numeric_fields(column)
        else:
            values = _values(column, fmt)
            fields = [np.full(rows, values.dtype.itemsize, ">i4"), values]
        if not column.null_count:
            pending += fields
            continue
        if pending:
            segments.append(_binary(_records(pending)))
            pending = []
        segments.append(pc.if_else(column.is_null(), _scalars()[0], _binary(_records(fields))))
    if pending:
        segments.append(_binary(_records(pending)))
    if len(segments) == 1:
        return segments[0].buffers()[2].to_pybytes()
    joined = pc.binary_join_element_wise(*segments, _scalars()[1])
    offsets = np.frombuffer(joined.buffers()[1], np.int64, rows + 1, joined.offset * 8)
    return joined.buffers()[2][int(offsets[0]) : int(offsets[-1])].to_pybytes()
