"""Compression by file-name suffix, as Flink's StandardDeCompression (and Hadoop's codecs).

``.gz``/``.gzip``, ``.bz2``, ``.xz``, ``.deflate`` (a zlib stream, as Hadoop's DefaultCodec and
Flink's deflate factory write it) and ``.zst`` (through pyarrow's bundled zstd). A compressed
file is never split: its byte offsets say nothing about line boundaries.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from typing import BinaryIO

import pyarrow as pa

__all__ = ["CODECS", "codec_of", "decompressing", "CORRUPT_ERRORS"]

CODECS = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".xz": "xz", ".deflate": "deflate", ".zst": "zstd"}

# What a corrupt or truncated compressed stream raises, whatever the codec.
CORRUPT_ERRORS: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, lzma.LZMAError, pa.ArrowInvalid)


def codec_of(path: str) -> str | None:
    """The codec a file name's suffix calls for, or None for an uncompressed file."""
    lowered = path.lower()
    for suffix, codec in CODECS.items():
        if lowered.endswith(suffix):
            return codec
    return None


class _Inflating:
    """A read-only stream of a zlib (``.deflate``) stream; stdlib has no file object for it."""

    def __init__(self, raw: BinaryIO):
        self.raw, self.inflater, self.done = raw, zlib.decompressobj(), False

    def read(self, size: int = -1) -> bytes:
        out = []
        wanted = size if size >= 0 else 1 << 62
        got = 0
        while got < wanted and not self.done:
            chunk = self.inflater.unconsumed_tail or self.raw.read(1 << 16)
            if not chunk:
                if not self.inflater.eof:
                    raise EOFError("compressed stream ended before the end-of-stream marker")
                break
            data = self.inflater.decompress(chunk, wanted - got if size >= 0 else 0)
            out.append(data)
            got += len(data)
            self.done = self.inflater.eof
        return b"".join(out)

    def close(self) -> None:
        self.raw.close()


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


def decompressing(raw: BinaryIO, codec: str | None) -> BinaryIO:
    """Wrap an open binary file so reads return decompressed bytes (``codec`` None: unchanged)."""
    if codec is None:
        return raw
    if codec == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if codec == "bz2":
        return bz2.BZ2File(raw, mode="rb")  # type: ignore[return-value]
    if codec == "xz":
        return lzma.LZMAFile(raw, mode="rb")  # type: ignore[return-value]
    if codec == "deflate":
        return _Inflating(raw)  # type: ignore[return-value]
    if codec == "zstd":
        return _ArrowStream(raw, "zstd")  # type: ignore[return-value]
    raise ValueError(f"unknown codec {codec!r}")
