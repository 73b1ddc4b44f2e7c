"""connectors.files sink on a real SparkSession: formats, buckets, listener, readers, object store."""

from __future__ import annotations

import gzip
import io
import json
import os
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from pyspark.errors import PySparkException

from connectors.core.arrow import UTC_ZONES
from connectors.files import FileSink, FileSinkListener, finish
from connectors.files.sink.csv_lines import CsvDialect, csv_lines
from connectors.testing.spark import run_available_now


def numbers(spark, end: int, rows_per_batch: int, partitions: int = 2):
    return (
        spark.readStream.format("connectors.numbers").option("end", end)
        .option("rowsPerBatch", rows_per_batch).option("numPartitions", partitions).load()
    )  # fmt: skip


def visible_files(base: Path) -> list[Path]:
    """Files a reader that skips hidden names sees."""
    return sorted(
        Path(root, name)
        for root, dirs, files in os.walk(base)
        if not any(part.startswith(("_", ".")) for part in Path(root).relative_to(base).parts)
        for name in files
        if not name.startswith((".", "_"))
    )


def wait_for(condition, timeout: float = 90.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def listener(spark):
    attached = []

    def attach(**options) -> FileSinkListener:
        attached.append(FileSinkListener(**options))
        spark.streams.addListener(attached[-1])
        return attached[-1]

    yield attach
    for item in attached:
        spark.streams.removeListener(item)


def test_csv_gzip_stream_few_files_visible_after_termination(spark, tmp_path, listener):
    out = tmp_path / "out"
    options = {"path": str(out), "fileFormat": "csv", "compression": "gzip", "partSuffix": ".csv.gz",
               "bucketAssigner": "basePath"}  # fmt: skip
    listener(**options)
    query = (
        numbers(spark, 4999, 1000).writeStream.format("connectors.files").options(**options)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(180)
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == 5
    # five batches appended to one open part per partition; when the query ended both were
    # published, compacted into one file (two gzip streams of members, one after the other)
    wait_for(lambda: len(visible_files(out)) == 1, what="parts published on termination")
    assert all(p.name.startswith("part-") and p.name.endswith(".csv.gz") for p in visible_files(out))
    with gzip.open(visible_files(out)[0]) as handle:  # one gzip member per batch: one stream
        assert handle.read().decode().splitlines()[0].isdigit()
    values = sorted(r.value for r in spark.read.schema("value long").csv(str(out)).collect())
    assert values == list(range(5000))
    assert finish(str(out)) == 0  # nothing left open; the command deletes the listener's leftovers
    assert not [n for n in os.listdir(out) if n.startswith(".")]


@pytest.mark.parametrize("compression, compaction", [("none", "false"), ("gzip", "true")])
def test_csv_header_and_sep_read_back_by_spark(spark, tmp_path, compression, compaction):
    out, checkpoint = tmp_path / "out", str(tmp_path / "cp")
    options = {"path": str(out), "fileFormat": "csv", "header": "true", "sep": ";", "compression": compression,
               "autoCompaction": compaction, "bucketAssigner": "basePath",
               "partSuffix": ".csv.gz" if compression == "gzip" else ".csv"}  # fmt: skip
    for end in (2999, 4999):  # a restart on the same checkpoint appends to the parts still open
        (
            numbers(spark, end, 1000).selectExpr("value", "concat('a;', value) AS name").writeStream
            .format("connectors.files").options(**options).option("checkpointLocation", checkpoint)
            .trigger(availableNow=True).start().awaitTermination(180)
        )  # fmt: skip
    finish(str(out))
    files = visible_files(out)
    assert len(files) == (1 if compaction == "true" else 2)
    for path in files:
        data = path.read_bytes()
        lines = (gzip.decompress(data) if compression == "gzip" else data).decode().splitlines()
        assert lines[0] == '"value";"name"' and lines.count(lines[0]) == 1 and len(lines) > 2000
    df = spark.read.option("header", "true").option("sep", ";").csv(str(out))
    assert df.columns == ["value", "name"] and df.count() == 5000
    assert df.where("name = concat('a;', value)").selectExpr("count(distinct value)").first()[0] == 5000


def test_foreach_batch_json_by_column_matches_spark_layout(spark, tmp_path):
    out = tmp_path / "out"
    df = numbers(spark, 2999, 1000).selectExpr("value", "cast(value % 3 as string) as k")
    (
        df.writeStream.foreachBatch(FileSink(str(out), fileFormat="json", bucketAssigner="column", bucketColumn="k"))
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
        .awaitTermination(180)
    )  # fmt: skip
    # 3 buckets x 2 partitions left open by the default policy, compacted: one file per bucket
    assert finish(str(out)) == 3
    assert sorted(p.parent.name for p in visible_files(out)) == ["k=0", "k=1", "k=2"]
    first = json.loads(visible_files(out)[0].read_text().splitlines()[0])
    assert list(first) == ["value"]  # the bucket column lives in the directory name, as partitionBy
    rows = spark.read.json(str(out)).collect()
    assert sorted((r.value, int(r.k)) for r in rows) == [(v, v % 3) for v in range(3000)]


@pytest.mark.parametrize("fmt", ["json", "csv", "csv-rfc4180"])
def test_row_parts_read_back_by_spark_to_the_same_values(spark, tmp_path, fmt):
    """Every Spark type a row format holds through our parts and Spark's reader, given the schema:
    exact doubles, NaN and infinities, decimals, dates and timestamps, and in json arrays with
    nulls, maps and binary, survive; a double column of whole numbers is still inferred as double.
    csv strings hold quotes and backslashes, read with Spark's default ``escape`` and with RFC 4180's."""
    text = ("concat('n\"\\\\', id, ',;é', if(id = 3, '\\\\', ''))" if fmt.startswith("csv")
            else "concat('n\"\\\\', id, char(1), 'é')")  # a backslash last, before the closing quote
    options = {"escape": '"'} if fmt == "csv-rfc4180" else {}
    fmt = fmt.split("-")[0]
    nested = "" if fmt == "csv" else (", array(id, null) as arr, named_struct('a', id, 'b', array('x', null)) as st, "
                                      "if(id = 0, null, map('k', id, 'j', null)) as m, cast(concat('b', id) as binary) as bin")
    df = spark.sql(f"""
        select id, cast(id as double) / 3 as third, 0.1d + 0.2d as sum, cast(id as float) + 0.5f as f,
               cast(id * 2 as double) as whole, 1e300d * id as huge,
               if(id = 1, cast('NaN' as double), if(id = 2, cast('-Infinity' as double), 0.0d)) as odd,
               cast(id * 1.25 as decimal(20, 6)) as dec, {text} as str, timestamp_micros(1767225600000001 + id) as ts,
               cast(timestamp_micros(-1 - id) as timestamp_ntz) as ntz, date_add(date'1969-12-30', cast(id as int)) as day,
               id % 2 = 0 as flag, cast(null as string) as nothing, cast(id as byte) as b, cast(id as short) as s
               {nested}
        from range(4)""")
    out = tmp_path / "out"
    df.write.format("connectors.files").option("fileFormat", fmt).option("bucketAssigner", "basePath").options(
        **options).mode("append").save(str(out))

    def rows(frame) -> list[str]:  # as text: NaN equals itself there
        return [str(r) for r in sorted(frame.collect(), key=lambda r: r.id)]

    assert rows(spark.read.schema(df.schema).format(fmt).options(**options).load(str(out))) == rows(df)
    ours = spark.read.format("connectors.files").schema(df.schema).option("fileFormat", fmt).options(**options)
    assert rows(ours.load(str(out))) == rows(df)
    inferred = dict(spark.read.format(fmt).option("inferSchema", "true").options(**options).load(str(out)).dtypes)
    assert inferred["whole" if fmt == "json" else "_c4"] == "double"


@pytest.mark.smoke
def test_parquet_on_checkpoint_date_time_buckets(spark, tmp_path):
    out = tmp_path / "out"
    hours = {datetime.now(timezone.utc).strftime("%Y-%m-%d--%H")}
    run_available_now(
        numbers(spark, 2999, 1000).writeStream.format("connectors.files").option("path", str(out))
        .option("fileFormat", "parquet").option("checkpointLocation", str(tmp_path / "cp"))
    ).awaitTermination(180)  # fmt: skip
    hours.add(datetime.now(timezone.utc).strftime("%Y-%m-%d--%H"))
    files = visible_files(out)
    assert len(files) == 6  # a bulk format rolls at every batch: 3 batches x 2 partitions
    assert {p.parent.name for p in files} <= hours
    values = sorted(v for p in files for v in pq.read_table(p).column("value").to_pylist())
    assert values == list(range(3000))


def test_idle_stream_is_published_by_the_listener(spark, tmp_path, listener):
    out = tmp_path / "out"
    options = {"path": str(out), "fileFormat": "text", "bucketAssigner": "basePath",
               "inactivityInterval": "2s", "bucketCheckInterval": "500ms"}  # fmt: skip
    listener(**options)
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "500ms")
    try:
        query = (
            numbers(spark, 1999, 1000).selectExpr("cast(value as string) as value").writeStream
            .format("connectors.files").options(**options).option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="500 milliseconds").start()
        )  # fmt: skip
        try:
            # the source has no more data: no batch runs, only idle events
            wait_for(lambda: sum(len(p.read_text().splitlines()) for p in visible_files(out)) == 2000,
                     what="idle parts published")  # fmt: skip
            assert query.isActive
        finally:
            query.stop()
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    values = sorted(int(line) for p in visible_files(out) for line in p.read_text().splitlines())
    assert values == list(range(2000))


