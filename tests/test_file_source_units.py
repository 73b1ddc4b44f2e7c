"""connectors.files source without Spark: splits, formats, compression, modes, state, monitoring."""

from __future__ import annotations

import datetime
import json
import os
import random
import re
import shutil
import time
from datetime import timedelta

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from compress import compressing
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connectors.core.options import OptionError
from connectors.core.spark_compat import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
)
from connectors.files import partition_directories
from connectors.files.datetime_patterns import DateTimePattern
from connectors.files.source import partitions, split_reader
from connectors.files.source.compression import CODECS
from connectors.files.source.csv_parser import white_space_trimmer
from connectors.files.source.json_parser import strict_json
from connectors.files.source.read_spec import JsonSyntax
from connectors.files.source.records import MalformedRecordError
from connectors.files.source.split_reader import CorruptFileError, FileSplit, read_partition
from connectors.files.source.listing import FileLister, FileStatus
from connectors.files.source.offsets import SeenFiles, digest
from connectors.files.source.options import FileSourceOptions, parse_paths
from connectors.files.source.reader import DirectoryMonitor, FileStreamReader, plan
from connectors.files.source.spark_texts import java_double, java_integer, spark_timestamp
from connectors.files.source.schema import SchemaInference, read_spec

TEXT = StructType([StructField("value", StringType())])
AB = StructType([StructField("a", LongType()), StructField("b", StringType())])
AB_CORRUPT = StructType([*AB.fields, StructField("_corrupt_record", StringType())])


def config(**options) -> FileSourceOptions:
    return FileSourceOptions.from_options({k: str(v) for k, v in options.items()})


def read_all(path: str, schema: StructType, partitions=None, **options) -> list[dict]:
    cfg = config(**options)
    spec = read_spec(cfg, [path], schema)
    if partitions is None:
        partitions = plan(list(FileLister([path]).list().values()), cfg)
    return [row for p in partitions for batch in read_partition(spec, p) for row in batch.to_pylist()]


def status(path) -> FileStatus:
    stat = os.stat(path)
    return FileStatus(str(path), stat.st_size, stat.st_mtime_ns // 1_000_000)


# ---------------------------------------------------------------------------------------------
# Splits


def test_byte_range_splits_read_every_line_exactly_once(tmp_path):
    rng = random.Random(5)
    lines = [("x" * rng.choice([0, 1, 2, 7, 300, 5000])) + f"#{i}" for i in range(3000)]
    lines[17] = ""  # empty lines are lines too
    data = "\n".join(lines)  # no newline after the last line
    path = tmp_path / "big.txt"
    path.write_text(data)
    size = path.stat().st_size
    for trial in range(25):
        cuts = sorted(rng.sample(range(1, size), rng.randint(1, 40)))
        bounds = [0, *cuts, size]
        splits = [FileSplit(str(path), size, 0, s, e) for s, e in zip(bounds, bounds[1:])]
        from connectors.files.source.split_reader import FilePartition

        rows = read_all(str(path), TEXT, [FilePartition([s]) for s in splits], fileFormat="text")
        assert [r["value"] for r in rows] == lines, f"trial {trial}, cuts {cuts}"


def test_planner_splits_big_files_and_packs_small_ones(tmp_path):
    big = tmp_path / "big.json"
    big.write_text("".join(json.dumps({"a": i, "b": "v" * (i % 50)}) + "\n" for i in range(60_000)))
    for i in range(5):
        (tmp_path / f"small{i}.json").write_text(json.dumps({"a": -i, "b": "s"}) + "\n")
    cfg = config(fileFormat="json", maxPartitionBytes="256k")
    files = list(FileLister([str(tmp_path)]).list().values())
    partitions = plan(files, cfg, cores=2)
    big_pieces = [s for p in partitions for s in p.splits if s.path == str(big)]
    assert len(big_pieces) > 4 and all(s.end > s.start for s in big_pieces)
    rows = read_all(str(tmp_path), AB, partitions, fileFormat="json")
    assert sorted(r["a"] for r in rows) == sorted([*range(60_000), *(-i for i in range(5))])


def test_planner_gives_every_core_the_same_work():
    # Spark's next-fit packing makes 3 tasks of these on 2 cores: the third runs alone.
    files = [FileStatus(f"/data/part-{i:02d}.json", 13_800_000, 0) for i in range(20)]
    partitions = plan(files, config(fileFormat="json"), cores=2)
    loads = [sum(s.length for s in p.splits) for p in partitions]
    assert len(partitions) % 2 == 0 and max(loads) == min(loads)
    assert sorted(s.path for p in partitions for s in p.splits) == sorted(f.path for f in files)
    pieces = plan([FileStatus("/data/big.json", 1 << 30, 0)], config(fileFormat="json"), cores=2)
    assert len(pieces) % 2 == 0 and {len(p.splits) for p in pieces} == {1}
    assert sum(s.length for p in pieces for s in p.splits) == 1 << 30


def test_compressed_files_are_never_split(tmp_path):
    path = tmp_path / "big.txt.gz"
    path.write_bytes(compressing(b"".join(b"%d\n" % i for i in range(300_000)), "gzip"))
    cfg = config(fileFormat="text", maxPartitionBytes="16k")
    [partition] = plan([status(path)], cfg, cores=2)
    assert [(s.start, s.end) for s in partition.splits] == [(0, -1)]


def test_parquet_splits_by_row_groups(tmp_path):
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"a": list(range(100_000)), "b": [str(i) for i in range(100_000)]}), path, row_group_size=10_000)
    cfg = config(fileFormat="parquet", maxPartitionBytes="200k")
    partitions = plan([status(path)], cfg, cores=2)
    groups = sorted(g for p in partitions for s in p.splits for g in s.row_groups)
    assert len(partitions) > 1 and groups == list(range(10))
    rows = read_all(str(path), AB, partitions, fileFormat="parquet")
    assert sorted(r["a"] for r in rows) == list(range(100_000))


# ---------------------------------------------------------------------------------------------
# Formats and compression


@pytest.mark.parametrize("suffix", sorted(CODECS))
def test_every_codec_every_line_format(tmp_path, suffix):
    text = "".join(f"line {i}\n" for i in range(1000)).encode()
    csv = "a,b\n" + "".join(f"{i},v{i}\n" for i in range(1000))
    jsonl = "".join(json.dumps({"a": i, "b": f"v{i}"}) + "\n" for i in range(1000))
    for name, content in (("t", text), ("c", csv.encode()), ("j", jsonl.encode())):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"data{suffix}").write_bytes(compressing(content, CODECS[suffix]))
    assert [r["value"] for r in read_all(str(tmp_path / "t"), TEXT, fileFormat="text")] == [f"line {i}" for i in range(1000)]
    expected = [{"a": i, "b": f"v{i}"} for i in range(1000)]
    assert read_all(str(tmp_path / "c"), AB, fileFormat="csv", header="true") == expected
    assert read_all(str(tmp_path / "j"), AB, fileFormat="json") == expected


@pytest.mark.parametrize("codec", ["gzip", "bz2", "xz", "deflate", "zstd"])
def test_truncated_compressed_file_names_the_file_or_is_skipped(tmp_path, codec):
    data = compressing(b"".join(b"%d\n" % i for i in range(200_000)), codec)
    suffix = next(s for s, c in CODECS.items() if c == codec)
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError, match=f"corrupt or truncated file {path}"):
        read_all(str(path), TEXT, fileFormat="text")
    rows = read_all(str(path), TEXT, fileFormat="text", ignoreCorruptFiles="true")
    assert len(rows) < 200_000 and [r["value"] for r in rows] == [str(i) for i in range(len(rows))]
    # With a corrupt-record column the skipped file is a row of its own (PERMISSIVE).
    schema = StructType([StructField("a", LongType()), StructField("_corrupt_record", StringType())])
    rows = read_all(str(path), schema, fileFormat="csv", ignoreCorruptFiles="true")
    [marker] = [r for r in rows if r["_corrupt_record"] is not None]
    assert marker["a"] is None and marker["_corrupt_record"].startswith(f"connectors.files: corrupt or truncated file {path}: ")
    assert sorted(r["a"] for r in rows if r["a"] is not None) == list(range(len(rows) - 1))
    assert len(read_all(str(path), schema, fileFormat="csv", ignoreCorruptFiles="true", mode="DROPMALFORMED")) == len(rows) - 1


