"""connectors.files: modifiedBefore/After, fileNameOnly, mergeSchema, avroSchema, ignoreExtension,
missing paths and empty directories, checked against Spark's own readers on the same files."""

from __future__ import annotations

import io
import json
import os
import re
import time

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from connectors.core.options import OptionError
from connectors.core.spark_compat import ReadAllAvailable
from connectors.files.source.offsets import SeenFiles
from connectors.files.source.options import FileSourceOptions
from connectors.files.source.reader import DirectoryMonitor
from pyspark.errors import PySparkException


def rows(df) -> list[str]:
    return sorted(map(str, df.collect()))


def ours(spark, file_format: str, **options):
    return spark.read.format("connectors.files").option("fileFormat", file_format).options(**options)


def test_modified_before_and_after_select_files_as_spark(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i, stamp in enumerate([1_700_000_000.0, 1_700_000_000.5, 1_700_003_600.0]):  # 2023-11-14T22:13:20 UTC
        (src / f"{i}.json").write_text(json.dumps({"i": i}) + "\n")
        os.utime(src / f"{i}.json", (stamp, stamp))
    cases = [
        {"modifiedBefore": "2023-11-14T22:13:20.5"},  # strictly before: not the file stamped at .5
        {"modifiedBefore": "2023-11-14T22:13:20.500001"},
        {"modifiedAfter": "2023-11-14T22:13:20"},
        {"modifiedAfter": "2023-11-14T23:13:20+01:00", "modifiedBefore": "2023-11-14 23:00:00"},  # an offset, both
    ]
    for options in cases:
        expected = sorted(r.i for r in spark.read.options(**options).json(str(src)).collect())
        assert sorted(r.i for r in ours(spark, "json", **options).load(str(src)).collect()) == expected, options
    with pytest.raises(PySparkException, match="modifiedBefore.*expected format is YYYY-MM-DDTHH:mm:ss"):
        ours(spark, "json", modifiedBefore="yesterday").load(str(src))
    with pytest.raises(PySparkException, match="modifiedAfter.*not allowed in file stream sources"):
        (spark.readStream.format("connectors.files").schema("i long").options(fileFormat="json", modifiedAfter="2024-01-01")
         .load(str(src)).writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
         .processAllAvailable())


def test_merge_schema_merges_parquet_footers_as_spark(spark, tmp_path):
    src = tmp_path / "p"
    src.mkdir()
    pq.write_table(pa.table({"b": ["q"], "a": pa.array([2], pa.int64()),
                             "s": pa.array([{"y": "z"}], pa.struct([("y", pa.string())]))}), src / "0.parquet")
    pq.write_table(pa.table({"a": pa.array([1], pa.int64()),
                             "s": pa.array([{"x": 1}], pa.struct([("x", pa.int32())]))}), src / "1.parquet")
    for merge in ("true", "false"):
        theirs = spark.read.option("mergeSchema", merge).parquet(str(src))
        df = ours(spark, "parquet", mergeSchema=merge).load(str(src))
        assert (df.schema.simpleString(), rows(df)) == (theirs.schema.simpleString(), rows(theirs)), merge
    conflict = tmp_path / "c"
    conflict.mkdir()
    pq.write_table(pa.table({"a": pa.array([1], pa.int32())}), conflict / "0.parquet")
    pq.write_table(pa.table({"a": pa.array([2], pa.int64())}), conflict / "1.parquet")  # Spark widens no int
    with pytest.raises(Exception, match="CANNOT_MERGE_SCHEMAS"):  # py4j's error, not converted
        spark.read.option("mergeSchema", "true").parquet(str(conflict))
    with pytest.raises(PySparkException, match=r"mergeSchema.*1\.parquet.*int and bigint.*CANNOT_MERGE_SCHEMAS"):
        ours(spark, "parquet", mergeSchema="true").load(str(conflict))
    with pytest.raises(OptionError, match="mergeSchema.*applies to parquet, not avro"):
        FileSourceOptions.from_options({"fileFormat": "avro", "mergeSchema": "true"})


def _avro_file(path, schema: dict, records: list[dict]) -> None:
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(schema), records)
    path.write_bytes(buffer.getvalue())


def test_avro_schema_resolves_files_and_ignore_extension(spark, tmp_path):
    src = tmp_path / "a"
    src.mkdir()
    v1 = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}]}
    v2 = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}, {"name": "extra", "type": "double"}]}
    _avro_file(src / "1.avro", v1, [{"id": 1, "name": "one"}])
    _avro_file(src / "2.avro", v2, [{"id": 2, "extra": 0.5}])
    _avro_file(src / "3.data", v1, [{"id": 3, "name": "three"}])  # no .avro extension
    reader = {"type": "record", "name": "r", "fields": [
        {"name": "id", "type": "long"},  # int promotes to long
        {"name": "name", "type": ["string", "null"], "default": "?"},  # missing in v2: its default
        {"name": "more", "type": ["null", "int"], "default": None},
    ]}
    df = ours(spark, "avro", avroSchema=json.dumps(reader)).load(str(src))
    assert df.schema.simpleString() == "struct<id:bigint,name:string,more:int>"
    assert rows(df) == ["Row(id=1, name='one', more=None)", "Row(id=2, name='?', more=None)",
                        "Row(id=3, name='three', more=None)"]
    only_avro = ours(spark, "avro", avroSchema=json.dumps(reader), ignoreExtension="false").load(str(src))
    assert sorted(r.id for r in only_avro.collect()) == [1, 2]
    assert sorted(r.id for r in ours(spark, "avro").load(str(src / "*[13].*")).collect()) == [1, 3]
    assert sorted(r.id for r in ours(spark, "avro", ignoreExtension="false").load(str(src / "*[13].*")).collect()) == [1]
    wrong = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "string"}]}  # a long is no string
    with pytest.raises(PySparkException, match="cannot be resolved to the reader schema"):
        ours(spark, "avro", avroSchema=json.dumps(wrong)).load(str(src / "2.avro")).collect()


