"""Compressed row-format files between Spark's writers and readers and this project's file source and sink:
every codec Spark's csv, json and text writers take, in Hadoop's formats and file names."""

from __future__ import annotations

import io
import os

import pyarrow as pa
import pytest

from connectors.files.sink.codecs import ROW_CODECS
from connectors.files.source.compression import codec_of, decompressing

ROWS = "select id, if(id % 7 = 0, null, concat('r,\"', id)) as s from range(0, 300, 1, 2)"


def sorted_rows(frame) -> list[str]:
    return sorted(map(str, frame.collect()))


def test_codecs_round_trip_appends_and_hadoop_blocks_of_several_chunks():
    """Units appended one after another (the sink's appends, a compacted file) read back as one
    stream, in small reads too; a Hadoop block that one large write cut into several chunks (as
    Spark's text writer does for a line longer than a block) reads back whole."""
    pieces = [b"a,b\n", bytes(range(256)) * 2400, b"", b"x\n" * 1000]  # the second spans Hadoop blocks
    for name, codec in ROW_CODECS.items():
        path = f"part.csv{codec.extension}"
        data = b"".join(codec.compress(piece) for piece in pieces)
        assert decompressing(io.BytesIO(data), codec_of(path)).read() == b"".join(pieces), name
        stream = decompressing(io.BytesIO(data), codec_of(path))
        assert b"".join(iter(lambda: stream.read(1000), b"")) == b"".join(pieces), name
    line = b"y" * 600_000
    for name, step in (("snappy", 218_422), ("lz4_raw", 261_100)):  # Hadoop's largest block input
        chunks = [pa.Codec(name).compress(line[i : i + step], asbytes=True) for i in range(0, len(line), step)]
        block = len(line).to_bytes(4, "big") + b"".join(len(c).to_bytes(4, "big") + c for c in chunks)
        suffix = ".lz4" if name == "lz4_raw" else ".snappy"
        assert decompressing(io.BytesIO(block + b"\0\0\0\0"), codec_of(suffix)).read() == line, name


def test_sparks_compressed_csv_and_json_read_by_our_source(spark, tmp_path):
    df = spark.sql(ROWS)
    for codec in ("bzip2", "deflate", "gzip", "lz4", "snappy"):
        for fmt in ("csv", "json"):
            out = str(tmp_path / codec / fmt)
            df.write.option("compression", codec).format(fmt).save(out)
            assert any(name.endswith(ROW_CODECS[codec].extension) for name in os.listdir(out))
            ours = spark.read.format("connectors.files").option("fileFormat", fmt).schema(df.schema).load(out)
            assert sorted_rows(ours) == sorted_rows(df), (codec, fmt)


def test_our_compressed_csv_and_json_read_by_spark(spark, tmp_path):
    """Every compression name, several Arrow batches per part (one compressed unit each), a csv
    header unit, and the parts of the two partitions compacted into one file: Spark's readers,
    choosing the codec by the file name, read our rows."""
    df = spark.sql(ROWS)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "40")
    try:
        for codec, fmt, options in [(c, *f) for c in ROW_CODECS for f in (("csv", {"header": "true"}), ("json", {}))]:
            out = tmp_path / codec / fmt
            df.write.format("connectors.files").options(fileFormat=fmt, compression=codec, partSuffix=f".{fmt}",
                bucketAssigner="basePath", **options).mode("append").save(str(out))  # fmt: skip
            [name] = [n for n in os.listdir(out) if not n.startswith((".", "_"))]
            assert name.endswith(f".{fmt}{ROW_CODECS[codec].extension}")
            spark_read = spark.read.schema(df.schema).options(**options).format(fmt).load(str(out))
            assert sorted_rows(spark_read) == sorted_rows(df), (codec, fmt)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_corrupt_snappy_file_names_the_file_or_is_skipped(spark, tmp_path):
    data = ROW_CODECS["snappy"].compress(b"".join(b"%d,row%d\n" % (i, i) for i in range(20_000)))
    path = tmp_path / "cut.csv.snappy"
    path.write_bytes(data[: len(data) // 2])
    read = spark.read.format("connectors.files").option("fileFormat", "csv").schema("id long, s string")
    with pytest.raises(Exception, match=f"corrupt or truncated file [^ ]*{path}"):
        read.load(str(path)).collect()
    assert read.option("ignoreCorruptFiles", "true").load(str(path)).count() < 20_000


def test_our_parquet_parts_in_every_codec_read_by_spark(spark, tmp_path):
    """Spark's parquet codec names, each written as that codec (none: uncompressed; lz4: LZ4_RAW)
    and read back by Spark's own parquet reader."""
    import pyarrow.parquet as pq

    df = spark.sql(ROWS)
    stored = {"none": "UNCOMPRESSED", "uncompressed": "UNCOMPRESSED", "lz4_raw": "LZ4"}
    for codec in ("none", "uncompressed", "snappy", "gzip", "lz4", "lz4_raw", "zstd"):
        out = tmp_path / codec
        df.write.format("connectors.files").options(fileFormat="parquet", compression=codec, bucketAssigner="basePath").mode(
            "append").save(str(out))
        part = next(path for path in out.rglob("part-*") if path.is_file())
        assert pq.ParquetFile(part).metadata.row_group(0).column(0).compression == stored.get(codec, codec.upper())
        assert sorted_rows(spark.read.parquet(str(out))) == sorted_rows(df), codec
