"""samplingRatio: the lines Spark's schema inference samples, by its own generator.

Spark's csv and json inference take ``Dataset.sample(withReplacement=false, samplingRatio, seed=1)``
of the files' lines: each partition draws ``XORShiftRandom(1 + partition index).nextDouble()`` per
line and keeps the lines drawing less than the ratio. :class:`LineSample` draws as partition 0
does, over the lines of every file it is given, in turn.
"""

from __future__ import annotations

from collections.abc import Callable

_MASK_32 = 0xFFFFFFFF
_MASK_64 = (1 << 64) - 1


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK_32


def _mix_last(hash_: int, data: int) -> int:
    data = _rotate_left((data * 0xCC9E2D51) & _MASK_32, 15)
    return hash_ ^ ((data * 0x1B873593) & _MASK_32)


def _bytes_hash(data: bytes, seed: int) -> int:
    """Scala's ``MurmurHash3.bytesHash``."""
    hash_ = seed
    whole = len(data) // 4 * 4
    for start in range(0, whole, 4):
        hash_ = (_rotate_left(_mix_last(hash_, int.from_bytes(data[start:start + 4], "little")), 13) * 5
                 + 0xE6546B64) & _MASK_32
    if data[whole:]:
        hash_ = _mix_last(hash_, int.from_bytes(data[whole:], "little"))
    hash_ ^= len(data)
    hash_ = ((hash_ ^ (hash_ >> 16)) * 0x85EBCA6B) & _MASK_32
    hash_ = ((hash_ ^ (hash_ >> 13)) * 0xC2B2AE35) & _MASK_32
    return hash_ ^ (hash_ >> 16)


class XorShiftRandom:
    """Spark's ``org.apache.spark.util.random.XORShiftRandom``, as far as ``nextDouble``."""

    def __init__(self, seed: int):
        data = (seed & _MASK_64).to_bytes(8, "big")
        low = _bytes_hash(data, 0x3C074A61)  # MurmurHash3.arraySeed
        self.state = (_bytes_hash(data, low) << 32) | low

    def _next(self, bits: int) -> int:
        state = self.state
        state ^= (state << 21) & _MASK_64
        state ^= state >> 35
        state ^= (state << 4) & _MASK_64
        self.state = state
        return state & ((1 << bits) - 1)

    def next_double(self) -> float:
        return ((self._next(26) << 27) + self._next(27)) * 2.0**-53  # java.util.Random's


class LineSample:
    """Keeps each line with Spark's draw below ``ratio`` (seed 1, as Spark's inference)."""

    def __init__(self, ratio: float):
        self.ratio = ratio
        self.random = XorShiftRandom(1)

    def lines(self, data: bytes, separator: bytes, header: Callable[[bytes], bool] | None = None) -> bytes:
        """The sampled lines of ``data`` (separated by ``separator``), and every line up to the
        first that ``header`` holds true of: Spark takes the header apart from the sample."""
        records = data.split(separator)
        last = records.pop()  # after the last separator: a line only if not empty
        kept, searching = [], header is not None
        for record in records + ([last] if last else []):
            take = self.random.next_double() < self.ratio
            if searching:  # the header and the blank or comment lines before it, which the reader skips
                searching, take = not header(record), True  # type: ignore[misc]
            if take:
                kept.append(record)
        return b"".join(record + separator for record in kept)