def test_polling_reader_never_sees_a_partial_file(spark, tmp_path):
    out = tmp_path / "out"
    seen: dict[Path, str] = {}
    problems: list[str] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for path in visible_files(out) if out.exists() else []:
                text = path.read_text()
                if path in seen and seen[path] != text:
                    problems.append(f"{path.name} changed after it appeared")
                lines = text.splitlines()
                if not text.endswith("\n") or any(json.loads(line).keys() != {"value"} for line in lines):
                    problems.append(f"{path.name} is partial")
                seen[path] = text
            time.sleep(0.01)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        (
            numbers(spark, 19_999, 2000).writeStream.format("connectors.files").option("path", str(out))
            .option("fileFormat", "json").option("bucketAssigner", "basePath").option("partSize", "30k")
            .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
            .awaitTermination(180)
        )  # fmt: skip
        finish(str(out))
        time.sleep(0.3)
    finally:
        stop.set()
        poller.join()
    assert problems == []
    assert len(seen) >= 6  # parts rolled by size during the run, while the poller watched
    values = sorted(json.loads(line)["value"] for text in seen.values() for line in text.splitlines())
    assert values == list(range(20_000))


def test_object_store_commit(spark, tmp_path, s3_server, unique):
    import s3fs

    bucket = s3_server.create_bucket(unique)
    storage = json.dumps(s3_server.storage_options())
    fs = s3fs.S3FileSystem(**s3_server.storage_options())
    # default policy, 2 partitions compacted into one object / on checkpoint, 3 batches x 2 partitions
    for file_format, expected in (("json", 1), ("parquet", 6)):
        base = f"{bucket}/{file_format}"
        (
            numbers(spark, 2999, 1000).writeStream.format("connectors.files").option("path", base)
            .option("fileFormat", file_format).option("bucketAssigner", "basePath")
            .option("storageOptions", storage).option("checkpointLocation", str(tmp_path / file_format))
            .trigger(availableNow=True).start().awaitTermination(180)
        )  # fmt: skip
        finish(base, s3_server.storage_options())
        fs.invalidate_cache()
        names = [p.rsplit("/", 1)[1] for p in fs.find(base)]
        finals = [n for n in names if n.startswith("part-")]
        assert len(finals) == expected and not [n for n in names if n.startswith(".")]
        if file_format == "json":
            values = [json.loads(line)["value"] for n in finals for line in fs.cat(f"{base}/{n}").decode().splitlines()]
        else:
            values = [v for n in finals for v in pq.read_table(f"{base}/{n}", filesystem=fs).column("value").to_pylist()]
        assert sorted(values) == list(range(3000))