def test_text_strips_crlf_and_keeps_empty_lines(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one\r\n\r\ntwo\nthree")
    assert [r["value"] for r in read_all(str(tmp_path), TEXT, fileFormat="text")] == ["one", "", "two", "three"]


def test_csv_options_and_metadata_columns(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a;b\n1;'p;q'\n2;NA\n")
    schema = StructType([*AB.fields, StructField("file", StringType()), StructField("mtime", StructType().add("x", StringType()))])
    with pytest.raises(OptionError, match="fileModificationTimeColumn.*must be timestamp"):
        read_spec(config(fileFormat="csv", filePathColumn="file", fileModificationTimeColumn="mtime"), [str(path)], schema)
    from pyspark.sql.types import TimestampType

    schema = StructType([*AB.fields, StructField("file", StringType()), StructField("mtime", TimestampType())])
    rows = read_all(str(path), schema, fileFormat="csv", header="true", sep=";", quote="'", nullValue="NA",
                    filePathColumn="file", fileModificationTimeColumn="mtime")
    assert [(r["a"], r["b"], r["file"]) for r in rows] == [(1, "p;q", str(path)), (2, None, str(path))]
    assert abs(rows[0]["mtime"].timestamp() - path.stat().st_mtime) < 0.01


MALFORMED_CSV = "1,ok\n2,too,many\n3,ok\nnot-a-number,bad\n5,ok\n"
MALFORMED_JSON = '{"a": 1, "b": "ok"}\n{"a": "x", "b": "bad type"}\n{"a": 3, "b": "ok"}\n{broken\n{"a": 5, "b": "ok"}\n'


@pytest.mark.parametrize("fmt, content, bad_line", [("csv", MALFORMED_CSV, 2), ("json", MALFORMED_JSON, 2)])
def test_malformed_records_in_each_mode(tmp_path, fmt, content, bad_line):
    path = tmp_path / f"m.{fmt}"
    path.write_text(content)
    rows = read_all(str(path), AB_CORRUPT, fileFormat=fmt)  # PERMISSIVE: in place, with what converts (Spark 3+)
    lines = content.splitlines()
    partial = [(2, "too"), (None, "bad")] if fmt == "csv" else [(None, "bad type"), (None, None)]
    assert [tuple(r.values()) for r in rows] == [
        (1, "ok", None), (*partial[0], lines[1]), (3, "ok", None), (*partial[1], lines[3]), (5, "ok", None)]
    assert sorted(r["a"] for r in read_all(str(path), AB, fileFormat=fmt, mode="DROPMALFORMED")) == [1, 3, 5]
    with pytest.raises(MalformedRecordError, match=rf"malformed record in {path}, line {bad_line} \(mode FAILFAST\)"):
        read_all(str(path), AB, fileFormat=fmt, mode="failfast")


@pytest.mark.parametrize("content, options, rows", [
    ('{"a":1}\n{bad\n\n{}\n[{},{}]\n[]\nnull\n', {}, 6),
    ('{"a":1}\n{bad\n\n{}\n[{},{}]\n[1]\n', {"mode": "DROPMALFORMED"}, 4),
    ('[{},\n{"a": 1}]', {"multiLine": "true"}, 2),
])  # fmt: skip
def test_json_of_no_column_reads_a_row_per_record(tmp_path, content, options, rows):
    """Spark's struct<>: batches of no column still hold their rows (a malformed one as in any schema)."""
    (tmp_path / "n.json").write_text(content)
    spec = read_spec(config(fileFormat="json", **options), [str(tmp_path)], StructType([]))
    batches = list(read_partition(spec, plan([status(tmp_path / "n.json")], config(fileFormat="json"))[0]))
    assert [b.num_columns for b in batches] == [0] * len(batches)
    assert sum(b.num_rows for b in batches) == rows


@pytest.mark.parametrize("options", [{}, {"lineSep": "|"}])
def test_csv_of_no_column_reads_a_row_per_line_of_every_split_and_block_once(tmp_path, monkeypatch, options):
    """struct<> csv: a row per line neither blank nor the header (only at the file's start), over splits
    cut inside lines and blocks of a few bytes."""
    monkeypatch.setattr(split_reader, "BLOCK_BYTES", 7)
    end = options.get("lineSep", "\n")
    (tmp_path / "a.csv").write_text(end.join(["h,h", *(f"{i},x" if i % 5 else " " for i in range(200))]) + end)
    cfg = config(fileFormat="csv", header="true", maxPartitionBytes="64", **options)
    partitions = plan([status(tmp_path / "a.csv")], cfg, cores=2)
    assert "lineSep" in options or sum(len(p.splits) for p in partitions) > 1
    spec = read_spec(cfg, [str(tmp_path)], StructType([]))
    batches = [batch for p in partitions for batch in read_partition(spec, p)]
    assert [b.num_columns for b in batches] == [0] * len(batches)
    assert sum(b.num_rows for b in batches) == 160


def test_csv_malformed_records_after_a_blank_line_keep_their_own_text(tmp_path):
    """pyarrow numbers records without blank lines: a record it skips is put back by that number,
    each row with its own text."""
    path = tmp_path / "b.csv"
    path.write_text("1,a\n\nbad,c\n2,b,extra\n3,d\n")
    rows = read_all(str(path), AB_CORRUPT, fileFormat="csv")
    assert [tuple(r.values()) for r in rows] == [
        (1, "a", None), (None, "c", "bad,c"), (2, "b", "2,b,extra"), (3, "d", None)]


@pytest.mark.parametrize("options", [{"multiLine": "true"}, {"lineSep": "|"}])
def test_csv_records_spanning_lines_keep_their_place_when_malformed(tmp_path, options):
    """Records that may span lines: one of too few values is found by its text, kept in its place
    (its missing values null), and FAILFAST names its number."""
    path = tmp_path / "s.csv"
    end = "\n" if "multiLine" in options else "|"
    path.write_text(end.join(['1,"x\ny"', '2', '3,"z\nw"', '4,q']) + end)
    rows = read_all(str(path), AB_CORRUPT, fileFormat="csv", **options)
    assert [(r["a"], r["b"], r["_corrupt_record"]) for r in rows] == [
        (1, "x\ny", None), (2, None, "2"), (3, "z\nw", None), (4, "q", None)]
    with pytest.raises(MalformedRecordError, match=r"(record|line) 2 \(mode FAILFAST\): '2'"):
        read_all(str(path), AB, fileFormat="csv", mode="FAILFAST", **options)


@pytest.mark.parametrize("lines, types, good, bad", [
    # dates as yyyy-MM-dd, binary in base64
    (['{"a": 1, "x": "2024-02-29", "y": "YjA="}', '{"a": 2, "x": null, "y": null}',
      '{"a": 3, "x": "2024-02-30", "y": "YjA="}', '{"a": 4, "x": "2024-01-01", "y": "b0!"}'],
     (DateType(), BinaryType()), [(1, "2024-02-29", "b'b0'"), (2, "None", "None")], [3, 4]),
    # ... inside arrays and structs too
    (['{"a": 1, "x": ["2024-02-29", null], "y": {"b": "YjA="}}', '{"a": 2, "x": null, "y": {"b": null}}',
      '{"a": 3, "x": ["2024-02-30"], "y": null}', '{"a": 4, "x": [], "y": {"b": "b0!"}}'],
     (ArrayType(DateType()), StructType([StructField("b", BinaryType())])),
     [(1, "[datetime.date(2024, 2, 29), None]", "{'b': b'b0'}"), (2, "None", "{'b': None}")], [3, 4]),
    # ... inside arrays, structs and maps too
    (['{"a": 1, "x": ["NaN", 1.5], "y": {"m": {"k": "-Infinity"}}}', '{"a": 2, "x": ["nan?"], "y": null}'],
     (ArrayType(DoubleType()), StructType([StructField("m", MapType(StringType(), FloatType()))])),
     [(1, "[nan, 1.5]", "{'m': [('k', -inf)]}")], [2]),
    # maps, which pyarrow's reader cannot read; JSON keys are strings whatever the key type
    (['{"a": 1, "x": {"k": "2024-02-29"}, "y": {"1": 5}}', '{"a": 2, "x": null, "y": {}}',
      '{"a": 3, "x": {"k": "2024-02-30"}, "y": null}', '{"a": 4, "x": {}, "y": {"one": 1}}', '{"a": 5, "x": [1]}'],
     (MapType(StringType(), DateType()), MapType(IntegerType(), LongType())),
     [(1, "[('k', datetime.date(2024, 2, 29))]", "[(1, 5)]"), (2, "None", "[]")], [3, 4, 5]),
    # NaN and the infinities as strings
    (['{"a": 1, "x": 0.5, "y": 1.5}', '{"a": 2, "x": "NaN", "y": "-Infinity"}',
      '{"a": 3, "x": "Infinity", "y": null}', '{"a": 4, "x": "nan?", "y": 1}'],
     (DoubleType(), FloatType()), [(1, "0.5", "1.5"), (2, "nan", "-inf"), (3, "inf", "None")], [4]),
])  # fmt: skip
def test_json_values_as_spark_writes_them(tmp_path, lines, types, good, bad):
    path = tmp_path / "typed.json"
    path.write_text("\n".join(lines) + "\n")
    schema = StructType([StructField("a", LongType()), StructField("x", types[0]), StructField("y", types[1]),
                         StructField("_corrupt_record", StringType())])
    rows = read_all(str(path), schema, fileFormat="json")
    assert [(r["a"], str(r["x"]), str(r["y"])) for r in rows if r["_corrupt_record"] is None] == good
    assert [json.loads(r["_corrupt_record"])["a"] for r in rows if r["_corrupt_record"] is not None] == bad


def test_a_null_in_a_column_declared_not_nullable_names_it(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"a": 1, "b": "x"}\n{"a": "one", "b": "y"}\n')
    schema = StructType([StructField("a", LongType(), nullable=False), StructField("b", StringType())])
    with pytest.raises(ValueError, match=rf"{path} has records without a value for column 'a' .* declare it nullable"):
        read_all(str(path), schema, fileFormat="json")


def test_inferred_timestamps_keep_the_zone_parquet_and_avro_say_they_have(tmp_path):
    """Zone-less timestamps are TIMESTAMP_NTZ where the file says so (parquet's isAdjustedToUTC=false,
    Avro's local-timestamp), as Spark reads them; in json they stay strings, as Spark infers them."""
    import fastavro

    stamps = {"ts": pa.array([1], pa.timestamp("us", "UTC")), "ntz": pa.array([1], pa.timestamp("us"))}
    pq.write_table(pa.table(stamps), tmp_path / "t.parquet")
    with open(tmp_path / "t.avro", "wb") as out:
        fastavro.writer(out, {"type": "record", "name": "R", "fields": [
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "ntz", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}]}, [{"ts": 1, "ntz": 1}])
    (tmp_path / "t.json").write_text('{"ts": "2024-01-01 00:00:00"}\n')
    inferred = {fmt: SchemaInference(config(fileFormat=fmt), [str(tmp_path / f"t.{fmt}")]).infer().simpleString()
                for fmt in ("parquet", "avro", "json")}
    assert inferred == {"parquet": "struct<ts:timestamp,ntz:timestamp_ntz>",
                        "avro": "struct<ts:timestamp,ntz:timestamp_ntz>", "json": "struct<ts:string>"}


def test_int96_parquet_timestamps_are_instants_of_any_year(tmp_path):
    """INT96 (Spark's default for parquet timestamps) is inferred as timestamp at any depth and read
    at microseconds, so years past nanoseconds' 1677-2262 read back."""
    utc = datetime.timezone.utc
    old, last = datetime.datetime(1000, 1, 1, tzinfo=utc), datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc)
    table = pa.table({"t": pa.array([old, last], pa.timestamp("us")),
                      "st": pa.array([{"t": old}, {"t": last}], pa.struct([("t", pa.timestamp("us"))])),
                      "ts": pa.array([[old], [last]], pa.list_(pa.timestamp("us")))})
    pq.write_table(table, tmp_path / "t.parquet", use_deprecated_int96_timestamps=True)
    schema = SchemaInference(config(fileFormat="parquet"), [str(tmp_path)]).infer()
    assert schema.simpleString() == "struct<t:timestamp,st:struct<t:timestamp>,ts:array<timestamp>>"
    assert read_all(str(tmp_path), schema, fileFormat="parquet") == [
        {"t": old, "st": {"t": old}, "ts": [old]}, {"t": last, "st": {"t": last}, "ts": [last]}]


