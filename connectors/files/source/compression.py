"""Compression by file-name suffix, as Flink's StandardDeCompression (and Hadoop's codecs).

``.gz``/``.gzip``, ``.bz2``, ``.xz``, ``.deflate`` (zlib streams, as Hadoop's DefaultCodec and
Flink's deflate factory write them), ``.zst`` (through pyarrow's bundled zstd), and ``.snappy`` /
``.lz4`` in the block framing of Hadoop's SnappyCodec and Lz4Codec (what Spark's csv, json and text
writers write). A compressed file is never split: its byte offsets say nothing about line boundaries.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

import pyarrow as pa

__all__ = ["CODECS", "codec_of", "decompressing", "CORRUPT_ERRORS"]

CODECS = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".xz": "xz", ".deflate": "deflate", ".zst": "zstd",
          ".snappy": "snappy", ".lz4": "lz4"}  # fmt: skip

# What a corrupt or truncated compressed stream raises, whatever the codec.
CORRUPT_ERRORS: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, lzma.LZMAError, pa.ArrowInvalid)

_READ = 1 << 16


def codec_of(path: str) -> str | None:
    """The codec a file name's suffix calls for, or None for an uncompressed file."""
    lowered = path.lower()
    for suffix, codec in CODECS.items():
        if lowered.endswith(suffix):
            return codec
    return None


class _Decoded:
    """The plain ``read``/``close`` the readers use, over the decompressed pieces a generator yields
    (for the codecs neither stdlib nor pyarrow has a file object for)."""

    def __init__(self, raw: BinaryIO, pieces: Iterator[bytes]):
        self.raw, self.pieces, self.buffer = raw, pieces, bytearray()

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.buffer) < size:
            piece = next(self.pieces, None)
            if piece is None:
                break
            self.buffer += piece
        data = bytes(self.buffer if size < 0 else self.buffer[:size])
        del self.buffer[: len(data)]
        return data

    def close(self) -> None:
        self.raw.close()


def _inflated(raw: BinaryIO) -> Iterator[bytes]:
    """zlib streams, one after another as appends write them, read on as Hadoop's
    DecompressorStream reads them."""
    inflater, pending, ended = zlib.decompressobj(), b"", False
    while True:
        data = inflater.unconsumed_tail or pending or raw.read(_READ)
        if not data:
            if not ended:
                raise EOFError("compressed stream ended before the end-of-stream marker")
            return
        pending, ended = b"", False
        yield inflater.decompress(data, _READ)  # bounded: a small input can inflate a thousandfold
        if inflater.eof:
            pending, inflater, ended = inflater.unused_data, zlib.decompressobj(), True


def _exactly(raw: BinaryIO, size: int) -> bytes:
    data = raw.read(size)
    while len(data) < size:
        more = raw.read(size - len(data))
        if not more:
            raise EOFError(f"compressed block cut short: {len(data)} of {size} bytes")
        data += more
    return data


def _hadoop_blocks(raw: BinaryIO, unpack: Callable[[bytes, int], bytes]) -> Iterator[bytes]:
    """Hadoop's BlockCompressorStream framing: per block its uncompressed length (4 bytes, big
    endian), then chunks of (compressed length, raw compressed bytes) until the block is complete.
    ``unpack(chunk, room)`` decompresses one chunk to at most ``room`` bytes, what its block lacks."""
    while head := raw.read(4):
        room = int.from_bytes(head + _exactly(raw, 4 - len(head)), "big")
        if room == 0:  # Hadoop's BlockDecompressorStream ends the stream here (an empty file's block)
            return
        while room > 0:
            data = unpack(_exactly(raw, int.from_bytes(_exactly(raw, 4), "big")), room)
            room -= len(data)
            yield data


_SNAPPY, _LZ4 = pa.Codec("snappy"), pa.Codec("lz4_raw")


def _unsnappy(chunk: bytes, room: int) -> bytes:
    # a raw snappy chunk starts with its uncompressed length, a little-endian base-128 varint
    size = shift = 0
    for byte in chunk[:5]:
        size |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    else:
        raise OSError("snappy chunk without a valid length")
    if size > room:
        raise OSError(f"snappy chunk of {size} bytes overflows its block ({room} bytes left)")
    return _SNAPPY.decompress(chunk, size, asbytes=True)


def _lz4_fits(chunk: bytes, size: int) -> bool:
    try:
        _LZ4.decompress(chunk, size)
        return True
    except OSError:
        return False


def _unlz4(chunk: bytes, room: int) -> bytes:
    """A raw lz4 chunk holds no length, and pyarrow's decompressor returns its whole output buffer,
    but fails when the output does not fit. A chunk fills the rest of its block, unless Hadoop cut
    a large write into several: then its size is the smallest that fits, found by bisection."""
    if room > 1 and _lz4_fits(chunk, room - 1):
        low, high = 1, room - 1
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if _lz4_fits(chunk, middle) else (middle + 1, high)
        room = low
    return _LZ4.decompress(chunk, room, asbytes=True)


class _ArrowStream:
    """pyarrow's decompressing stream behind the plain ``read``/``close`` the readers use."""

    def __init__(self, raw: BinaryIO, codec: str):
        self.raw = raw
        self.stream = pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), codec)

    def read(self, size: int = -1) -> bytes:
        return self.stream.read() if size < 0 else self.stream.read(size)

    def close(self) -> None:
        self.stream.close()
        self.raw.close()


_OPENERS: dict[str, Callable[[BinaryIO], BinaryIO]] = {
    "gzip": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),  # type: ignore[dict-item]
    "bz2": lambda raw: bz2.BZ2File(raw, mode="rb"),  # type: ignore[dict-item]
    "xz": lambda raw: lzma.LZMAFile(raw, mode="rb"),  # type: ignore[dict-item]
    "deflate": lambda raw: _Decoded(raw, _inflated(raw)),  # type: ignore[dict-item]
    "zstd": lambda raw: _ArrowStream(raw, "zstd"),  # type: ignore[dict-item]
    "snappy": lambda raw: _Decoded(raw, _hadoop_blocks(raw, _unsnappy)),  # type: ignore[dict-item]
    "lz4": lambda raw: _Decoded(raw, _hadoop_blocks(raw, _unlz4)),  # type: ignore[dict-item]
}


def decompressing(raw: BinaryIO, codec: str | None) -> BinaryIO:
    """Wrap an open binary file so reads return decompressed bytes (``codec`` None: unchanged)."""
    if codec is None:
        return raw
    if codec not in _OPENERS:
        raise ValueError(f"unknown codec {codec!r}")
    return _OPENERS[codec](raw)