def test_bad_options_fail_at_query_start(spark, tmp_path):
    stream = numbers(spark, 9, 10).writeStream.format("connectors.files").option("path", str(tmp_path / "o"))
    query = (
        stream.option("fileFormat", "parquet").option("rollingPolicy", "default")
        .option("checkpointLocation", str(tmp_path / "cp")).start()
    )  # fmt: skip
    with pytest.raises(PySparkException, match="option 'rollingPolicy' = 'default': fileFormat 'parquet' is a bulk"):
        query.awaitTermination(120)
    with pytest.raises(PySparkException, match="option 'partSize' = '-1': expected a size"):
        spark.range(3).write.format("connectors.files").option("fileFormat", "json").option("partSize", "-1").mode(
            "append"
        ).save(str(tmp_path / "b"))
    with pytest.raises(PySparkException, match="'fileFormat' = 'text': needs exactly one string column"):
        spark.range(3).write.format("connectors.files").option("fileFormat", "text").mode("append").save(
            str(tmp_path / "c")
        )
    with pytest.raises(ValueError, match="option 'bucketColumn' = 'k': applies only to bucketAssigner column"):
        FileSink(str(tmp_path), fileFormat="csv", bucketColumn="k")
    assert not (tmp_path / "o").exists()


@pytest.mark.smoke
def test_batch_write_append_and_overwrite(spark, tmp_path):
    out = str(tmp_path / "out")
    write = spark.range(100).write.format("connectors.files").option("fileFormat", "csv").option("bucketAssigner", "basePath")
    write.mode("append").save(out)
    write.mode("append").save(out)
    assert spark.read.schema("id long").csv(out).count() == 200
    spark.range(7).write.format("connectors.files").option("fileFormat", "csv").option(
        "bucketAssigner", "basePath"
    ).mode("overwrite").save(out)
    assert sorted(r.id for r in spark.read.schema("id long").csv(out).collect()) == list(range(7))