def test_spark_texts_of_numbers_and_timestamps():
    """What csv inference and reading take beyond pyarrow, as Java and Spark's default timestamp parser do."""
    assert [java_integer(t, 32) for t in ("+1", "007", "2147483648", "1.0", " 1")] == [1, 7, None, None, None]
    assert [java_double(t) for t in ("1d", " 1.5f ", "0x1p3", "-Infinity", ".5", "1_0", "inf")] == [
        1.0, 1.5, 8.0, float("-inf"), 0.5, None, None]
    utc = datetime.timezone.utc
    assert [spark_timestamp(t) for t in ("2024", "2024-2-3 1:2", "2024-02-03T10:00:00.1234567+0100",
                                         "2024-02-03 10:00:00 Europe/Paris", "2024-02-03 10:00:00PST")] == [
        datetime.datetime(2024, 1, 1, tzinfo=utc), datetime.datetime(2024, 2, 3, 1, 2, tzinfo=utc),
        datetime.datetime(2024, 2, 3, 9, 0, 0, 123456, tzinfo=utc), datetime.datetime(2024, 2, 3, 9, tzinfo=utc),
        datetime.datetime(2024, 2, 3, 18, tzinfo=utc)]
    # a zone only after the seconds; fields in range; no bare number
    assert [spark_timestamp(t) for t in ("2024-02-03Z", "2024-02-03 10:00+01", "2024-02-30", "12", "2024-02-03T")] == [None] * 5


def test_csv_escape_same_as_quote_reads_rfc_4180(tmp_path):
    path = tmp_path / "rfc.csv"
    path.write_text('1,"a""b"\n2,"c\\"\n')
    assert read_all(str(path), AB, fileFormat="csv", escape='"') == [{"a": 1, "b": 'a"b'}, {"a": 2, "b": "c\\"}]


# ---------------------------------------------------------------------------------------------
# Listing and filesystems


def test_csv_comments_empty_values_and_float_texts(tmp_path):
    """comment: lines blanked (the header is the first line left, a malformed line keeps its
    number); emptyValue: a quoted "" of any type, null when it is nullValue; unquoted empty values
    are null whatever nullValue is; nanValue, positiveInf, negativeInf of float columns only."""
    path = tmp_path / "c.csv"
    path.write_text('#x\n\na,b\n#1,2\n1,""\n"",q\n,\n#y\nbad,z\n')
    rows = read_all(str(path), AB_CORRUPT, fileFormat="csv", comment="#", header="true", emptyValue="7")
    assert [(r["a"], r["b"], r["_corrupt_record"]) for r in rows] == [
        (1, "7", None), (7, "q", None), (None, None, None), (None, "z", "bad,z")]
    with pytest.raises(MalformedRecordError, match="line 9 "):
        read_all(str(path), AB, fileFormat="csv", comment="#", header="true", emptyValue="7", mode="FAILFAST")
    rows = read_all(str(path), AB, fileFormat="csv", comment="#", header="true", emptyValue="E", nullValue="E",
                    mode="DROPMALFORMED")
    assert [(r["a"], r["b"]) for r in rows] == [(1, None), (None, "q"), (None, None)]  # "" is E, then null
    path.write_text("NA,PI,NI,NA\nNaN,Infinity,-Infinity,x\n1.5,2,-3,\n")
    schema = StructType([StructField(n, DoubleType()) for n in "abc"] + [StructField("d", StringType())])
    rows = read_all(str(path), schema, fileFormat="csv", nanValue="NA", positiveInf="PI", negativeInf="NI",
                    nullValue="-")
    assert [str(tuple(r.values())) for r in rows] == [
        "(nan, inf, -inf, 'NA')", "(nan, inf, -inf, 'x')", "(1.5, 2.0, -3.0, None)"]


@pytest.mark.parametrize("leading, trailing, sep, escape, text, expected", [
    (True, True, ",", "\\", '  a  , b b ,c\n  "x, y"  ,  " q "  , \t1\t\r\n"a\\" b " , """ x",  \n',
     'a,b b,c\n"x, y"," q ",1\r\n"a\\" b ",""" x",\n'),
    (True, False, ",", '"', '  a  , b b \n  "x, ""y"""  ,  " q " \n', 'a  ,b b \n"x, ""y"""," q "\n'),
    (False, True, ",", '"', '  a  , b b \n  "x, y"  ,  " q " \n', '  a, b b\n  "x, y",  " q "\n'),
    (True, True, "\t", "\\", " a \t\tb b \t\n", "a\t\tb b\t\n"),  # a tab separator is no whitespace
])  # fmt: skip
def test_csv_white_space_around_unquoted_values_is_dropped(leading, trailing, sep, escape, text, expected):
    """Dropped from the text before pyarrow reads it; quoted values are kept whole (their separators
    too), and whitespace after one goes, as Spark's parser drops it."""
    assert white_space_trimmer(sep, '"', escape, leading, trailing)(text.encode()) == expected.encode()


