"""Compression of row-format part files (text, csv, json lines), by Spark's codec names.

Each append is compressed on its own into a unit complete for its codec (a gzip member, a bzip2 or
zlib stream, Hadoop-framed snappy or lz4 blocks), and such units one after another are one valid
file for Spark's (Hadoop's) readers and this project's source. So a part grows by appends, the
committed prefix a crash leaves is a valid file, and compaction concatenates parts' byte ranges.
"""

from __future__ import annotations

import bz2
import dataclasses
import functools
import gzip
import zlib
from collections.abc import Callable

import pyarrow as pa

__all__ = ["ROW_CODECS", "RowCodec"]

# io.compression.codec.{snappy,lz4}.buffersize: Hadoop's readers decompress a chunk into a buffer this big
_HADOOP_BUFFER = 256 << 10


@dataclasses.dataclass(frozen=True)
class RowCodec:
    extension: str  # Hadoop's default extension: Spark picks the codec of a file by its name
    compress: Callable[[bytes], bytes]

    def suffix(self, part_suffix: str) -> str:
        """``part_suffix`` ending with this codec's extension (appended unless it is there)."""
        return part_suffix if part_suffix.endswith(self.extension) else part_suffix + self.extension


def _hadoop_blocks(codec_name: str, overhead: int) -> Callable[[bytes], bytes]:
    """Hadoop's BlockCompressorStream framing, as SnappyCodec and Lz4Codec write it: blocks of at
    most the buffer size less the codec's worst-case overhead, so that each compresses into one chunk
    that fits a reader's buffer; a block is its uncompressed length, then (compressed length, chunk),
    lengths as 4-byte big-endian integers."""
    codec, limit = pa.Codec(codec_name), _HADOOP_BUFFER - overhead

    def compress(data: bytes) -> bytes:
        out = []
        for start in range(0, len(data), limit):
            block = data[start : start + limit]
            chunk = codec.compress(block, asbytes=True)
            out += [len(block).to_bytes(4, "big"), len(chunk).to_bytes(4, "big"), chunk]
        return b"".join(out)

    return compress


_NONE = RowCodec("", lambda data: data)

ROW_CODECS = {
    "none": _NONE,
    "uncompressed": _NONE,
    "bzip2": RowCodec(".bz2", bz2.compress),
    "deflate": RowCodec(".deflate", zlib.compress),  # a zlib stream, as Hadoop's DefaultCodec writes
    # mtime=0: the same bytes give the same member, so a csv header's length is known in advance
    "gzip": RowCodec(".gz", functools.partial(gzip.compress, compresslevel=6, mtime=0)),
    "lz4": RowCodec(".lz4", _hadoop_blocks("lz4_raw", _HADOOP_BUFFER // 255 + 16)),
    "snappy": RowCodec(".snappy", _hadoop_blocks("snappy", _HADOOP_BUFFER // 6 + 32)),
}