def _monitor(src, **options) -> DirectoryMonitor:
    config = FileSourceOptions.from_options({"fileFormat": "text", "discoveryInterval": "0", **options})
    return DirectoryMonitor(config, [str(src)])


def test_file_name_only_reads_a_name_once_and_replays_the_same_files(tmp_path):
    now = time.time()
    src = tmp_path / "in"
    for i, directory in enumerate(["a", "b", "c"]):
        (src / directory).mkdir(parents=True)
        (src / directory / "x.txt").write_text(directory)
        os.utime(src / directory / "x.txt", (now - 30 + i, now - 30 + i))
    (src / "a" / "y.txt").write_text("y")
    start = SeenFiles().to_offset()
    end = _monitor(src, fileNameOnly="true").latest(start, ReadAllAvailable())
    names = [os.path.relpath(f.path, src) for f in _monitor(src, fileNameOnly="true").batch_files(start, end)]
    assert names == ["a/x.txt", "a/y.txt"]  # one x.txt: a name is read once
    (src / "d").mkdir()
    (src / "d" / "x.txt").write_text("d")  # newest: a replay after a restart still takes a/x.txt
    restarted = _monitor(src, fileNameOnly="true")
    assert [os.path.relpath(f.path, src) for f in restarted.batch_files(start, end)] == names
    assert restarted.latest(end, ReadAllAvailable()) is end  # the other x.txt are not new
    assert len(_monitor(src).batch_files(start, _monitor(src).latest(start, ReadAllAvailable()))) == 5
    with pytest.raises(OptionError, match="fileNameOnly.*differs from the setting the checkpoint"):
        _monitor(src).latest(end, ReadAllAvailable())


def test_file_name_only_stream_as_spark(spark, tmp_path):
    """A file named like one read in an earlier batch is not read, as by Spark's file stream source."""
    results = {}
    for name, reader in [("spark", spark.readStream.format("text")),
                         ("ours", spark.readStream.format("connectors.files").option("fileFormat", "text"))]:
        src = tmp_path / name
        (src / "a").mkdir(parents=True)
        (src / "a" / "x.txt").write_text("a\n")
        stream = reader.option("fileNameOnly", "true").load(str(src / "*"))
        out = tmp_path / f"out-{name}"
        for _ in range(2):  # two runs on one checkpoint; b/x.txt lands between them
            query = (stream.writeStream.format("json").option("path", str(out))
                     .option("checkpointLocation", str(tmp_path / f"cp-{name}")).trigger(availableNow=True).start())
            query.awaitTermination()
            (src / "b").mkdir(exist_ok=True)
            (src / "b" / "x.txt").write_text("b\n")
            (src / "b" / "y.txt").write_text("y\n")
        results[name] = sorted(r.value for r in spark.read.json(str(out)).collect())
    assert results["ours"] == results["spark"] == ["a", "y"]


def test_a_missing_path_fails_at_the_start_and_an_empty_directory_reads_no_rows_as_spark(spark, tmp_path):
    (tmp_path / "empty").mkdir()
    for path, what in ((tmp_path / "missing", "does not exist"), (tmp_path / "missing" / "*.csv", "matches no file")):
        with pytest.raises(PySparkException, match="PATH_NOT_FOUND"):
            spark.read.schema("a int").csv(str(path)).collect()
        with pytest.raises(PySparkException, match=re.escape(f"option 'path' = '{path}': {what}")):
            ours(spark, "csv").schema("a int").load(str(path)).collect()
    with pytest.raises(PySparkException, match=rf"option 'path' = '{tmp_path / 'missing'}': does not exist"):
        ours(spark, "parquet").load(str(tmp_path / "missing")).collect()  # before inferring a schema
    empty = str(tmp_path / "empty")
    assert spark.read.schema("a int").csv(empty).collect() == ours(spark, "csv").schema("a int").load(empty).collect() == []


def test_a_stream_fails_on_a_missing_directory_and_takes_a_glob_matching_nothing_yet_as_spark(spark, tmp_path):
    missing, glob = str(tmp_path / "missing"), str(tmp_path / "later" / "*.csv")
    with pytest.raises(PySparkException, match="PATH_NOT_FOUND"):
        spark.readStream.schema("a int").csv(missing)
    failing = (spark.readStream.format("connectors.files").option("fileFormat", "csv").schema("a int").load(missing)
               .writeStream.format("noop").start())
    with pytest.raises(PySparkException, match=rf"option 'path' = '{missing}': does not exist"):
        failing.awaitTermination(60)
    query = (spark.readStream.format("connectors.files").option("fileFormat", "csv").schema("a int").load(glob)
             .writeStream.format("memory").queryName("later_glob").start())
    try:
        (tmp_path / "later").mkdir()
        (tmp_path / "later" / "1.csv").write_text("1\n2\n")
        deadline = time.monotonic() + 60
        while spark.table("later_glob").count() < 2:
            assert time.monotonic() < deadline, "the glob's files were not read"
            time.sleep(0.5)
    finally:
        query.stop()
    assert sorted(r.a for r in spark.table("later_glob").collect()) == [1, 2]