@pytest.mark.parametrize("fmt, content, line_sep, schema, expected", [
    ("text", "1abc2\nxabc3", "abc", TEXT, [{"value": "1"}, {"value": "2\nx"}, {"value": "3"}]),
    ("csv", 'a,1|b,"x\ny"|c,3|', "|", StructType([StructField("b", StringType()), StructField("a", StringType())]),
     [{"b": "a", "a": "1"}, {"b": "b", "a": "x\ny"}, {"b": "c", "a": "3"}]),
    ("json", '{"a":\n1}||{"a": 2, "b":"x\ny"}||{"a": 3}', "||", AB_CORRUPT,
     [{"a": 1, "b": None, "_corrupt_record": None},
      {"a": None, "b": None, "_corrupt_record": '{"a": 2, "b":"x\ny"}'}, {"a": 3, "b": None, "_corrupt_record": None}]),
])  # fmt: skip
def test_line_separator_splits_records_and_keeps_the_malformed_text(tmp_path, fmt, content, line_sep, schema, expected):
    path = tmp_path / f"a.{fmt}"
    path.write_text(content)
    cfg = config(fileFormat=fmt, lineSep=line_sep, maxPartitionBytes="4")
    assert [len(p.splits) for p in plan([status(path)], cfg, cores=2)] == [1]  # not cut: read whole
    assert read_all(str(path), schema, fileFormat=fmt, lineSep=line_sep, maxPartitionBytes="4") == expected


@pytest.mark.parametrize("fmt, encoding", [("csv", "utf-16-be"), ("json", "utf-16-le"), ("csv", "utf-32-le")])
def test_wide_charset_files_read_whole_in_blocks_that_halve_characters(tmp_path, monkeypatch, fmt, encoding):
    """A UTF-16/32 file is decoded as its blocks come, so a block's end inside a character or a line
    loses neither; \u0a41\u0100 holds the bytes of \\n, a code unit off."""
    monkeypatch.setattr(split_reader, "BLOCK_BYTES", 7)
    values = [f"\u0a41\u0100{i}é" for i in range(50)]
    lines = [json.dumps({"b": v}, ensure_ascii=False) if fmt == "json" else f"{i},{v}" for i, v in enumerate(values)]
    path = tmp_path / f"a.{fmt}"
    tail = b"\x00" if fmt == "csv" else b""  # a last character cut short: U+FFFD
    path.write_bytes("\n".join(lines).encode(encoding) + tail)
    schema = StructType([StructField("b", StringType())] if fmt == "json" else
                        [StructField("a", StringType()), StructField("b", StringType())])
    options = {"fileFormat": fmt, "encoding": encoding, "lineSep": "\n", "maxPartitionBytes": "16"}
    assert [len(p.splits) for p in plan([status(path)], config(**options), cores=2)] == [1]  # not cut: read whole
    rows = read_all(str(path), schema, **options)
    assert [row["b"] for row in rows] == [*values[:-1], values[-1] + ("\ufffd" if tail else "")]


@pytest.mark.parametrize("text, allow, expected", [
    ("{'a': 'x', 'b': \"it's\"}", {}, '{"a": "x", "b": "it\'s"}'),
    ("{'a': 'say \"hi\"', 'b': 'it\\'s', 'c': 'tab\\t'}", {}, '{"a": "say \\"hi\\"", "b": "it\'s", "c": "tab\\t"}'),
    ("{'a': 1}", {"single_quotes": False}, "{'a': 1}"),
    ('{"a": 1 /* one */, /* two\n */ "b": 2} // end', {"comments": True}, '{"a": 1  ,   "b": 2}'),
    ("// nothing else", {"comments": True}, ""),
    ('{"a": "// not a comment", "b": "/* nor this */"}', {"comments": True}, '{"a": "// not a comment", "b": "/* nor this */"}'),
    ("{a: 1, $b_2 : true, c: NaN, d: -Infinity}", {"unquoted_field_names": True},
     '{"a": 1, "$b_2": true, "c": NaN, "d": -Infinity}'),
    ('{"a": 007, "b": -00.5, "c": 0, "d": [0, 01e2], "e": "007"}', {"numeric_leading_zeros": True},
     '{"a": 7, "b": -0.5, "c": 0, "d": [0, 1e2], "e": "007"}'),
    ('{"a": 007}', {}, '{"a": 007}'),
    ("{'a': 'open", {}, None),
    ('{"a": 1 /* open', {"comments": True}, None),
])  # fmt: skip
def test_strict_json_rewrites_what_the_options_allow(text, allow, expected):
    assert strict_json(text, JsonSyntax(**allow)) == expected


def test_json_lines_in_lenient_syntax_are_read_only_where_the_options_allow(tmp_path):
    """Single quotes are read by default (Spark's default); a line only the options make JSON is
    read when they are set, else malformed with its text as written; a line of comments is no record."""
    path = tmp_path / "a.json"
    path.write_text("{'a': 1, 'b': 'x'}\n{a: 2, b: \"y\"} // two\n{\"a\": 03}\n// nothing\n")
    rows = read_all(str(path), AB_CORRUPT, fileFormat="json")
    assert [(r["a"], r["b"]) for r in rows if r["_corrupt_record"] is None] == [(1, "x")]
    assert [r["_corrupt_record"] for r in rows if r["_corrupt_record"] is not None] == [
        '{a: 2, b: "y"} // two', '{"a": 03}', "// nothing"]
    assert read_all(str(path), AB, fileFormat="json", allowSingleQuotes="false", mode="DROPMALFORMED") == []
    rows = read_all(str(path), AB_CORRUPT, fileFormat="json", allowComments="true", allowUnquotedFieldNames="true",
                    allowNumericLeadingZeros="true")
    assert [(r["a"], r["b"], r["_corrupt_record"]) for r in rows] == [(1, "x", None), (2, "y", None), (3, None, None)]
    inferred = SchemaInference(config(fileFormat="json", allowComments="true", allowUnquotedFieldNames="true",
                                      allowNumericLeadingZeros="true"), [str(path)]).infer()
    assert inferred.simpleString() == "struct<a:bigint,b:string>"


@pytest.mark.parametrize("content, keys", [
    ('{"a":1,"A":2}\n', "`A` and `a`"),
    ('{"b":1,"a":1,"a":2}\n', "`a` and `a`"),
    ('{"a":1}\n{"A":"x"}\n', "`A` and `a`"),
    ('{"a":1,"b":1}\n{"A":1}\n', "`A` and `a`"),
    ('{"s":[{"x":{"y":1,"Y":null}}]}\n', "`s.x.Y` and `s.x.y`"),
])
def test_json_inference_fails_on_keys_one_column_to_spark(tmp_path, content, keys):
    """Keys that Spark's inference (case-insensitive) leaves as two columns equal case aside fail
    the inference, naming the file and the keys, as Spark fails the read; unless dropped as null."""
    (tmp_path / "ok.json").write_text('{"a":1}\n')
    (tmp_path / "z.json").write_text(content)
    with pytest.raises(OptionError, match=re.escape(f"z.json': cannot infer a schema: keys {keys}")):
        SchemaInference(config(fileFormat="json"), [str(tmp_path)]).infer()
    (tmp_path / "z.json").write_text('{"a":null,"A":null,"s":{"x":{},"X":{}}}\n')
    inferred = SchemaInference(config(fileFormat="json", dropFieldIfAllNull="true"), [str(tmp_path)]).infer()
    assert inferred.simpleString() == "struct<a:bigint>"
    given = StructType([StructField("s", ArrayType(StructType([StructField(n, IntegerType()) for n in "xX"])))])
    with pytest.raises(OptionError, match=re.escape("keys `s.x` and `s.X` are one column to Spark")):
        read_spec(config(fileFormat="json"), [str(tmp_path)], given)


def test_json_inference_options(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"a": 1.50, "b": 1e5, "c": 0.001, "d": [null], "e": null, "f": {"g": []}, "h": true}\n')

    def inferred(**options) -> str:
        return SchemaInference(config(fileFormat="json", **options), [str(path)]).infer().simpleString()

    assert inferred() == "struct<a:double,b:double,c:double,d:array<string>,e:string,f:struct<g:array<string>>,h:boolean>"
    # 1e5 has a negative scale, on which Spark fails: double here
    assert inferred(prefersDecimal="true") == (
        "struct<a:decimal(3,2),b:double,c:decimal(3,3),d:array<string>,e:string,f:struct<g:array<string>>,h:boolean>")
    assert inferred(primitivesAsString="true", prefersDecimal="true") == (
        "struct<a:string,b:string,c:string,d:array<string>,e:string,f:struct<g:array<string>>,h:string>")
    assert inferred(dropFieldIfAllNull="true") == "struct<a:double,b:double,c:double,h:boolean>"
    rows = read_all(str(path), SchemaInference(config(fileFormat="json", primitivesAsString="true"), [str(path)]).infer(),
                    fileFormat="json")
    assert (rows[0]["a"], rows[0]["b"], rows[0]["h"]) == ("1.50", "1e5", "true")  # as written


