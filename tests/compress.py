"""Compressed test files in every codec the file source reads (the inverse of its decompression)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib

import pyarrow as pa


def compressing(data: bytes, codec: str) -> bytes:
    if codec == "gzip":
        return gzip.compress(data)
    if codec == "bz2":
        return bz2.compress(data)
    if codec == "xz":
        return lzma.compress(data)
    if codec == "deflate":
        return zlib.compress(data)
    if codec in ("snappy", "lz4"):  # Hadoop's block framing, as the sink writes it
        from connectors.files.sink.codecs import ROW_CODECS

        return ROW_CODECS[codec].compress(data)
    if codec == "zstd":
        return pa.compress(data, codec="zstd", asbytes=True)
    raise ValueError(f"unknown codec {codec!r}")