SPARK_ROWS = """
    select id, if(id = 2, null, concat('s', id)) as str, if(id = 1, '', 'x,y') as empty, cast(if(id = 0, null, id) as int) as n,
           if(id = 1, null, 0.1d + 0.2d) as d, cast(id * 1.25 as decimal(20, 6)) as dec,
           timestamp_micros(1767225600123456 + id * 46800000000) as ts, cast(timestamp_micros(-1 - id) as timestamp_ntz) as ntz,
           date_add(date'1969-12-30', cast(id as int)) as day {nested}
    from range(3)"""
NESTED = (", named_struct('a', if(id = 0, null, id), 'b', 'q') as st, array(id, null) as arr, "
          "map('k', if(id = 1, null, id)) as m, if(id = 1, null, named_struct('z', id)) as st2")


def our_and_sparks_file(spark, tmp_path, df, fmt: str, options: dict) -> tuple[bytes, bytes]:
    """The one file each writer makes of ``df`` (one partition) with the same options, session zone UTC."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # this sink writes UTC; Spark the session zone
    try:
        df.coalesce(1).write.format("connectors.files").options(fileFormat=fmt, bucketAssigner="basePath", **options)\
            .mode("append").save(str(tmp_path / "ours"))  # fmt: skip
        df.coalesce(1).write.format(fmt).options(**options).save(str(tmp_path / "spark"))
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    (ours,), (sparks,) = visible_files(tmp_path / "ours"), list((tmp_path / "spark").glob("part-*"))
    return ours.read_bytes(), sparks.read_bytes()


@pytest.mark.parametrize("options", [
    # Spark's default patterns, spelt out: this sink's defaults keep microseconds
    {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss[.SSS]"},
    {"ignoreNullFields": "false", "timestampFormat": "dd/MM/yyyy h:mm:ss.SSSSSS a xxx", "timestampNTZFormat":
     "yyyy MMM d HH:mm:ss.SSSSSS", "dateFormat": "d MMMM yyyy", "lineSep": "\r\n"},
])  # fmt: skip
def test_json_writer_options_give_sparks_bytes(spark, tmp_path, options):
    """ignoreNullFields (Spark's default true: null struct fields left out, nested ones too),
    the three patterns and lineSep: the same bytes as Spark's json writer, read back by Spark's
    json reader with the same options to the same rows."""
    df = spark.sql(SPARK_ROWS.format(nested=NESTED))
    ours, sparks = our_and_sparks_file(spark, tmp_path, df, "json", options)
    assert ours == sparks
    if "SSSSSS" in options["timestampFormat"]:  # microseconds kept: every value reads back
        read = spark.read.schema(df.schema).options(**options).json(str(tmp_path / "ours"))
        assert sorted(map(str, read.collect())) == sorted(map(str, df.collect()))


@pytest.mark.parametrize("zone", [*sorted(UTC_ZONES), "America/Los_Angeles"])
def test_csv_timestamps_have_the_text_arrow_gives_them(zone):
    """A zoned timestamp's text, made without the zone database: the same as Arrow's own writer
    gives for it in UTC (here in quotes), at every unit, from year 1 to 9999."""
    instants = [datetime(2024, 1, 2, 3, 4, 5), datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999),
                datetime(1969, 12, 31, 23, 59, 59, 500000), None]  # fmt: skip
    for unit in ("s", "ms", "us", "ns"):
        values = [t and t.replace(tzinfo=timezone.utc) if unit != "ns" or t is None or 1678 < t.year < 2262 else None
                  for t in instants]  # fmt: skip
        batch = pa.record_batch([pa.array(values, pa.timestamp(unit, tz=zone))], names=["t"])
        arrows = io.BytesIO()
        in_utc = batch if zone in UTC_ZONES else batch.cast(pa.schema([("t", pa.timestamp(unit, tz="UTC"))]))
        pacsv.write_csv(in_utc, arrows, pacsv.WriteOptions(include_header=False))
        assert csv_lines(batch, CsvDialect()).replace(b'"', b"") == arrows.getvalue(), unit


def test_csv_timestamps_of_other_zones_are_written_in_utc():
    """A session zone's local time with an offset cut to minutes, as Arrow's writer gives it
    (1883-11-18 04:07:02-0752), is 58 s off the instant: written in UTC, as json writes it."""
    values = [datetime(1883, 11, 18, 12, tzinfo=timezone.utc), datetime(2024, 3, 10, 10, 30, tzinfo=timezone.utc)]
    batch = pa.record_batch([pa.array(values, pa.timestamp("us", tz="America/Los_Angeles"))], names=["t"])
    assert csv_lines(batch, CsvDialect()) == b'"1883-11-18 12:00:00.000000Z"\n"2024-03-10 10:30:00.000000Z"\n'


def test_csv_writer_options_give_sparks_bytes_or_rows(spark, tmp_path):
    """quoteAll quotes every field, as this sink quotes strings: the same bytes as Spark's csv
    writer; without it strings are quoted here only, and Spark's reader reads back the same rows."""
    df = spark.sql(SPARK_ROWS.format(nested=""))
    options = {"quoteAll": "true", "nullValue": "NULL", "emptyValue": "E", "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX",
               "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss[.SSS]", "dateFormat": "dd.MM.yyyy"}  # fmt: skip
    ours, sparks = our_and_sparks_file(spark, tmp_path / "quoted", df, "csv", options)
    assert ours == sparks
    options = {"nullValue": "NULL", "emptyValue": "EMPTY", "lineSep": ";", "encoding": "UTF-16LE", "header": "true",
               "timestampFormat": "dd/MM/yyyy HH:mm:ss.SSSSSS XXX", "timestampNTZFormat": "yyyy-MM-dd HH:mm:ss.SSSSSS",
               "dateFormat": "d MMM yyyy"}  # fmt: skip
    ours, sparks = our_and_sparks_file(spark, tmp_path / "read", df, "csv", options)
    # (Spark's reader cuts lines at lineSep before it parses quotes: no value may hold one)
    assert ours.decode("utf-16-le").split(";")[:3] == ['"id","str","empty","n","d","dec","ts","ntz","day"',
                                                      '0,"s0","x,y",NULL,"0.30000000000000004",0.000000,"01/01/2026 00:00:00.123456 Z"'
                                                      ',"1969-12-31 23:59:59.999999","30 Dec 1969"', '1,"s1","EMPTY",1,NULL,1.250000'
                                                      ',"01/01/2026 13:00:00.123456 Z","1969-12-31 23:59:59.999998","31 Dec 1969"']  # fmt: skip

    def rows(writer: str) -> list[str]:
        return sorted(map(str, spark.read.schema(df.schema).options(**options).csv(str(tmp_path / "read" / writer)).collect()))

    assert rows("ours") == rows("spark")  # Spark reads the emptyValue back as it is, from either file
    assert rows("ours") == sorted(map(str, df.replace("", "EMPTY", subset=["empty"]).collect()))


def test_two_writes_to_one_path_in_one_micro_batch_fail_instead_of_losing_rows(spark, tmp_path):
    out = tmp_path / "out"
    sink = FileSink(str(out), fileFormat="csv", bucketAssigner="basePath", rollingPolicy="onCheckpoint")

    def even_then_odd(df, batch_id):
        sink(df.filter("value % 2 = 0"), batch_id)
        sink(df.filter("value % 2 = 1"), batch_id)  # skipped as a replay of the batch, silently, before

    query = (
        numbers(spark, 99, 100).writeStream.foreachBatch(even_then_odd)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )  # fmt: skip
    with pytest.raises(PySparkException, match=r"micro-batch 0 was already written to \S+ in this run; write to one"):
        query.awaitTermination(180)