def test_listing_skips_hidden_and_filters_names(tmp_path):
    for name in ["a.csv", "b.txt", "sub/c.csv", "_tmp/d.csv", ".hidden.csv", "sub/.e.csv", "sub/_f.csv", "sub/deep/g.csv"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    names = lambda lister: sorted(os.path.relpath(p, tmp_path) for p in lister.list())  # noqa: E731
    assert names(FileLister([str(tmp_path)])) == ["a.csv", "b.txt", "sub/c.csv", "sub/deep/g.csv"]
    assert names(FileLister([str(tmp_path)], name_glob="*.csv", recursive=False)) == ["a.csv"]
    assert names(FileLister([f"file://{tmp_path}/*/c.csv", str(tmp_path / "b.txt")])) == ["b.txt", "sub/c.csv"]
    assert FileLister([str(tmp_path / "missing")]).list() == {}


def test_glob_matches_no_hidden_names(tmp_path):
    """As Spark: a wildcard does not match an in-progress ``.x.tmp``, ``_SUCCESS`` or ``_tmp/``
    (read half-written, then again once renamed in); a hidden name written in the pattern does."""
    for name in ["in/a.json", "in/.b.json.tmp", "in/_SUCCESS", "in/_tmp/c.json", "in/sub/d.json", "in/sub/_e.json"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    names = lambda pattern: sorted(os.path.relpath(p, tmp_path) for p in FileLister([str(tmp_path / pattern)]).list())  # noqa: E731
    assert names("in/*") == ["in/a.json", "in/sub/d.json"]
    assert names("*/*.json") == ["in/a.json"]
    assert names("in/**/*.json") == ["in/a.json", "in/sub/d.json"]
    assert names("in/_tmp/*") == ["in/_tmp/c.json"]
    assert names("in/sub/_*") == ["in/sub/_e.json"]


def test_refresh_reports_only_what_appeared_and_disappeared(tmp_path):
    for name in ["a.json", "sub/b.json", "gone/c.json", "_hidden.json"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    path = lambda name: str(tmp_path / name)  # noqa: E731
    lister = FileLister([str(tmp_path), path("a.json")])  # a.json is listed through both paths
    assert sorted(s.path for s in lister.refresh().added) == [path("a.json"), path("gone/c.json"), path("sub/b.json")]
    assert not lister.refresh()
    (tmp_path / "d.json").write_text("x\n")
    (tmp_path / "sub" / "b.json").unlink()
    shutil.rmtree(tmp_path / "gone")
    changes = lister.refresh()
    assert [s.path for s in changes.added] == [path("d.json")]
    assert sorted(changes.removed) == [path("gone/c.json"), path("sub/b.json")]
    (tmp_path / "a.json").unlink()
    assert lister.refresh().removed == [path("a.json")]
    assert sorted(lister.files) == [path("d.json")]


def test_memory_filesystem_list_and_read(unique):
    fs = fsspec.filesystem("memory")
    fs.pipe(f"/{unique}/x.json", b'{"a": 1, "b": "m"}\n')
    fs.pipe(f"/{unique}/_ignored.json", b"garbage\n")
    files = FileLister([f"memory://{unique}"]).list()
    assert list(files) == [f"memory:///{unique}/x.json"]
    assert read_all(f"memory://{unique}", AB, fileFormat="json") == [{"a": 1, "b": "m"}]


# ---------------------------------------------------------------------------------------------
# Offset state and monitoring


def test_state_stays_bounded_and_reconstructs_batches():
    lateness = 60_000
    state, sizes = SeenFiles(), []
    for batch in range(50):  # 100 files per batch, 10 s of modification time apart
        files = [(digest(f"/d/{batch}-{i}"), batch * 10_000 + i) for i in range(100)]
        end = state.admit(files, lateness, 0)
        restored = SeenFiles.from_offset(json.loads(json.dumps(end.to_offset())))
        assert state.batch(restored) == {d for d, _ in files}
        state = restored
        sizes.append(len(state.seen))
    assert max(sizes) <= 800  # the window (6 batches) + the current batch, not 5000
    old = FileStatus("/d/0-0", 1, 0)
    assert state.is_late(old, lateness) and digest(old.path) not in state.seen


def write_file(directory, name, content="x\n", mtime=None):
    """Write elsewhere, then rename in (atomic), as producers should."""
    staging = directory.parent / f"staging-{directory.name}"
    staging.mkdir(exist_ok=True)
    (staging / name).write_text(content)
    if mtime is not None:
        os.utime(staging / name, (mtime, mtime))
    os.rename(staging / name, directory / name)


def test_monitor_admits_new_files_once_with_limits_and_counts_late_ones(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    now = time.time()
    for i in range(5):
        write_file(src, f"f{i}.txt", mtime=now - 100 + i)
    monitor = DirectoryMonitor(config(fileFormat="text", discoveryInterval="0", allowedLateness="30s"), [str(src)])
    offset = SeenFiles().to_offset()
    first = monitor.latest(offset, ReadMaxFiles(2))
    assert [os.path.basename(f.path) for f in monitor.batch_files(offset, first)] == ["f0.txt", "f1.txt"]
    second = monitor.latest(first, ReadMaxBytes(1))  # at least one file, even if bigger
    assert [os.path.basename(f.path) for f in monitor.batch_files(first, second)] == ["f2.txt"]
    third = monitor.latest(second, ReadAllAvailable())
    assert len(monitor.batch_files(second, third)) == 2
    assert monitor.latest(third, ReadAllAvailable()) is third  # nothing new: the same offset
    write_file(src, "late.txt", mtime=now - 1000)  # older than the watermark - 30 s
    write_file(src, "lateish.txt", mtime=now - 110)  # within lateness of the watermark (now - 96)
    fourth = monitor.latest(third, ReadAllAvailable())
    assert [os.path.basename(f.path) for f in monitor.batch_files(third, fourth)] == ["lateish.txt"]
    assert fourth["lateFiles"] == 1
    # A restarted query (fresh monitor) re-plans a batch from its offsets alone, and does not
    # count old files as late.
    restarted = DirectoryMonitor(config(fileFormat="text", discoveryInterval="0", allowedLateness="30s"), [str(src)])
    assert [os.path.basename(f.path) for f in restarted.batch_files(first, second)] == ["f2.txt"]
    assert restarted.latest(fourth, ReadAllAvailable()) is fourth


def test_monitor_latest_first_max_file_age_and_available_now(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    now = time.time()
    for i in range(4):
        write_file(src, f"f{i}.txt", mtime=now - 3600 * (3 - i))  # f3 newest
    cfg = config(fileFormat="text", discoveryInterval="0", latestFirst="true", maxFileAge="90min", allowedLateness="2h")
    monitor = DirectoryMonitor(cfg, [str(src)])
    start = SeenFiles().to_offset()
    monitor.freeze()
    write_file(src, "after.txt")  # not part of an AvailableNow run that already began
    end = monitor.latest(start, ReadMaxFiles(1))
    assert [os.path.basename(f.path) for f in monitor.batch_files(start, end)] == ["f3.txt"]
    end2 = monitor.latest(end, ReadMaxFiles(5))
    assert [os.path.basename(f.path) for f in monitor.batch_files(end, end2)] == ["f2.txt"]  # f0, f1 too old
    assert monitor.latest(end2, ReadMaxFiles(5)) is end2


def test_replay_finds_a_batch_file_touched_since_it_was_planned(tmp_path):
    """A file is its path: a batch replayed after a restart reads it even if its time changed
    (appended to, touched), as Spark replays its logged paths; it used to fail as "gone"."""
    src = tmp_path / "in"
    src.mkdir()
    now = time.time()
    write_file(src, "a.txt", mtime=now - 10)
    write_file(src, "b.txt", mtime=now - 5)
    start = SeenFiles().to_offset()
    end = DirectoryMonitor(config(fileFormat="text", discoveryInterval="0"), [str(src)]).latest(start, ReadAllAvailable())
    os.utime(src / "b.txt", (now, now))
    restarted = DirectoryMonitor(config(fileFormat="text", discoveryInterval="0"), [str(src)])
    assert [os.path.basename(f.path) for f in restarted.batch_files(start, end)] == ["a.txt", "b.txt"]
    assert restarted.latest(end, ReadAllAvailable()) is end  # and it is not new afterwards


def test_a_batch_file_deleted_before_it_is_read_is_named(tmp_path):
    """As Spark's FileNotFoundException: a file admitted, then deleted before its batch read it,
    fails the batch with a message naming the file and saying why (not a bare errno)."""
    src = tmp_path / "in"
    src.mkdir()
    write_file(src, "a.txt")
    reader = FileStreamReader(config(fileFormat="text", discoveryInterval="0"), [str(src)],
                              read_spec(config(fileFormat="text"), [str(src)], StructType([StructField("value", StringType())])))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    (partition,) = reader.partitions(start, end)
    (src / "a.txt").unlink()
    with pytest.raises(FileNotFoundError, match=f"connectors.files: {src / 'a.txt'} was listed for this batch but is gone"):
        list(reader.read(partition))


def test_ignore_missing_files_skips_a_batch_file_gone_before_it_is_read(tmp_path, caplog):
    """ignoreMissingFiles: the file deleted after admission is skipped with a warning naming it, the
    others are read; a batch replayed after a restart goes on without the files gone meanwhile."""
    src = tmp_path / "in"
    src.mkdir()
    write_file(src, "a.txt", "a\n")
    write_file(src, "b.txt", "b\n")
    cfg = config(fileFormat="text", discoveryInterval="0", ignoreMissingFiles="true")
    reader = FileStreamReader(cfg, [str(src)], read_spec(cfg, [str(src)], TEXT))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    partitions = reader.partitions(start, end)
    (src / "a.txt").unlink()
    with caplog.at_level("WARNING", logger="connectors.files.missing"):
        rows = [row for p in partitions for batch in reader.read(p) for row in batch.to_pylist()]
    assert rows == [{"value": "b"}]
    assert f"{src / 'a.txt'} is gone; skipped it (ignoreMissingFiles)" in caplog.text
    restarted = DirectoryMonitor(cfg, [str(src)])
    assert [os.path.basename(f.path) for f in restarted.batch_files(start, end)] == ["b.txt"]
    with pytest.raises(FileNotFoundError, match="1 of the 2 files of the batch being replayed .* ignoreMissingFiles"):
        DirectoryMonitor(config(fileFormat="text", discoveryInterval="0"), [str(src)]).batch_files(start, end)


def test_a_file_stamped_at_the_floor_is_new(tmp_path):
    """Spark's maxFileAge test is ``time >= newest - maxFileAge``: with allowedLateness 0 a file
    stamped in the same millisecond as the newest admitted one (coarse clocks, S3's seconds) is
    new, not late."""
    src = tmp_path / "in"
    src.mkdir()
    stamp = int(time.time()) - 5
    write_file(src, "a.txt", mtime=stamp)
    monitor = DirectoryMonitor(config(fileFormat="text", discoveryInterval="0", allowedLateness="0"), [str(src)])
    start = SeenFiles().to_offset()
    first = monitor.latest(start, ReadAllAvailable())
    write_file(src, "b.txt", mtime=stamp)
    second = monitor.latest(first, ReadAllAvailable())
    assert [os.path.basename(f.path) for f in monitor.batch_files(first, second)] == ["b.txt"]
    assert second["lateFiles"] == 0
    assert monitor.latest(second, ReadAllAvailable()) is second  # neither is new again
    # An offset of an earlier version (no "strict") pruned the files at the floor: they stay late
    # there until the watermark moves, so nothing is read again after an upgrade.
    legacy = {k: v for k, v in first.items() if k != "strict"}
    pruned = SeenFiles.from_offset(legacy).admit([], 0, 0)
    assert pruned.is_late(FileStatus(str(src / "a.txt"), 2, stamp * 1000), 0) and "strict" not in pruned.to_offset()


def test_discovery_interval_throttles_listings(tmp_path):
    monitor = DirectoryMonitor(config(fileFormat="text", discoveryInterval="1h"), [str(tmp_path)])
    start = SeenFiles().to_offset()
    assert monitor.latest(start, ReadAllAvailable()) is start
    write_file(tmp_path, "new.txt")
    assert monitor.latest(start, ReadAllAvailable()) is start  # not listed again within the hour


# ---------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "option 'fileFormat': required option is missing"),
        ({"fileFormat": "orc"}, "option 'fileFormat' = 'orc': expected one of text, csv, json, parquet, avro"),
        ({"fileFormat": "csv", "maxFilesPerTrigger": "0"}, "option 'maxFilesPerTrigger' = '0': must be greater than 0"),
        ({"fileFormat": "csv", "maxFilesPerTrigger": "1", "maxBytesPerTrigger": "1m"}, "cannot be combined with maxFilesPerTrigger"),
        ({"fileFormat": "csv", "cleanSource": "archive"}, "option 'cleanSource' = 'archive': archive needs the option sourceArchiveDir"),
        ({"fileFormat": "csv", "discoveryInterval": "soon"}, "option 'discoveryInterval' = 'soon': expected a duration"),
        ({"fileFormat": "csv", "sep": ";;"}, "option 'sep' = ';;': expected a single character"),
        ({"fileFormat": "csv", "encoding": "klingon"}, "option 'encoding' = 'klingon': unknown character set"),
        ({"fileFormat": "csv", "maxFilePerTrigger": "3"}, "did you mean 'maxFilesPerTrigger'?"),
        ({"fileFormat": "csv", "storageOptions": '["secret-key"]'}, "option 'storageOptions' = '***': expected a JSON object"),
        ({"fileFormat": "json", "comment": "#"}, "option 'comment' = '#': applies to csv, not json"),
        ({"fileFormat": "csv", "allowComments": "true"}, "option 'allowComments' = 'true': applies to json, not csv"),
        ({"fileFormat": "parquet", "lineSep": "|"}, "option 'lineSep' = '|': applies to csv, json, text, not parquet"),
        ({"fileFormat": "csv", "lineSep": "abc"}, "option 'lineSep' = 'abc': csv takes a separator of 1 or 2 characters"),
        ({"fileFormat": "text", "lineSep": ""}, "option 'lineSep' = '': cannot be an empty string"),
        ({"fileFormat": "json", "lineSep": "|", "multiLine": "true"}, "does not apply with multiLine"),
        ({"fileFormat": "csv", "comment": "#", "multiLine": "true"}, "option 'comment' = '#': is not supported with multiLine"),
        ({"fileFormat": "csv", "comment": "##"}, "option 'comment' = '##': expected a single character"),
        ({"fileFormat": "json", "ignoreLeadingWhiteSpace": "true"}, "applies to csv, not json"),
        ({"fileFormat": "csv", "sep": "\u00e9"}, "option 'sep' = '\u00e9': not an ASCII character"),
        ({"fileFormat": "csv", "delimiter": "\u00a7"}, "option 'delimiter' = '\u00a7': not an ASCII character"),
        ({"fileFormat": "csv", "quote": "\u201c"}, "option 'quote' = '\u201c': not an ASCII character"),
        ({"fileFormat": "csv", "escape": "\u00e9"}, "option 'escape' = '\u00e9': not an ASCII character"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(OptionError) as info:
        FileSourceOptions.from_options(options)
    assert message in str(info.value) and "secret-key" not in str(info.value)


def test_paths_from_load_and_options():
    assert parse_paths({"path": "/a"}) == ["/a"]
    assert parse_paths({"paths": '["/a", "s3://b/c"]'}) == ["/a", "s3://b/c"]
    assert parse_paths({"paths": "/a, /b"}) == ["/a", "/b"]
    with pytest.raises(OptionError, match="no path given"):
        parse_paths({})


def test_options_render_back():
    cfg = FileSourceOptions(file_format="csv", max_files_per_trigger=10, discovery_interval=timedelta(seconds=5))
    assert FileSourceOptions.from_options(cfg.to_options()) == cfg


@pytest.mark.parametrize("values, expected", [
    (["1", "-7"], IntegerType()), (["1", "5000000000"], LongType()),
    (["1", "123456789012345678901234"], DecimalType(24, 0)), (["1", "2.5"], DoubleType()),
    (["5000000000", "1e3"], DoubleType()), (["NaN"], DoubleType()),
    (["2024-02-29", "2024-03-01 10:00:00"], TimestampType()), (["2024-02-29"], DateType()),
    (["2024-02-30"], StringType()), (["1", "a"], StringType()), (["2024-02-29", "1"], StringType()),
    ([partition_directories.NULL_VALUE, "3"], IntegerType()), ([partition_directories.NULL_VALUE], NullType()),
])
def test_partition_types_are_inferred_and_widened_as_spark_does(values, expected):
    files = [f"/t/p={value}/f{i}.json" for i, value in enumerate(values)]
    assert partitions.infer(("/t",), files) == [StructField("p", expected, True)]


def test_partition_values_stop_at_a_base_or_a_plain_directory():
    assert partitions.path_values(("/t",), "/t/a=1/b=x%2Fy%3D/f") == (("a", "1"), ("b", "x/y="))
    assert partitions.path_values(("/t/a=1",), "/t/a=1/b=2/f") == (("b", "2"),)
    assert partitions.path_values(("/t",), "/t/a=1/plain/b=2/f") == (("b", "2"),)
    assert partitions.path_values(("/t/*",), "/t/a=1/b=2/f") == (("b", "2"),)  # a glob match is a base
    assert partitions.path_values(("/t",), f"/t/a={partition_directories.NULL_VALUE}/f") == (("a", None),)
    assert partitions.path_values(("s3://b/t",), "s3://b/t/a=1/f") == (("a", "1"),)


def test_a_path_naming_a_file_has_no_partition_columns_above_it(tmp_path):
    """As Spark: a file given as the path is its own table, its directory the base."""
    (tmp_path / "k=1").mkdir()
    (tmp_path / "k=1" / "f.json").write_text('{"a": 1}\n')
    assert partitions.bases([str(tmp_path / "k=1" / "f.json")], None, None) == (str(tmp_path / "k=1"),)
    assert partitions.bases([str(tmp_path / "k=1")], None, None) == (str(tmp_path / "k=1"),)


def test_conflicting_partition_directories_and_a_base_path_not_above_fail_clearly(tmp_path):
    with pytest.raises(OptionError, match="conflicting partition directories: /t/a=1/f has the partition "
                                          "columns \\['a'\\], /t/g has \\[\\]"):
        partitions.infer(("/t",), ["/t/a=1/f", "/t/g"])
    with pytest.raises(OptionError, match="option 'basePath' = '/elsewhere'.*the path .*/t is not under it"):
        partitions.bases([str(tmp_path / "t")], "/elsewhere", None)


def test_partition_directories_under_different_tables_fail_as_in_spark():
    """A glob over a table's first partition level (t/* over t/a=1/b=1, t/a=2/b=1) makes each of a=1 and a=2 a
    table with column b: Spark fails such a read (CONFLICTING_DIRECTORY_STRUCTURES, checked on 4.3)."""
    files = ["/t/a=1/b=1/f", "/t/a=1/b=2/f", "/t/a=2/b=1/f"]
    with pytest.raises(OptionError, match="conflicting directory structures: /t/a=1/b=1 and /t/a=2/b=1 are "
                                          "partition directories under different tables"):
        partitions.infer(("/t/*",), files)
    assert partitions.infer(("/t/*/*",), files) == []
    assert partitions.infer(("/t/a=1",), files[:2]) == [StructField("b", IntegerType())]
    assert partitions.infer(("/t",), files) == [StructField("a", IntegerType()), StructField("b", IntegerType())]


def test_a_partition_value_its_column_cannot_hold_names_the_file(tmp_path):
    directory = tmp_path / "n=abc"
    directory.mkdir()
    (directory / "f.json").write_text('{"a": 1}\n')
    schema = StructType([StructField("a", LongType()), StructField("n", IntegerType())])
    with pytest.raises(ValueError, match="f.json: the partition directory n=abc does not hold a int32 value for column 'n'"):
        read_all(str(tmp_path), schema, fileFormat="json")


def test_a_string_column_reads_any_json_value_as_its_text(tmp_path):
    """As Spark: a number, boolean, object or array where a string goes is the text it is written
    as, at any depth; a string stays a string, null stays null."""
    path = tmp_path / "a.json"
    path.write_text('{"m": {"k":[ true ,1.50]}, "s": {"x": 1.50}, "l": [1, "a", null]}\n'
                    '{"m": "plain", "s": {"x": false}, "l": [{"q" : 1}]}\n{"m": null, "s": null, "l": null}\n')
    schema = StructType([StructField("m", StringType()), StructField("s", StructType([StructField("x", StringType())])),
                         StructField("l", ArrayType(StringType()))])
    assert read_all(str(path), schema, fileFormat="json") == [
        {"m": '{"k":[ true ,1.50]}', "s": {"x": "1.50"}, "l": ["1", "a", None]},
        {"m": "plain", "s": {"x": "false"}, "l": ['{"q" : 1}']},
        {"m": None, "s": None, "l": None}]


# ---------------------------------------------------------------------------------------------
# dateFormat / timestampFormat / timestampNTZFormat

UTC = pa.timestamp("us", "UTC")


@pytest.mark.parametrize("pattern, kind, values, expected", [
    ("dd/MM/yyyy", pa.date32(), ["01/02/2024", "29/02/2024", "31/02/2024", "29/02/2023", "1/2/2024", "01/13/2024", None],
     ["2024-02-01", "2024-02-29", None, None, None, None, None]),
    ("d/M/yy", pa.date32(), ["1/2/24", "01/12/99", "1/2/2024"], ["2024-02-01", "2099-12-01", None]),
    ("dd-MMM-yyyy", pa.date32(), ["29-Feb-2024", "01-sep-2024", "01-Sept-2024"], ["2024-02-29", "2024-09-01", None]),
    ("MMMM yyyy", pa.date32(), ["FEBRUARY 2024", "Feb 2024"], ["2024-02-01", None]),
    ("yyyy-MM-dd HH:mm", pa.date32(), ["2024-02-29 23:59", "2024-02-29 24:00"], ["2024-02-29", None]),
    ("'day' dd 'of' MM yyyy", pa.date32(), ["Day 29 of 02 2024", "29 of 02 2024"], ["2024-02-29", None]),
    ("MM/dd/yyyy HH:mm", UTC, ["02/29/2024 13:05", "02/29/2024 13:60", "02/29/2024 13:05 "],
     ["2024-02-29 13:05:00+00:00", None, None]),
    ("yyyy-MM-dd'T'HH:mm:ss.SSSXXX", UTC,
     ["2024-02-29T13:05:00.123+01:00", "2024-02-29t13:05:00.5z", "2024-02-29T13:05:00.123-05:30",
      "2024-02-29T13:05:00.1234Z", "2024-02-29T13:05:00Z", "2024-02-29T13:05:00.123+19:00"],
     ["2024-02-29 12:05:00.123000+00:00", "2024-02-29 13:05:00.500000+00:00", "2024-02-29 18:35:00.123000+00:00",
      None, None, None]),
    ("HH:mm:ss.SSSSSSX", UTC, ["00:00:00.000001+01", "00:00:00.1+0130", "00:00:00.1+01:30"],
     ["1969-12-31 23:00:00.000001+00:00", "1969-12-31 22:30:00.100000+00:00", None]),
    ("dd/MM/yy hh:mm a", UTC, ["29/02/24 01:05 PM", "29/02/24 12:00 am", "29/02/24 12:30 pm", "29/02/24 00:30 AM",
                               "29/02/24 13:30 PM"],
     ["2024-02-29 13:05:00+00:00", "2024-02-29 00:00:00+00:00", "2024-02-29 12:30:00+00:00", None, None]),
    ("hh:mm yyyyMMdd", UTC, ["12:05 20240229"], ["2024-02-29 00:05:00+00:00"]),  # hh without a: AM
    ("yyyy-MM-dd HH:mm:ssZ", UTC, ["2024-02-29 13:05:00+0100", "2024-02-29 13:05:00Z"], ["2024-02-29 12:05:00+00:00", None]),
    ("yyyy-MM-dd HH:mm:ssxxx", UTC, ["2024-02-29 13:05:00+00:00", "2024-02-29 13:05:00Z"], ["2024-02-29 13:05:00+00:00", None]),
    ("yyyy-MM-dd[ HH:mm[:ss]][XXX]", UTC, ["2024-02-29", "2024-02-29 10:30", "2024-02-29 10:30:15+01:00", "2024-02-29 10"],
     ["2024-02-29 00:00:00+00:00", "2024-02-29 10:30:00+00:00", "2024-02-29 09:30:15+00:00", None]),
    ("dd/MM/yyyy HH:mm[XXX]", pa.timestamp("us"), ["29/02/2024 13:05", "29/02/2024 13:05+01:00"],
     ["2024-02-29 13:05:00", None]),  # timestamp_ntz: no offset, as Spark
])  # fmt: skip
def test_date_time_patterns_parse_as_spark_does(pattern, kind, values, expected):
    parsed = DateTimePattern(pattern).parse(pa.array(values, pa.string()), kind)
    assert [None if v is None else str(v) for v in parsed.to_pylist()] == expected


@pytest.mark.parametrize("option, pattern, message", [
    ("dateFormat", "yyyy-MM-dd EEE", "option 'dateFormat' = 'yyyy-MM-dd EEE': unsupported pattern letter 'E' (EEE)"),
    ("timestampFormat", "yyyy-MM-dd HH:mm z", "option 'timestampFormat' = 'yyyy-MM-dd HH:mm z': unsupported pattern letter 'z'"),
    ("timestampNTZFormat", "yyyy-Q", "option 'timestampNTZFormat' = 'yyyy-Q': unsupported pattern letter 'Q'"),
    ("dateFormat", "yyyyy", "unsupported pattern letter 'y' (yyyyy)"),
    ("dateFormat", "yyyy-MM-dd'T", "unclosed quote"),
    ("dateFormat", "yyyy-MM[-dd", "'[' without ']'"),
    ("dateFormat", "yyyy{MM}", "unsupported pattern character '{'"),
])  # fmt: skip
def test_an_unsupported_pattern_fails_at_query_start(option, pattern, message):
    with pytest.raises(OptionError) as info:
        FileSourceOptions.from_options({"fileFormat": "csv", option: pattern})
    assert message in str(info.value)
    with pytest.raises(OptionError, match="option 'dateFormat' = 'dd/MM/yyyy': applies to csv and json, not parquet"):
        FileSourceOptions.from_options({"fileFormat": "parquet", "dateFormat": "dd/MM/yyyy"})


def test_date_time_formats_apply_at_any_depth_of_json_and_to_timestamp_ntz(tmp_path):
    path = tmp_path / "nested.json"
    path.write_text('{"a": 1, "x": ["29/02/2024", null], "y": {"t": "29/02/2024 13:05"}}\n'
                    '{"a": 2, "x": ["30/02/2024"], "y": null}\n'
                    '{"a": 3, "x": [], "y": {"t": "2024-02-29 13:05"}}\n')
    schema = StructType([StructField("a", LongType()), StructField("x", ArrayType(DateType())),
                         StructField("y", StructType([StructField("t", TimestampNTZType())])),
                         StructField("_corrupt_record", StringType())])
    rows = read_all(str(path), schema, fileFormat="json", dateFormat="dd/MM/yyyy", timestampNTZFormat="dd/MM/yyyy HH:mm")
    assert [(r["a"], r["x"], r["y"]) for r in rows if r["_corrupt_record"] is None] == [
        (1, [datetime.date(2024, 2, 29), None], {"t": datetime.datetime(2024, 2, 29, 13, 5)})]
    assert sorted(json.loads(r["_corrupt_record"])["a"] for r in rows if r["_corrupt_record"] is not None) == [2, 3]
    csv = tmp_path / "ntz.csv"
    csv.write_text("1,29/02/2024 13:05\n2,29/02/2024 13:05+01:00\n")
    schema = StructType([StructField("a", LongType()), StructField("t", TimestampNTZType())])
    assert read_all(str(csv), schema, fileFormat="csv", timestampNTZFormat="dd/MM/yyyy HH:mm[XXX]", mode="DROPMALFORMED") == [
        {"a": 1, "t": datetime.datetime(2024, 2, 29, 13, 5)}]


# ---------------------------------------------------------------------------------------------
# timeZone


@pytest.mark.parametrize("zone, offset", [
    ("America/New_York", -5), ("UTC", 0), ("Z", 0), ("GMT", 0), ("+01:00", 1), ("-08:00", -8), ("+0530", 5.5),
    ("+5:30", 5.5), ("+1", 1), ("GMT+1", 1), ("UTC-03:00", -3), ("EST", -5), ("PST", -8), ("Etc/GMT+5", -5),
])  # fmt: skip
def test_time_zone_option_takes_the_zone_ids_spark_takes(zone, offset):
    """timeZone: what Spark's DateTimeUtils.getZoneId takes (Java's ZoneId.of with SHORT_IDS)."""
    spec = read_spec(config(fileFormat="csv", timeZone=zone), ["/x"], StructType([StructField("a", LongType())]))
    assert spec.zone.utcoffset(datetime.datetime(2024, 1, 15)) == timedelta(hours=offset)


@pytest.mark.parametrize("zone", ["utc", "america/new_york", "Mars/Base", "+100", "+19:00", "+01:60", " UTC", "",
                                  "UTC+", "localtime", "posixrules"])
def test_time_zone_option_refuses_what_spark_refuses(zone):
    with pytest.raises(OptionError, match=f"option 'timeZone' = '{re.escape(zone)}': not a time zone"):
        config(fileFormat="json", timeZone=zone)


def test_zone_less_timestamps_read_in_the_time_zone(tmp_path):
    """csv and json timestamp text without an offset (ISO, Spark's lenient text, timestampFormat) is
    read in timeZone, a gap's time moved on by the gap and an overlap's at the earlier offset (as
    Java's ZonedDateTime.of); text with an offset, timestamp_ntz and dates are not moved."""
    new_york = {"timeZone": "America/New_York"}
    texts = ["2024-01-15 10:00:00", "2024-07-01T12:00", "2024-03-10 02:30:00", "2024-11-03 01:30:00",
             "2024-1-15 10:00:00.5", "2024-01-15T10:00:00+01:00", "2024-01-15T10:00:00Z"]
    utc = datetime.timezone.utc
    expected = [datetime.datetime(2024, 1, 15, 15, tzinfo=utc), datetime.datetime(2024, 7, 1, 16, tzinfo=utc),
                datetime.datetime(2024, 3, 10, 7, 30, tzinfo=utc), datetime.datetime(2024, 11, 3, 5, 30, tzinfo=utc),
                datetime.datetime(2024, 1, 15, 15, 0, 0, 500000, tzinfo=utc),
                datetime.datetime(2024, 1, 15, 9, tzinfo=utc), datetime.datetime(2024, 1, 15, 10, tzinfo=utc)]
    schema = StructType([StructField("t", TimestampType()), StructField("n", TimestampNTZType()),
                         StructField("d", DateType())])
    (tmp_path / "t.csv").write_text("".join(f"{t},2024-01-15 10:00:00,2024-01-15\n" for t in texts))
    (tmp_path / "t.json").write_text("".join(json.dumps({"t": t, "n": "2024-01-15 10:00:00", "d": "2024-01-15"}) + "\n"
                                             for t in texts))
    for fmt in ("csv", "json"):
        rows = read_all(str(tmp_path / f"t.{fmt}"), schema, fileFormat=fmt, **new_york)
        assert [r["t"] for r in rows] == expected, fmt
        assert {(r["n"], r["d"]) for r in rows} == {(datetime.datetime(2024, 1, 15, 10), datetime.date(2024, 1, 15))}
    (tmp_path / "p.csv").write_text("15/01/2024 10:00\n10/03/2024 02:30 +05:30\n10/03/2024 02:30\n")
    rows = read_all(str(tmp_path / "p.csv"), StructType([StructField("t", TimestampType())]), fileFormat="csv",
                    timestampFormat="dd/MM/yyyy HH:mm[ XXX]", timeZone="-08:00")
    assert [r["t"] for r in rows] == [datetime.datetime(2024, 1, 15, 18, tzinfo=utc),
                                      datetime.datetime(2024, 3, 9, 21, tzinfo=utc),
                                      datetime.datetime(2024, 3, 10, 10, 30, tzinfo=utc)]


def test_partition_values_and_modified_times_are_read_in_the_time_zone(tmp_path):
    """timeZone also gives the zone of timestamps in key=value directory names and of modifiedBefore /
    modifiedAfter, as Spark's file index reads them: the latter compared with the file's time as the
    zone's wall-clock time (Spark's ModifiedDateFilter), 10:00 in New York for 15:00 UTC."""
    directory = tmp_path / "ts=2024-01-15 10%3A00%3A00"
    directory.mkdir()
    (directory / "f.json").write_text('{"a": 1}\n')
    os.utime(directory / "f.json", (1705330800, 1705330800))  # 2024-01-15T15:00:00Z
    schema = StructType([StructField("a", LongType()), StructField("ts", TimestampType())])
    rows = read_all(str(tmp_path), schema, fileFormat="json", timeZone="America/New_York")
    assert rows == [{"a": 1, "ts": datetime.datetime(2024, 1, 15, 15, tzinfo=datetime.timezone.utc)}]
    listed = FileLister.of_source(config(fileFormat="json", timeZone="America/New_York",
                                         modifiedAfter="2024-01-15T04:59:59"), [str(tmp_path)]).list()
    assert len(listed) == 1
    listed = FileLister.of_source(config(fileFormat="json", timeZone="America/New_York",
                                         modifiedAfter="2024-01-15T05:00:00"), [str(tmp_path)]).list()
    assert not listed


def test_clean_source_archive_never_overwrites_an_archived_file(tmp_path, caplog):
    """As Spark's SourceFileArchiver (Hadoop's rename does not replace a file): a file whose
    archive path is taken already, by an earlier file of the same path, stays in place with a
    warning naming both paths, and the archived copy stays intact."""
    src, archive = tmp_path / "in", tmp_path / "archive"
    src.mkdir()
    cfg = config(fileFormat="text", discoveryInterval="0", cleanSource="archive", sourceArchiveDir=str(archive))
    archived = archive / str(src / "a.txt").lstrip("/")

    def read_and_commit() -> list[str]:  # one batch of a new query (a new checkpoint), committed
        reader = FileStreamReader(cfg, [str(src)], read_spec(cfg, [str(src)], TEXT))
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        rows = [row["value"] for p in reader.partitions(start, end) for batch in reader.read(p) for row in batch.to_pylist()]
        reader.commit(end)
        return rows

    write_file(src, "a.txt", "first\n")
    assert read_and_commit() == ["first"]
    assert not (src / "a.txt").exists() and archived.read_text() == "first\n"
    write_file(src, "a.txt", "second\n")
    with caplog.at_level("WARNING", logger="connectors.files.source.reader"):
        assert read_and_commit() == ["second"]
    assert archived.read_text() == "first\n"
    assert (src / "a.txt").read_text() == "second\n"
    assert f"{src / 'a.txt'} is not moved to {archived}, which exists already" in caplog.text
