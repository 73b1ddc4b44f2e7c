"""connectors.files source through Spark: batch, streams, admission, cleanSource, S3, crashes."""

from __future__ import annotations

import datetime
import json
import os
import time

import pyarrow.parquet as pq
import pytest
from compress import compressing
from connectors.core.checkpoint import read_checkpoint
from pyspark.errors import AnalysisException, PySparkException
from pyspark.errors.exceptions.captured import StreamingQueryException
from pyspark.sql.types import StructType

SCHEMA = "id long, file string"


def json_lines(ids, name) -> bytes:
    return "".join(json.dumps({"id": i, "file": name}) + "\n" for i in ids).encode()


def land(directory, name: str, data: bytes) -> None:
    """Write in a staging directory next to the source, then rename in (atomic)."""
    staging = directory.parent / f".staging-{directory.name}"
    staging.mkdir(exist_ok=True)
    (staging / name).write_bytes(data)
    os.rename(staging / name, directory / name)


def wait_for(condition, timeout=180.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.smoke
def test_batch_reads_every_format_and_codec(spark, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    ids = iter(range(10_000))
    expected = []
    for suffix, codec in [("", None), (".gz", "gzip"), (".bz2", "bz2"), (".xz", "xz"), (".deflate", "deflate"), (".zst", "zstd")]:
        chunk = [next(ids) for _ in range(100)]
        expected += chunk
        data = json_lines(chunk, f"f{suffix}")
        (src / f"part{suffix or '.json'}").write_bytes(compressing(data, codec) if codec else data)
    (src / "_SUCCESS").write_text("")  # hidden: never read
    df = spark.read.format("connectors.files").option("fileFormat", "json").load(str(src))
    assert sorted(df.schema.fieldNames()) == ["file", "id"]  # inferred for batch reads
    assert sorted(r.id for r in df.collect()) == expected

    pq.write_table(df.toArrow(), tmp_path / "p.parquet")
    text = (tmp_path / "t")
    text.mkdir()
    (text / "a.txt.gz").write_bytes(compressing(b"x\ny\n", "gzip"))
    assert spark.read.format("connectors.files").option("fileFormat", "parquet").load(str(tmp_path / "p.parquet")).count() == 600
    assert sorted(r.value for r in spark.read.format("connectors.files").option("fileFormat", "text").load(str(text)).collect()) == ["x", "y"]
    csv = spark.read.format("connectors.files").options(fileFormat="csv", header="true", inferSchema="true")
    (tmp_path / "c.csv").write_text("n,s\n1,a\n2,b\n")
    assert csv.load(str(tmp_path / "c.csv")).collect() == [(1, "a"), (2, "b")]
    both = spark.read.format("connectors.files").option("fileFormat", "json").schema(SCHEMA).load([str(src / "part.gz"), str(src / "part.xz")])
    assert both.count() == 200


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_files_spark_wrote_read_back_to_the_same_rows(spark, tmp_path, fmt):
    """A row of every type a format holds, written by Spark's own writer (timestamps in
    milliseconds: Spark's csv and json writers keep no more), read with the same schema."""
    nested = "" if fmt == "csv" else (", array(id, null) as arr, named_struct('a', id, 'b', array('x', null)) as st, "
                                      "cast(concat('b', id) as binary) as bin, array(date'2024-02-29', null) as days, "
                                      "named_struct('b', cast(concat('b', id) as binary)) as sb")
    df = spark.sql(f"""
        select id, cast(id as double) / 3 as third, 0.1d + 0.2d as sum, cast(id as float) + 0.5f as f,
               if(id = 1, cast('NaN' as double), if(id = 2, cast('-Infinity' as double), 0.0d)) as odd,
               cast(id * 1.25 as decimal(20, 6)) as dec, concat('n', id, ',;"é') as str,
               timestamp_millis(1767225600001 + id) as ts, cast(timestamp_millis(-1 - id) as timestamp_ntz) as ntz,
               date_add(date'1969-12-30', cast(id as int)) as day, id % 2 = 0 as flag, cast(null as string) as nothing
               {nested}
        from range(4)""")
    df.write.format(fmt).save(str(tmp_path / "in"))
    back = spark.read.format("connectors.files").schema(df.schema).option("fileFormat", fmt).load(str(tmp_path / "in"))

    def rows(frame) -> list[str]:  # as text: NaN equals itself there
        return [str(r) for r in sorted(frame.collect(), key=lambda r: r.id)]

    assert rows(back) == rows(df)


def test_parquet_timestamps_spark_wrote_read_as_spark_reads_them(spark, tmp_path):
    """Spark writes timestamps as INT96 by default: instants (timestamp, not timestamp_ntz) of years
    1 to 9999, beyond what nanoseconds hold. Every outputTimestampType, timestamp_ntz, old dates
    and decimals of each physical size, also nested, read as Spark's reader reads them, in a
    session time zone that is not UTC."""
    df = spark.sql("""
        select timestamp'1000-01-01 00:00:00' as old, timestamp'9999-12-31 23:59:59.999999' as last,
               timestamp'2026-03-01 12:34:56.123456' as now, timestamp_ntz'0001-01-01 00:00:00' as ntz,
               date'0001-01-01' as first_day, date'1000-03-01' as before_gregorian, cast(1.25 as decimal(5, 2)) as d32,
               cast(-1.25 as decimal(15, 2)) as d64, cast(1.25 as decimal(30, 2)) as fixed,
               array(timestamp'1500-06-01 00:00:00') as stamps, named_struct('t', timestamp'2262-04-12 00:00:00') as st,
               map('k', timestamp'1600-01-01 00:00:00') as by_key""")
    zone, unit = spark.conf.get("spark.sql.session.timeZone"), spark.conf.get("spark.sql.parquet.outputTimestampType")
    try:
        spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
        for output in ("INT96", "TIMESTAMP_MICROS", "TIMESTAMP_MILLIS"):
            spark.conf.set("spark.sql.parquet.outputTimestampType", output)
            df.write.parquet(str(tmp_path / output))
            theirs = spark.read.parquet(str(tmp_path / output))
            ours = spark.read.format("connectors.files").option("fileFormat", "parquet").load(str(tmp_path / output))
            assert (output, ours.schema.simpleString()) == (output, theirs.schema.simpleString())
            assert (output, ours.collect()) == (output, theirs.collect())
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
        spark.conf.set("spark.sql.parquet.outputTimestampType", unit)


def test_parquet_of_other_writers_read_as_spark_reads_them(spark, tmp_path):
    """pyarrow's unsigned integers (Spark's next wider type, UINT_64 as decimal(20,0)), columns of
    nulls (int) and durations (bigint) are inferred as Spark infers them; columns and struct fields
    match a schema's names in any case, as Spark's reader (caseSensitive=false) matches them; a type
    Spark's reader refuses to read a column as fails the read naming the column, where a cast would
    read it silently."""
    import pyarrow as pa

    kind = pa.struct([("Inner", pa.int32()), ("b", pa.string())])
    pq.write_table(pa.table({
        "Id": pa.array([1, 2], pa.int64()), "u8": pa.array([255, None], pa.uint8()),
        "u16": pa.array([65535, 0], pa.uint16()), "u32": pa.array([2**32 - 1, 0], pa.uint32()),
        "u64": pa.array([2**64 - 1, 0], pa.uint64()), "nothing": pa.nulls(2),
        "St": pa.array([{"Inner": 7, "b": "x"}, None], kind),
        "list_u32": pa.array([[2**32 - 1], None], pa.list_(pa.uint32())),
        "took": pa.array([5, None], pa.duration("ms")),
    }), tmp_path / "a.parquet")
    path = str(tmp_path)
    ours = spark.read.format("connectors.files").option("fileFormat", "parquet")
    for schema in (None, "id long, st struct<inner:int, B:string>, U64 decimal(20,0), u8 short"):
        theirs_df = spark.read.parquet(path) if schema is None else spark.read.schema(schema).parquet(path)
        ours_df = ours.load(path) if schema is None else ours.schema(schema).load(path)
        assert ours_df.schema.simpleString() == theirs_df.schema.simpleString()
        assert sorted(ours_df.collect()) == sorted(theirs_df.collect())
    for schema, column in (("Id int", "Id"), ("id string", "Id"), ("st struct<inner:float>", "St")):
        with pytest.raises(Exception):
            spark.read.schema(schema).parquet(path).collect()
        with pytest.raises(Exception, match=f"column '{column}' .* cannot be read as"):
            ours.schema(schema).load(path).collect()


def test_parquet_map_with_void_keys_refused_naming_the_column(spark, tmp_path):
    """Spark's reader reads map() as map<void,void> (empty maps), a type pyspark's Arrow conversion refuses
    (a non-nullable void key), so no Python data source can return it: the read fails at query start naming the
    column, not with pyarrow's word from deep inside; the file's other columns read with a schema without it."""
    path = str(tmp_path / "in")
    spark.range(2).selectExpr("id", "map() as m", "array() as a").write.parquet(path)

    def ours(schema=None):
        reader = spark.read.format("connectors.files").option("fileFormat", "parquet")
        return (reader if schema is None else reader.schema(schema)).load(path)

    for schema, column, given in ((None, "m map<void,void>", "inferred from the files"),
                                  ("id long, M map<void,int>", "M map<void,int>", "given")):
        with pytest.raises(Exception, match=rf"'{column}': the column \({given}\) has a map with void keys"):
            ours(schema).collect()
    assert sorted(ours("id long, a array<void>").collect()) == [(0, []), (1, [])]


# One csv column per case: a value or two (merged in order), over two files.
CSV_INFERENCE_CASES = [
    ("+1", "007"), ("2147483648", ""), ("9223372036854775808", ""), ("5.", ""), ("1e5", "1d"), ("0x1p3", " 1"),
    ("NaN", "-Inf"), ("Infinity", "1"), ("tRuE", "FALSE"), ("0001-01-01", ""), ("2024-2-3", "2024-02"),
    ("2024-02-03T10:00:00.123+0100", "2024-02-03 10:00:00 Europe/Paris"), ("2024-02-03 10:00:00PST", ""),
    ("2024-02-03Z", ""), ("2024-13-01", ""), ("1", "10000000000"), ("1", "1.5"), ("1", "99999999999999999999"),
    ("2024-02-03", "2024-02-03 10:00"), ("2024-02-03 10:00", "2024-02-03"), ("1.5", "2024-02-03"), ("true", "1"),
    ("", "1"), ("1", "abc"),
]


def test_csv_inferred_and_read_as_spark_does(spark, tmp_path):
    """inferSchema gives Spark's types (CSVInferSchema), for a file Spark wrote and for texts of
    every kind it infers, merged within and across files, and the values read are Spark's."""
    spark.sql("""
        select 1 as i, 10000000000 as l, cast(12345678901234567890 as decimal(20, 0)) as big, 1.5d as x,
               cast('NaN' as double) as nan, true as b, date'2024-02-03' as d, timestamp'2026-01-01 00:00:00.123' as t,
               'hello' as s, cast(1.25 as decimal(30, 2)) as e
        union all select 2, 2, 2, cast('-Infinity' as double), 1, false, null, null, null, null""").write.csv(
        str(tmp_path / "spark"), header=True)
    texts = tmp_path / "texts"
    texts.mkdir()
    for number in (0, 1):
        lines = [",".join(f"c{i}" for i in range(len(CSV_INFERENCE_CASES)))]
        lines.append(",".join(case[number] for case in CSV_INFERENCE_CASES))
        (texts / f"{number}.csv").write_text("\n".join(lines) + "\n")
    for path in (tmp_path / "spark", texts):
        theirs = spark.read.csv(str(path), header=True, inferSchema=True)
        ours = spark.read.format("connectors.files").options(fileFormat="csv", header="true", inferSchema="true").load(str(path))
        assert ours.schema.simpleString() == theirs.schema.simpleString()

        def rows(frame) -> list:  # as text: NaN equals itself there
            return sorted(str(row) for row in frame.selectExpr(*(f"string({c})" for c in frame.columns)).collect())

        assert rows(ours) == rows(theirs)


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_partition_directories_read_as_spark_reads_them(spark, tmp_path, fmt):
    """key=value directories of Spark's partitionBy: the same columns, types and values as Spark's
    reader, escaped and null values included; a path below them has none unless basePath says
    where the table starts; a schema given names the partition columns it wants."""
    df = spark.sql("""
        select id, cast(id % 3 as int) as n, if(id % 4 = 0, null, concat('s/:=%', id % 2)) as s,
               date_add(date'2024-02-28', cast(id % 2 as int)) as day,
               timestamp'2024-01-01 10:00:00' + make_interval(0, 0, 0, 0, 0, 0, id % 2) as ts,
               if(id % 2 = 0, 5000000000, 1) as big, if(id % 2 = 0, 1.5d, 2d) as x
        from range(8)""")
    table = str(tmp_path / "t")
    df.write.partitionBy("n", "s", "day", "ts", "big", "x").format(fmt).save(table)

    def both(path, **options):
        return (spark.read.format(fmt).options(**options).load(path),
                spark.read.format("connectors.files").option("fileFormat", fmt).options(**options).load(path))

    theirs, ours = both(table)
    assert ours.schema.simpleString() == theirs.schema.simpleString()
    assert ours.schema.simpleString() == "struct<id:bigint,n:int,s:string,day:date,ts:timestamp,big:bigint,x:double>"
    assert sorted(ours.collect()) == sorted(theirs.collect())
    below = f"{table}/n=1"
    assert [frame.columns for frame in both(below)] == [["id", "s", "day", "ts", "big", "x"]] * 2
    theirs, ours = both(below, basePath=table)
    assert ours.columns == theirs.columns and sorted(ours.collect()) == sorted(theirs.collect())
    given = spark.read.format("connectors.files").option("fileFormat", fmt).schema("id bigint, day string, n bigint")
    assert sorted(given.load(table).collect()) == sorted(df.selectExpr("id", "string(day)", "bigint(n)").collect())
    # a column of nulls alone (__HIVE_DEFAULT_PARTITION__) is void, as Spark 4 infers it
    spark.sql("select id, cast(null as string) as p from range(2)").write.partitionBy("p").format(fmt).save(
        f"{tmp_path}/nulls")
    theirs, ours = both(f"{tmp_path}/nulls")
    assert ours.schema.simpleString() == theirs.schema.simpleString() == "struct<id:bigint,p:void>"
    assert sorted(ours.collect()) == sorted(theirs.collect())


def test_partition_columns_the_file_sink_writes_are_read_back(spark, tmp_path, unique):
    """The file sink's bucketAssigner=column leaves the column out of the files and names the
    directory after it; the source gives it back, in a stream with a schema too."""
    out = tmp_path / "out"
    df = spark.range(6).selectExpr("id", "if(id = 5, null, concat('k/', id % 2)) as k")
    (df.write.format("connectors.files").options(fileFormat="json", bucketAssigner="column", bucketColumn="k")
     .mode("append").save(str(out)))
    back = spark.read.format("connectors.files").option("fileFormat", "json").load(str(out))
    assert back.columns == ["id", "k"] and sorted(back.collect()) == sorted(df.collect())
    query = (spark.readStream.format("connectors.files").schema("id bigint, k string").option("fileFormat", "json")
             .load(str(out)).writeStream.format("memory").queryName(unique).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert sorted(spark.table(unique).collect()) == sorted(df.collect())


def test_multi_line_files_read_as_spark_reads_them(spark, tmp_path):
    """multiLine: a json file is one document (an array of records or one record, laid out over
    lines; numbers keep every digit), a csv value may hold newlines; a document that is not JSON is
    one corrupt record, or fails naming its file in FAILFAST."""
    (tmp_path / "j").mkdir()
    (tmp_path / "c").mkdir()
    (tmp_path / "j" / "a.json").write_text('[\n  {"id": 1, "name": "a\\nb", "d": 12345678901234567890.12345,\n'
                                           '   "tags": ["x",\n "y"]},\n  {"id": 2, "nested": {"k":\n 1}}\n]\n')
    (tmp_path / "j" / "b.json").write_text('{\n "id": 3,\n "name": "one"\n}\n')
    (tmp_path / "j" / "c.json").write_text("[]")
    (tmp_path / "c" / "a.csv").write_text('id,name\n1,"multi\nline"\n2,"a ""q"""\n3,"z\r\nw"\n')
    json_schema = "id bigint, name string, d decimal(30,5), tags array<string>, nested struct<k:int>"

    def ours(fmt, path, schema, **options):
        reader = spark.read.format("connectors.files").option("fileFormat", fmt).option("multiLine", "true")
        return (reader.schema(schema) if schema else reader).options(**options).load(str(path))

    def rows(frame) -> list[str]:
        return sorted(map(str, frame.collect()))

    spark_json = spark.read.schema(json_schema).option("multiLine", "true").json(str(tmp_path / "j"))
    assert rows(ours("json", tmp_path / "j", json_schema)) == rows(spark_json)
    assert len(rows(spark_json)) == 3
    inferred = ours("json", tmp_path / "j", None)
    assert inferred.schema.simpleString() == spark.read.option("multiLine", "true").json(str(tmp_path / "j")).schema.simpleString()
    csv_schema = "id int, name string"
    spark_csv = spark.read.schema(csv_schema).options(multiLine="true", header="true", escape='"').csv(str(tmp_path / "c"))
    assert rows(ours("csv", tmp_path / "c", csv_schema, header="true", escape='"')) == rows(spark_csv)
    assert "multi\\nline" in rows(spark_csv)[0]

    (tmp_path / "j" / "bad.json").write_text('[{"id": 4}, {"id": ')
    corrupt = ours("json", tmp_path / "j", json_schema + ", _corrupt_record string").where("_corrupt_record is not null")
    assert [r._corrupt_record for r in corrupt.collect()] == ['[{"id": 4}, {"id": ']
    with pytest.raises(Exception, match="malformed record in .*bad.json, record 1 \\(mode FAILFAST\\)"):
        ours("json", tmp_path / "j", json_schema, mode="FAILFAST").collect()


def test_json_inferred_and_read_as_spark_does(spark, tmp_path):
    """Without a schema, json gets spark.read.json's columns and rows: sorted fields, strings kept
    (dates too), big integers as decimals, mixed types as string (a number read as its text),
    empty objects dropped, and the corrupt-record column for a line that is not an object."""
    path = tmp_path / "a.json"
    path.write_text(
        '{"zeta": 1, "day": "2024-01-01", "alpha": {"y": 1.5, "b": true}, "n": null, "big": 12345678901234567890, '
        '"arr": [1, 2.5], "e": {}, "mix": 1, "dec": 1}\n'
        '{"zeta": 2, "day": "x", "alpha": {"y": 2, "b": false, "a": [null]}, "big": 1, "arr": [], '
        '"mix": {"k": [true]}, "dec": 123456789012345678901234}\nnot json\n')
    theirs = spark.read.json(str(path))
    ours = spark.read.format("connectors.files").option("fileFormat", "json").load(str(path))
    assert ours.schema.simpleString() == theirs.schema.simpleString() == (
        "struct<_corrupt_record:string,alpha:struct<a:array<string>,b:boolean,y:double>,arr:array<double>,"
        "big:decimal(20,0),day:string,dec:decimal(24,0),mix:string,n:string,zeta:bigint>")
    assert sorted(map(str, ours.collect())) == sorted(map(str, theirs.collect()))


# (dateFormat, timestampFormat, [(date text, timestamp text)]): each kind of pattern, with values
# that match and values that do not (out of range, wrong width, a fraction too long, no offset).
DATE_TIME_CASES = [
    ("dd/MM/yyyy", "MM/dd/yyyy HH:mm",
     [("01/02/2024", "02/29/2024 13:05"), ("31/02/2024", "02/29/2024 13:05"), ("29/02/2024", "02/29/2024 24:00"),
      ("1/2/2024", "02/29/2024 13:05"), ("29/02/2024", None)]),
    ("d-MMM-yy", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX",
     [("9-Feb-24", "2024-02-29T13:05:00.123+01:00"), ("29-sep-24", "2024-02-29T13:05:00.5Z"),
      ("29-Sept-24", "2024-02-29T13:05:00.123-05:30"), ("9-Feb-24", "2024-02-29T13:05:00.1234+01:00"),
      ("9-Feb-24", "2024-02-29T13:05:00+01:00")]),
    ("yyyyMMdd", "dd/MM/yy hh:mm:ss.SSSSSS a xxx",
     [("20240229", "29/02/24 01:05:00.000001 PM +05:30"), ("20240229", "29/02/24 12:00:00.1 am -00:00"),
      ("20240229", "29/02/24 00:30:00.1 AM +00:00"), ("20230229", "29/02/24 12:00:00.1 am +00:00")]),
    ("yyyy-MM-dd", "yyyy-MM-dd HH:mm:ssZ",
     [("2024-02-29", "2024-02-29 13:05:59+0100"), ("2024-02-29", "2024-02-29 13:05:00Z")]),
]  # fmt: skip


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("date_format, timestamp_format, values", DATE_TIME_CASES)
def test_date_and_timestamp_formats_read_as_spark_does(spark, tmp_path, fmt, date_format, timestamp_format, values):
    """dateFormat and timestampFormat: the rows of Spark's own csv and json readers (session time
    zone UTC, as zone-less text is read here), a value that does not match making its record
    malformed in every mode."""
    path = tmp_path / f"d.{fmt}"
    if fmt == "csv":
        path.write_text("".join(f"{i},{d},{t or ''}\n" for i, (d, t) in enumerate(values)))
    else:
        path.write_text("".join(json.dumps({"id": i, "d": d, "t": t}) + "\n" for i, (d, t) in enumerate(values)))
    schema = "id int, d date, t timestamp, _corrupt_record string"
    options = {"dateFormat": date_format, "timestampFormat": timestamp_format}
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        def read(reader, **more):
            return reader.schema(schema).options(**options, **more).load(str(path))

        def ours(**more):
            return read(spark.read.format("connectors.files").option("fileFormat", fmt), **more)

        theirs = read(spark.read.format(fmt))
        good = sorted(tuple(r)[:3] for r in theirs.collect() if r._corrupt_record is None)
        corrupt = sorted(r._corrupt_record for r in theirs.collect() if r._corrupt_record is not None)
        assert good and corrupt, "each case has good and malformed values"
        rows = ours().collect()
        assert sorted(tuple(r)[:3] for r in rows if r._corrupt_record is None) == good
        assert sorted(r._corrupt_record for r in rows if r._corrupt_record is not None) == corrupt
        dropped = sorted(tuple(r) for r in read(spark.read.format(fmt), mode="DROPMALFORMED").drop("_corrupt_record").collect())
        assert sorted(tuple(r) for r in ours(mode="DROPMALFORMED").drop("_corrupt_record").collect()) == dropped
        with pytest.raises(Exception, match=rf"malformed record in .*d.{fmt}, line \d+ \(mode FAILFAST\)"):
            ours(mode="FAILFAST").collect()
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def _same_rows(spark, fmt, path, schema, **options):
    """Our rows and Spark's own reader's, on the same files with the same options."""
    def read(reader):
        reader = reader.options(**options)
        return (reader.schema(schema) if schema is not None else reader).load(str(path))

    ours = read(spark.read.format("connectors.files").option("fileFormat", fmt))
    theirs = read(spark.read.format(fmt))
    assert ours.schema.simpleString() == theirs.schema.simpleString()
    rows = sorted(map(str, theirs.collect()))
    assert sorted(map(str, ours.collect())) == rows
    return rows


TIME_ZONE_TEXTS = ["2024-01-15 10:00:00", "2024-07-01T12:00:00", "2024-03-10 02:30:00", "2024-11-03 01:30:00",
                   "2024-1-15 10:00:00.5", "2024-01-15T10:00:00+01:00", "2024-01-15T10:00:00Z", "1800-01-01 00:00:00"]


@pytest.mark.parametrize("zone", ["America/New_York", "+05:30", "PST"])
def test_time_zone_read_as_spark_does(spark, tmp_path, zone):
    """timeZone: zone-less timestamp text of csv and json values (given a schema, with timestampFormat,
    inferred), of key=value directories and of modifiedAfter is read in it, as Spark's readers do (a
    session in UTC: the option, not the session, decides); timestamp_ntz and dates are not moved."""
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "t.csv").write_text("".join(f"{i},{t},{t[:10]},{t[:19]}\n" for i, t in enumerate(TIME_ZONE_TEXTS)))
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "t.json").write_text("".join(json.dumps({"i": i, "t": t, "d": t[:10], "n": t[:19]}) + "\n"
                                                   for i, t in enumerate(TIME_ZONE_TEXTS)))
    (tmp_path / "f.csv").write_text("15/01/2024 10:00\n10/03/2024 02:30 +05:30\n10/03/2024 02:30\n")
    part = tmp_path / "p" / "ts=2024-03-10 02%3A30%3A00"
    part.mkdir(parents=True)
    (part / "f.json").write_text('{"a": 1}\n')
    os.utime(part / "f.json", (1705330800, 1705330800))  # 2024-01-15T15:00:00Z
    schema = "i int, t timestamp, d date, n timestamp_ntz"
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        assert _same_rows(spark, "csv", tmp_path / "c", schema, timeZone=zone)
        assert _same_rows(spark, "json", tmp_path / "j", schema.replace("i int", "i bigint"), timeZone=zone)
        assert _same_rows(spark, "csv", tmp_path / "f.csv", "t timestamp", timeZone=zone,
                          timestampFormat="dd/MM/yyyy HH:mm[ XXX]")
        assert _same_rows(spark, "csv", tmp_path / "c", None, timeZone=zone, inferSchema="true")
        assert _same_rows(spark, "json", tmp_path / "j", None, timeZone=zone, inferTimestamp="true")
        assert _same_rows(spark, "json", tmp_path / "p", None, timeZone=zone)
        found = [_same_rows(spark, "json", tmp_path / "p", "a bigint, ts timestamp", timeZone=zone, modifiedAfter=after)
                 for after in ("2024-01-14T12:00:00", "2024-01-15T00:00:00", "2024-01-15T06:00", "2024-01-16T06:00")]
        assert [] in found and found[0]
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


@pytest.mark.parametrize("zone", ["UTC", "Z", "GMT", "UT", "+01:00", "+1:00", "+01:3", "+1", "+0530", "+010000",
                                  "-08:00", "+18:00", "GMT+1", "UTC-03:00", "UT+5", "GMT0", "Etc/GMT+5", "EST", "PST",
                                  "IST", "US/Pacific", "Zulu", "ROK", "-0:30", "utc", "z", "+100", "+18:01", "+19",
                                  "UTC+", "america/new_york", " UTC", "", "+01:60", "+01:00:3", "Factory", "localtime"])
def test_time_zone_ids_taken_as_spark_takes_them(spark, tmp_path, zone):
    """timeZone takes the ids Spark's DateTimeUtils.getZoneId takes, as the same zones."""
    from connectors.files.source.spark_texts import zone_id

    try:
        theirs = spark._jvm.org.apache.spark.sql.catalyst.util.DateTimeUtils.getZoneId(zone)
    except Exception:  # Py4JJavaError: INVALID_TIMEZONE
        theirs = None
    ours = zone_id(zone)
    assert (ours is None) == (theirs is None)
    if ours is not None:
        instant = spark._jvm.java.time.Instant.ofEpochSecond(1705330800)
        seconds = theirs.getRules().getOffset(instant).getTotalSeconds()
        assert ours.utcoffset(datetime.datetime(2024, 1, 15, 15)).total_seconds() == seconds


CSV_OPTION_CASES = [
    # comment lines skipped, a header after comments and blank lines, a quoted "#" kept
    ("#c\n\nh1,h2\n#x,y\n1,\"#q\"\n  #s,t\n", "h1 string, h2 string", {"comment": "#", "header": "true"},
     ["Row(h1='  #s', h2='t')", "Row(h1='1', h2='#q')"]),
    # whitespace around unquoted values (a quote after it starts a quoted value; one inside is kept)
    ('  a  , b b ,c\n  "x, y"  ,  " q "  , \t1\t\n"p"  ,q,  \n', "a string, b string, c string",
     {"ignoreLeadingWhiteSpace": "true", "ignoreTrailingWhiteSpace": "true"},
     ["Row(a='a', b='b b', c='c')", "Row(a='x, y', b=' q ', c='1')", "Row(a='p', b='q', c=None)"]),
    ('  a  , b b ,c\n  "x, y",  " q ", \t1\t\n', "a string, b string, c string", {"ignoreLeadingWhiteSpace": "true"},
     ["Row(a='a  ', b='b b ', c='c')", "Row(a='x, y', b=' q ', c='1\\t')"]),
    ('  a  , b b ,c\n"x, y"  ," q "  , \t1\t\n', "a string, b string, c string", {"ignoreTrailingWhiteSpace": "true"},
     ["Row(a='  a', b=' b b', c='c')", "Row(a='x, y', b=' q ', c=' \\t1')"]),
    (" 1 ,2\n3, 4\n", "a int, b int", {"ignoreLeadingWhiteSpace": "true", "ignoreTrailingWhiteSpace": "true"},
     ["Row(a=1, b=2)", "Row(a=3, b=4)"]),
    (" 1 ,2\n3, 4.5\n", None, {"ignoreLeadingWhiteSpace": "true", "ignoreTrailingWhiteSpace": "true", "header": "true"},
     ["Row(1='3', 2='4.5')"]),
    # what a quoted empty value reads as, in any type; unquoted empty values are null
    ('"",1,""\n,,\nx,"",2.5\n', "a string, b int, c double", {"emptyValue": "7"},
     ["Row(a='7', b=1, c=7.0)", "Row(a='x', b=7, c=2.5)", "Row(a=None, b=None, c=None)"]),
    ('"",x\n', "a string, b string", {"emptyValue": "E", "nullValue": "E"}, ["Row(a=None, b='x')"]),
    ('"",,NA\n', "a string, b string, c string", {"nullValue": "NA"}, ["Row(a='', b=None, c=None)"]),
    # texts of NaN and the infinities (Java's NaN and Infinity still read)
    ("NA,PI,NI\nNaN,Infinity,-Infinity\n1.5,2,-3\n", "a double, b float, c double",
     {"nanValue": "NA", "positiveInf": "PI", "negativeInf": "NI"},
     ["Row(a=1.5, b=2.0, c=-3.0)", "Row(a=nan, b=inf, c=-inf)", "Row(a=nan, b=inf, c=-inf)"]),
    # a record separator of one or two characters; a quoted value may hold a newline
    ('a,1|b,"x\ny"|c,3', "s string, n string", {"lineSep": "|"},
     ["Row(s='a', n='1')", "Row(s='b', n='x\\ny')", "Row(s='c', n='3')"]),
    ("h,n\r\n1,2\r\n3,4\r\n", None, {"lineSep": "\r\n", "header": "true"}, ["Row(h='1', n='2')", "Row(h='3', n='4')"]),
    ("a;1||b;2||", None, {"lineSep": "||", "sep": ";"}, ["Row(_c0='a', _c1='1')", "Row(_c0='b', _c1='2')"]),
    # the escape character escapes a quote or itself inside quotes, nothing outside them
    ('C:\\data,1\nend\\,x\n"a\\"b",3\n"a\\\\b",4\n"a\\xb",5\na\\"b,6\n"q\\\\",7\n', "a string, b string", {},
     ["Row(a='C:\\\\data', b='1')", "Row(a='end\\\\', b='x')", "Row(a='a\"b', b='3')", "Row(a='a\\\\b', b='4')",
      "Row(a='a\\\\xb', b='5')", "Row(a='a\\\\\"b', b='6')", "Row(a='q\\\\', b='7')"]),
    ("p,q\n1,2\n3\\,4\n", None, {"header": "true", "inferSchema": "true"}, ["Row(p='1', q=2)", "Row(p='3\\\\', q=4)"]),
    # an empty last value after a quoted one, the file ending with no newline
    ('1,"y",\n2,"z",', "a int, b string, c int", {"mode": "DROPMALFORMED"},
     ["Row(a=1, b='y', c=None)", "Row(a=2, b='z', c=None)"]),
    ('1,"y\nx",', "a int, b string, c int", {"multiLine": "true", "mode": "FAILFAST"}, ["Row(a=1, b='y\\nx', c=None)"]),
    # lines of only whitespace (Java's trim) are skipped, also before the header and with lineSep (not with multiLine)
    ("a\n   \nb\n", None, {}, ["Row(_c0='a')", "Row(_c0='b')"]),
    ("1\t2\n\t\n3\t4\n", "a int, b int", {"sep": "\t"}, ["Row(a=1, b=2)", "Row(a=3, b=4)"]),
    ("1,2\n \t \n3,4\n \r\n\x01\x0b\n", "a int, b int, _corrupt_record string", {},
     ["Row(a=1, b=2, _corrupt_record=None)", "Row(a=3, b=4, _corrupt_record=None)"]),
    ("   \nh1,h2\n  \n1,2\n", None, {"header": "true", "inferSchema": "true"}, ["Row(h1=1, h2=2)"]),
    ("a,1|   |b,2|", None, {"lineSep": "|"}, ["Row(_c0='a', _c1='1')", "Row(_c0='b', _c1='2')"]),
    # a first line that is blank: the columns come from the first that is not
    ("\nTRUE\n", None, {}, ["Row(_c0='TRUE')"]),
    ("\n  \nTRUE,1\n", None, {"inferSchema": "true"}, ["Row(_c0=True, _c1=1)"]),
    # integers take no hex; booleans only true and false, in any case
    ("0x1A\n0X1a\n+5\n-0x1\n12\n", "v int, _corrupt_record string", {},
     ["Row(v=None, _corrupt_record='0x1A')", "Row(v=None, _corrupt_record='0X1a')", "Row(v=5, _corrupt_record=None)",
      "Row(v=None, _corrupt_record='-0x1')", "Row(v=12, _corrupt_record=None)"]),
    ("0x1A,x\n", "v bigint, w string", {"mode": "DROPMALFORMED"}, []),
    ("1\n0\ntRuE\nFALSE\ntrue\nyes\n", "v boolean, _corrupt_record string", {},
     ["Row(v=None, _corrupt_record='1')", "Row(v=None, _corrupt_record='0')", "Row(v=True, _corrupt_record=None)",
      "Row(v=False, _corrupt_record=None)", "Row(v=True, _corrupt_record=None)", "Row(v=None, _corrupt_record='yes')"]),
    # a quoted nullValue is null too (a quoted empty value stays empty)
    ('a\n"NA"\nNA\n', None, {"header": "true", "nullValue": "NA"}, ["Row(a=None)", "Row(a=None)"]),
    ('"NA",NA,"NA",""\n', "a string, b int, c int, d string, _corrupt_record string", {"nullValue": "NA"},
     ["Row(a=None, b=None, c=None, d='', _corrupt_record=None)"]),
    ('"NA",1\n', None, {"nullValue": "NA", "inferSchema": "true"}, ["Row(_c0=None, _c1=1)"]),
    # a UTF-8 byte order mark is not part of the first column's name
    ("\ufeffa,b\n1,2\n", None, {"header": "true"}, ["Row(a='1', b='2')"]),
    ('\ufeff"a",b\n1,2\n', None, {"header": "true", "inferSchema": "true"}, ["Row(a=1, b=2)"]),
    ("\ufeffa,b\n1,2\n   \n", None, {"header": "true", "multiLine": "true"},  # multiLine keeps a line of spaces
     ["Row(a='1', b='2')", "Row(a='   ', b=None)"]),
    ("\ufeffa,b\n1,2\n", "a int, b int", {"header": "true", "enforceSchema": "false"}, ["Row(a=1, b=2)"]),
    # a header's repeated names (in any case) get their index, empty ones and nullValue are _c and it
    ("a,a\n1,2\n", None, {"header": "true"}, ["Row(a0='1', a1='2')"]),
    ("a,b,A\n1,2,3\n", None, {"header": "true", "inferSchema": "true"}, ["Row(a0=1, b=2, A2=3)"]),
    ("a,,a,NA\n1,2,3,4\n", None, {"header": "true", "nullValue": "NA"}, ["Row(a0='1', _c1='2', a2='3', _c3='4')"]),
    # quote \0 turns quoting off
    ('"a,b",1\n', None, {"quote": "\u0000"}, ["Row(_c0='\"a', _c1='b\"', _c2='1')"]),
]  # fmt: skip


@pytest.mark.parametrize("content, schema, options, expected", CSV_OPTION_CASES)
def test_csv_options_read_as_spark_does(spark, tmp_path, content, schema, options, expected):
    (tmp_path / "a.csv").write_bytes(content.encode())
    assert _same_rows(spark, "csv", tmp_path / "a.csv", schema, **options) == sorted(expected)


LENIENT_TS = ('{"a":"2024-1-5 1:2:3"}\n{"a":"2024-01-15T10:20:30.1234567"}\n{"a":1700000000}\n{"a":"2024-01-15T10:20:30Z"}\n'
              '{"a":"2024-01-15T10:20:30+02:00"}\n{"a":"2024-01-15 10:20:30"}\n{"a":"x"}\n{"a":1.5}\n')


@pytest.mark.parametrize("fmt, content, schema", [
    # decimals rounded HALF_UP to the scale; past the precision (after rounding) the record is malformed
    ("json", '{"a":1234.5}\n{"a":1.555}\n{"a":"1.5"}\n{"a":999.995}\n{"a":-1.555}\n{"a":"1,000.5"}\n{"a":1}\n',
     "a decimal(5,2)"),
    ("json", '{"a":1234.5}\n{"a":12.5}\n', "a decimal(5,2)"),  # a block that pyarrow reads whole
    ("json", '{"a":1.5}\n{"a":-1.5}\n{"a":0.5}\n{"a":{"b":1.555}}\n', "a decimal(38,0)"),
    ("json", '{"a":{"b":1.555}}\n{"a":{"b":1234.5}}\n', "a map<string,decimal(5,2)>"),
    ("csv", "1.555\n1.5\n-1.5\n123.45\n.5\n1E-2\n+1.2\n0.005\n1234.5\n999.995\n", "v decimal(5,2)"),
    ("csv", "1234.5\n12.5\n", "v decimal(5,2)"),  # a block that pyarrow reads whole
    ("csv", "1.555\n1.5\n-1.5\n123.45\n.5\n1E-2\n+1.2\n0.005\n", "v decimal(10,0)"),
    # dates without dateFormat: Spark's lenient stringToDate
    ("csv", '2024-1-5\n2024-01-15 10:00\n2024-01-15T10:00:00\n2024\n2024-01\n+2024-01-15\n"2024-01-15 "\n'
            "2024-01-15T\n2024-01-\n2024 \nx\n2024-02-30\n2024-01-15\n", "v date"),
    ("json", '{"a":"2024-01-15 10:00"}\n{"a":"2024-1-5"}\n{"a":"2024-01-15T10:00:00"}\n{"a":"123"}\n{"a":"x"}\n'
             '{"a":"2024-01-15"}\n{"a":"2024"}\n', "a date"),
    # timestamps: lenient texts, 7 fraction digits, json numbers as seconds, no zone where timestamp_ntz goes
    ("csv", "2024-1-5 1:2:3\n2024-01-15T10:20:30.1234567\n2024-01-15T10:20:30Z\n2024-01-15 10:20:30\n10:00:00\n",
     "v timestamp_ntz"),
    ("json", LENIENT_TS, "a timestamp"),
    ("json", LENIENT_TS, "a timestamp_ntz"),
    # Java's texts: "+Infinity" in json floats, Unicode digits in csv integers
    ("json", '{"a":"+Infinity"}\n{"a":"-INF"}\n{"a":"+INF"}\n{"a":1.5}\n', "a double"),
    ("csv", "\u0661\u0662\n\uff11\uff12\n7\n", "v int"),
])  # fmt: skip
def test_lenient_values_read_as_spark_does(spark, tmp_path, fmt, content, schema):
    """Values Spark's csv and json readers take beyond what pyarrow converts, and the ones they refuse."""
    (tmp_path / f"a.{fmt}").write_text(content)
    for mode in ("PERMISSIVE", "DROPMALFORMED"):
        _same_rows(spark, fmt, tmp_path / f"a.{fmt}", schema + ", _corrupt_record string", mode=mode)


@pytest.mark.parametrize("fmt, content, schema, options", [
    # too few values, too many, one that does not convert, in a header file and a multiLine one
    ("csv", 'a,b,c\n1,2\n,\n3,4,5,6\n"q\\"x",1,2\nnot-a-number,5,6\n', "a int, b int, c int", {"header": "true"}),
    ("csv", '1,"x\ny",3\n"bad",2\n4,"z"\n7,"w\nv",notint\n8,"u",9\n', "a int, b string, c int", {"multiLine": "true"}),
    ("csv", '1,"x\ny",3|"bad",2|4,"z"|8,"u",9|', "a int, b string, c int", {"lineSep": "|"}),
    # a field of the wrong type, at the top and inside a struct; an array or map with one is null
    ("json", '{"a": 1, "b": "ok"}\n{"a": "x", "b": "bad type"}\n{broken\n'
             '{"a": 1, "s": {"p": 1, "q": "bad"}, "l": [1, "x"], "m": {"k": "x", "j": 2}}\n'
             '{"a": "q", "s": {"p": "bad", "q": 2}, "l": [1, 2], "m": {"k": 1}}\n{"a": 2, "s": {"p": []}, "l": 5}\n',
     "a int, b string, s struct<p int, q int>, l array<int>, m map<string,int>", {}),
])  # fmt: skip
def test_malformed_records_keep_what_converts_in_place_as_spark_does(spark, tmp_path, fmt, content, schema, options):
    """PERMISSIVE: a malformed record's values that convert are kept, the others null (Spark 3's
    partial results), in the file's order; DROPMALFORMED drops it, both as Spark's readers do."""
    (tmp_path / f"a.{fmt}").write_text(content)
    for mode in ("PERMISSIVE", "DROPMALFORMED"):
        def read(reader):
            return reader.schema(schema + ", _corrupt_record string").options(mode=mode, **options).load(str(tmp_path))

        theirs = read(spark.read.format(fmt)).collect()
        assert read(spark.read.format("connectors.files").option("fileFormat", fmt)).collect() == theirs
        assert mode == "DROPMALFORMED" or any(r._corrupt_record and any(v is not None for v in r[:2]) for r in theirs)


LENIENT_JSON = (
    "{'a': 'x', 'b': 1}\n{\"a\": \"it's\", \"b\": 2}\n{'a': \"q\\\"\", 'b': 3}\n{a: 'u', b: 4}\n"
    "{\"a\": \"c\" /* c */, \"b\": 5}\n{\"a\": \"z\", \"b\": 007}\n// only a comment\n"
    "{\"a\": 'e\\'s', \"b\": 8}\n{\"a\": 'tab\\tx', \"b\": 9}\n"
)


@pytest.mark.parametrize("options", [
    {},  # single quotes are allowed by default, the rest are malformed
    {"allowSingleQuotes": "false"},
    {"allowComments": "true", "allowUnquotedFieldNames": "true", "allowNumericLeadingZeros": "true"},
])  # fmt: skip
@pytest.mark.parametrize("schema", ["a string, b long, _corrupt_record string", None])
def test_json_syntax_options_read_as_spark_does(spark, tmp_path, options, schema):
    (tmp_path / "a.json").write_text(LENIENT_JSON)
    rows = _same_rows(spark, "json", tmp_path / "a.json", schema, **options)
    assert len(rows) == (8 if options.get("allowComments") else 9)


def test_json_inference_options_as_spark_does(spark, tmp_path):
    (tmp_path / "k.json").write_text(
        '{"a": 1, "b": 1.50, "c": true, "d": null, "e": [null], "f": {"g": null}, "h": [], "k": 12345678901234567890123.5, '
        '"l": [1, 2.5], "n": {"o": 0.001, "p": null}}\n{"a": 2, "b": 2, "d": null, "m": 0.1e-40, "n": {"o": -1.25}}\n')
    for options in ({"primitivesAsString": "true"}, {"prefersDecimal": "true"}, {"dropFieldIfAllNull": "true"},
                    {"prefersDecimal": "true", "dropFieldIfAllNull": "true", "primitivesAsString": "false"}):
        assert _same_rows(spark, "json", tmp_path / "k.json", None, **options)


@pytest.mark.parametrize("content", [
    '{"a":1,"s":{"x":1},"t":[{"y":1}]}\n{"A":2.5,"s":{"X":null},"t":[{"Y":3}]}\n',
    '{"A":1,"b":{"x":[1]}}\n{"a":2,"b":{"X":[2]}}\n{"A":3,"B":{"x":null}}\n',
])
def test_json_keys_differing_in_case_inferred_and_read_as_spark_does(spark, tmp_path, content):
    """spark.sql.caseSensitive=false: keys equal case aside in other records, in structs of the same
    names in order, are one column of the first spelling, of the types widened (bigint and double:
    double); a record is read case-sensitively (an `A` is no value of the column `a`)."""
    (tmp_path / "c.json").write_text(content)
    assert _same_rows(spark, "json", tmp_path / "c.json", None)


def test_json_keys_one_column_to_spark_fail_the_read_as_in_spark(spark, tmp_path):
    """Where such keys cannot be one column (in one object, twice, of types that do not widen
    tightly), Spark fails the read (COLUMN_ALREADY_EXISTS); ours fails naming the file and the keys."""
    (tmp_path / "c.json").write_text('{"s":{"x":1}}\n{"s":{"X":"y"}}\n')
    with pytest.raises(AnalysisException, match="COLUMN_ALREADY_EXISTS"):
        spark.read.json(str(tmp_path)).collect()
    with pytest.raises(AnalysisException, match=r"c\.json.*`s\.X` and `s\.x`"):
        spark.read.format("connectors.files").option("fileFormat", "json").load(str(tmp_path)).collect()


@pytest.mark.parametrize("options", [{}, {"prefersDecimal": "true"}, {"dropFieldIfAllNull": "true"},
                                     {"primitivesAsString": "true"}])
def test_json_empty_strings_inferred_as_spark_does(spark, tmp_path, options):
    """An empty string is null to the inference: it widens no column to string (a column only ever
    "" or null is one), and it is read as null into the column's type (the whole array where it is
    an element)."""
    (tmp_path / "e.json").write_text(
        '{"a":1,"b":1.5,"c":true,"d":{"x":1},"e":[1],"f":12345678901234567890,"g":"","h":""}\n'
        '{"a":"","b":"","c":"","d":"","e":["",2],"f":"","g":null,"h":"x"}\n')
    assert _same_rows(spark, "json", tmp_path / "e.json", None, **options)


def test_json_numeric_strings_inferred_as_decimals_with_prefers_decimal_as_spark_does(spark, tmp_path):
    """prefersDecimal: a string that is a number (Java's BigDecimal of it, commas dropped) is a decimal
    of its digits where Spark's DecimalType takes them (not 1e5, 0.001, 39 digits), read as Spark does."""
    (tmp_path / "d.json").write_text(
        '{"a":"1.5","b":"-5","c":"1,000.5","d":["+1.","2.25",".5"],"e":{"f":"00012.50"},"g":"1.5e1","h":"1e5",'
        '"i":"0.001","j":"123456789012345678901234567890123456789","k":"12","l":"1.5","m":"0.00","n":"7"}\n'
        '{"a":"99.999","b":1,"c":"","d":null,"e":{"f":"-0"},"g":"2","h":"1","i":"1","j":"1","k":"x","l":true,'
        '"m":"0","n":"1d"}\n')
    for options in ({"prefersDecimal": "true"}, {"prefersDecimal": "true", "primitivesAsString": "true"}, {}):
        assert _same_rows(spark, "json", tmp_path / "d.json", None, **options)
    assert spark.read.format("connectors.files").options(fileFormat="json", prefersDecimal="true").load(
        str(tmp_path / "d.json")).schema.simpleString() == (
        "struct<a:decimal(5,3),b:decimal(20,0),c:decimal(5,1),d:array<decimal(3,2)>,e:struct<f:decimal(4,2)>,"
        "g:decimal(2,0),h:string,i:string,j:string,k:string,l:string,m:string,n:string>")


def test_json_timestamp_strings_inferred_with_infer_timestamp_as_spark_does(spark, tmp_path):
    """inferTimestamp: a string Spark's lenient parser (or timestampFormat) reads is a timestamp, in
    arrays and structs too; mixed with other strings or numbers, string; after prefersDecimal."""
    (tmp_path / "t.json").write_text(
        '{"a":"2024-01-15T10:00:00","b":"2024-01-15","c":"2024-01-15T10:00:00Z","d":["2024-01-15 10:00:00.123456"],'
        '"e":{"f":"2024"},"g":"2024-01-15T10:00:00","h":"2024-01-15T10:00:00","i":"15/01/2024 10:20","j":"7"}\n'
        '{"a":"2024-01-16 11:00","b":null,"c":"","d":[],"e":{"f":"2024-02"},"g":"x","h":1,"i":"16/01/2024 11:30",'
        '"j":"8"}\n')
    for options in ({"inferTimestamp": "true"}, {"inferTimestamp": "true", "prefersDecimal": "true"},
                    {"inferTimestamp": "true", "timestampFormat": "dd/MM/yyyy HH:mm"}, {"inferTimestamp": "false"}):
        assert _same_rows(spark, "json", tmp_path / "t.json", None, **options)
    assert spark.read.format("connectors.files").options(fileFormat="json", inferTimestamp="true").load(
        str(tmp_path / "t.json")).schema.simpleString() == (
        "struct<a:timestamp,b:timestamp,c:timestamp,d:array<timestamp>,e:struct<f:timestamp>,g:string,h:string,"
        "i:string,j:string>")


@pytest.mark.parametrize("files, schema, options", [
    ({"n.json": '{"a":{}}\n{}\n\n[{}, {"b":{}}]\n[]\nnull\n'}, None, {}),
    ({"n.json": '{"a":null}\n{"b":""}\n{"c":[]}\n{"d":[null]}\n{bad\n[{}, 1]\n'}, None,
     {"dropFieldIfAllNull": "true", "mode": "DROPMALFORMED"}),
    ({"n.json": '{"a":1}\n{"b":2}\n{"c":3}\n'}, None, {"samplingRatio": "0.01"}),  # every line sampled out
    ({"a=1/n.json": "{}\n{}\n", "a=2/n.json": '{"b":null}\n'}, None, {"dropFieldIfAllNull": "true"}),
    ({"n.json": '[{},\n{"a":{}}]'}, None, {"multiLine": "true"}),
    ({"n.json": '{"a":1}\n{bad\n\n{}\n[{},{}]\n[]\n'}, StructType([]), {}),
    ({"n.json": '{"a":1}\n{bad\n\n{}\n[{},{}]\n[]\n'}, StructType([]), {"mode": "DROPMALFORMED"}),
])  # fmt: skip
def test_json_with_no_field_reads_a_row_per_record_as_spark_does(spark, tmp_path, files, schema, options):
    """Inference that finds no field gives struct<> (with the partition columns, if any), as a schema
    of no column given does: a row of no column per record, as Spark's reader."""
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(content)
    assert _same_rows(spark, "json", tmp_path, schema, **options)


NO_COLUMN_CSV = 'x,y\n1\n  \n\t\n\n1,2,3\n"unclosed,4\n5,"6\n7"\n'


@pytest.mark.parametrize("files, schema, options, rows", [
    ({"a.csv": NO_COLUMN_CSV}, StructType([]), {}, 6),
    ({"a.csv": "\n \n" + NO_COLUMN_CSV}, StructType([]), {"header": "true"}, 5),
    ({"a.csv": NO_COLUMN_CSV}, StructType([]), {"mode": "DROPMALFORMED"}, 6),
    ({"a.csv": NO_COLUMN_CSV}, StructType([]), {"mode": "FAILFAST", "maxColumns": "2", "maxCharsPerColumn": "3"}, 6),
    ({"a.csv": "#c\n1,2\n#d\n \n3\n"}, StructType([]), {"comment": "#", "header": "true"}, 1),
    ({"a.csv": 'x|"y|z"| |w\nv|\n|'}, StructType([]), {"lineSep": "|"}, 4),
    ({"p=1/a.csv": "h\nx,y\n\ny\n", "p=2/a.csv": "h\n", "p=3/a.csv": "z\n"}, "p int", {"header": "true"}, 2),
    ({"p=1/a.csv": NO_COLUMN_CSV, "p=2/a.csv": "z\n"}, "p int", {"mode": "FAILFAST"}, 7),
    ({"a.csv": 'x,y\n1\n  \n\n1,2,3\n5,"6\n7"\n'}, StructType([]), {"multiLine": "true"}, 5),
    ({"a.csv": 'h\n\nx,y\n5,"6\n7"\n'}, StructType([]), {"multiLine": "true", "header": "true"}, 2),
    ({"a.csv": 'x,y\n5,"6\n7"\n'}, StructType([]), {"multiLine": "true", "mode": "DROPMALFORMED"}, 0),
])  # fmt: skip
def test_csv_with_no_column_reads_a_row_per_record_as_spark_does(spark, tmp_path, files, schema, options, rows):
    """A csv schema of no data column (struct<>, or the partition columns alone): Spark's parser prunes
    the columns, so every line neither blank nor a comment (nor the header) is a row, none malformed
    whatever its values; with multiLine every record is a row, each malformed (values, and no column)."""
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(content)
    assert len(_same_rows(spark, "csv", tmp_path, schema, **options)) == rows


@pytest.mark.parametrize("content, schema, options", [
    ('x,y\n5,"6\n7"\n', StructType([]), {"multiLine": "true", "mode": "FAILFAST"}),  # every record malformed
    ("1\n1,2,3\n", StructType([]), {"multiLine": "true", "maxColumns": "2"}),  # multiLine parses records: any mode
    ("1\nabcd\n", StructType([]), {"multiLine": "true", "maxCharsPerColumn": "3"}),
    ("a,b,c\n1\n", StructType([]), {"header": "true", "maxColumns": "2"}),  # the header is parsed, in any mode
    ("a,b\n1\n", StructType([]), {"header": "true", "enforceSchema": "false"}),  # and unlike no column
    ("a,b\n1\n", "_corrupt_record string", {}),  # Spark's QUERY_ONLY_CORRUPT_RECORD_COLUMN
])  # fmt: skip
def test_csv_with_no_column_fails_where_spark_fails(spark, tmp_path, content, schema, options):
    (tmp_path / "a.csv").write_text(content)

    def read(reader):
        return reader.options(**options).schema(schema).load(str(tmp_path / "a.csv")).collect()

    with pytest.raises(Exception):
        read(spark.read.format("csv"))
    with pytest.raises(Exception, match=r"a\.csv.*(FAILFAST|maxColumns|maxCharsPerColumn|enforceSchema)"
                                        r"|QUERY_ONLY_CORRUPT_RECORD_COLUMN"):
        read(spark.read.format("connectors.files").option("fileFormat", "csv"))


@pytest.mark.parametrize("content, schema, options", [
    # a line holding an array of objects is a row each (none if empty); of anything else one malformed row;
    # one element that does not convert makes them all malformed; what follows a value is not read
    ('[{"a":1},{"a":2}]\n{"a":3}\n[]\n[[{"a":4}]]\nnull\n', None, {}),
    ('[{"a":1},{"a":2}]\n[{"a":1},{"a":"x"}]\n[1,2]\n[{"a":1},null]\n[]\n{"a":3} x\n[{"a":5}] 6\nnull\n',
     "a int, _corrupt_record string", {}),
    ('[{"a":1},{"a":2}]\n[{"a":1},{"a":"x"}]\n[1]\n[{\'a\':7}]\n', "a int", {"mode": "DROPMALFORMED"}),
    ('[{"a":1},\n{"a":"x"}]\n', "a int, _corrupt_record string", {"multiLine": "true"}),
    ('[{"a":1},\n2]\n', "a int, _corrupt_record string", {"multiLine": "true"}),
    # a byte order mark, at the start of the file or of a line; a multiLine file's second document unread
    (b'\xef\xbb\xbf{"a":1}\n\xef\xbb\xbf{"b":2}\n', None, {}),
    (b'\xef\xbb\xbf{"a":\n1}\n', None, {"multiLine": "true"}),
    ('{"a":\n1}\n{"a":2}\n', None, {"multiLine": "true"}),
])  # fmt: skip
def test_json_arrays_and_documents_read_as_spark_does(spark, tmp_path, content, schema, options):
    (tmp_path / "a.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    assert _same_rows(spark, "json", tmp_path / "a.json", schema, **options)


@pytest.mark.parametrize("schema", [None, "a string"])
def test_json_lines_of_a_charset_with_a_byte_order_mark_fail_as_in_spark(spark, tmp_path, schema):
    (tmp_path / "a.json").write_bytes('{"a":"x"}\n'.encode("utf-16"))
    reader = spark.read.format("connectors.files").option("fileFormat", "json").option("encoding", "UTF-16")
    with pytest.raises(Exception, match=r"(?s)(a\.json.*multiLine|multiLine.*a\.json)"):
        (reader.schema(schema) if schema else reader).load(str(tmp_path)).collect()
    with pytest.raises(Exception, match="UTF-16"):
        spark.read.format("json").option("encoding", "UTF-16").load(str(tmp_path)).collect()


@pytest.mark.parametrize("fmt, content, options, schema", [
    # UTF-16 and UTF-32 with lineSep (the byte order named) or multiLine: header, inference, a typed schema
    ("csv", "h,n\n1,é\n2,x\n".encode("utf-16-be"), {"encoding": "UTF-16BE", "lineSep": "\n", "header": "true",
                                                 "inferSchema": "true"}, None),
    ("csv", "h,n\r\n1,2\r\n".encode("utf-16-le"), {"encoding": "UTF-16LE", "lineSep": "\r\n", "header": "true",
                                                "inferSchema": "true"}, None),
    ("csv", "a,b\n1,2\nx,\u00e9\n".encode("utf-16-le"), {"encoding": "UTF-16LE", "lineSep": "\n"},
     "a int, b string, _corrupt_record string"),
    ("csv", "h,n\n1,é\n".encode("utf-16"), {"encoding": "UTF-16", "multiLine": "true", "header": "true",
                                          "inferSchema": "true"}, None),
    ("csv", "h,n\n1,é\n".encode("utf-32"), {"encoding": "UTF-32", "multiLine": "true", "header": "true"}, None),
    # bytes that are no UTF-8 read as U+FFFD
    ("csv", b"n\xe9,1\nx,2\n", {}, None),
    ("csv", b"n\xe9,1\nx,2\n", {"inferSchema": "true"}, None),
    ("csv", b"h\xe9,n\n1,x\xff\n", {"header": "true"}, None),
    ("csv", b"1,n\xe9\n2,3\n", {}, "a int, b int, _corrupt_record string"),
    # a lineSep without \r makes \r data, in a value and in a header name
    ("csv", b"a,b\r\n \r\nc\rd,e\r\n", {"lineSep": "\n"}, None),
    ("csv", b"a,b\r\n1,2\r\n3,4\r\n", {"lineSep": "\n", "header": "true", "inferSchema": "true"}, None),
    ("csv", b"a,1\r\nb,2\n", {"lineSep": "\n"}, "a string, b int, _corrupt_record string"),
    ("csv", b"a\rx,b,c\na\rx\n1,2\r\n", {"lineSep": "\n"}, "a string, b string, _corrupt_record string"),
    ("csv", b"a,1\r|b,2|", {"lineSep": "|"}, None),
    ("json", '{"a":"x"}\n{"a":"\u00e9"}\n'.encode("utf-16-le"), {"encoding": "UTF-16LE", "lineSep": "\n"}, None),
    ("json", '{"a":"x"}\r\n{"a":2}\r\n'.encode("utf-16-be"), {"encoding": "UTF-16BE", "lineSep": "\r\n"}, "a string"),
])  # fmt: skip
def test_encodings_and_line_ends_read_as_spark_does(spark, tmp_path, fmt, content, options, schema):
    (tmp_path / f"a.{fmt}").write_bytes(content)
    assert _same_rows(spark, fmt, tmp_path / f"a.{fmt}", schema, **options)


@pytest.mark.parametrize("content, options", [
    ("a,b\n1,2\n".encode("utf-16"), {"encoding": "UTF-16"}),
    ("a,b\n1,2\n".encode("utf-16"), {"encoding": "UTF-16", "lineSep": "\n"}),
    ("a,b\n1,2\n".encode("utf-32"), {"encoding": "UTF-32", "lineSep": "\n"}),
    ("a,b\n1,2\n".encode("utf-16-le"), {"encoding": "UTF-16LE"}),
])  # fmt: skip
def test_csv_lines_spark_misreads_in_a_wide_charset_fail_at_the_start(spark, tmp_path, content, options):
    """Spark's line reader cuts these at the byte \\n (or at lineSep's bytes with a byte order mark): rows of
    halved characters, or lines lost. Ours fails before reading, naming the option."""
    (tmp_path / "a.csv").write_bytes(content)
    reader = spark.read.format("connectors.files").option("fileFormat", "csv").options(**options)
    with pytest.raises(Exception, match=f"option 'encoding' = '{options['encoding']}'"):
        reader.schema("a string, b string").load(str(tmp_path)).collect()
    theirs = sorted(map(str, spark.read.options(**options).csv(str(tmp_path)).collect()))
    assert theirs != ["Row(_c0='1', _c1='2')", "Row(_c0='a', _c1='b')"]


@pytest.mark.parametrize("fmt, content, options, schema", [
    ("text", "1abc2\nx abc3abc", {"lineSep": "abc"}, None),
    ("text", "1\r\n2\n3\r\n4\r", {"lineSep": "\r\n"}, None),
    # a record's newlines are whitespace between tokens, but no string holds one: that one is malformed
    ("json", '{"a":\n1}|{"a":"x\ny"}|{\'a\': 3}|', {"lineSep": "|"}, "a long, _corrupt_record string"),
    ("json", '{"a":\r\n1}@@{"b":"x"}@@@@{"a": 2}', {"lineSep": "@@"}, None),
])  # fmt: skip
def test_line_separators_read_as_spark_does(spark, tmp_path, fmt, content, options, schema):
    (tmp_path / f"a.{fmt}").write_bytes(content.encode())
    assert len(_same_rows(spark, fmt, tmp_path / f"a.{fmt}", schema, **options)) == 3


@pytest.mark.parametrize("fmt", ["json", "csv", "text"])
def test_ignore_missing_files_skips_files_deleted_after_planning(spark, tmp_path, fmt):
    """A file listed when the read was planned but deleted before it is read: Spark's reader and
    ours fail by default and, with ignoreMissingFiles, both skip it."""
    for name, ids in (("a", range(3)), ("b", range(3, 6))):
        (tmp_path / f"{name}.{fmt}").write_bytes(json_lines(ids, name) if fmt == "json" else
                                                 "".join(f"{i}\n" for i in ids).encode())
    schema = "value string" if fmt == "text" else ("id long, file string" if fmt == "json" else "id long")

    def frames(**options):
        ours = spark.read.format("connectors.files").option("fileFormat", fmt).schema(schema).options(**options)
        theirs = spark.read.format(fmt).schema(schema).options(**options)
        return [reader.load(str(tmp_path)) for reader in (ours, theirs)]

    failing, skipping = frames(), frames(ignoreMissingFiles="true")
    for frame in failing + skipping:  # planned: the files are listed
        frame.rdd.getNumPartitions()
    (tmp_path / f"b.{fmt}").unlink()
    ours, theirs = (sorted(map(str, frame.collect())) for frame in skipping)
    assert ours == theirs and len(ours) == 3
    for frame in failing:
        with pytest.raises(Exception, match="b." + fmt):
            frame.collect()


def test_big_file_is_split_and_every_line_read_once(spark, tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("".join(f"{i}:{'z' * (i % 97)}\n" for i in range(200_000)))
    df = spark.read.format("connectors.files").options(fileFormat="text", maxPartitionBytes="1m").load(str(path))
    assert df.rdd.getNumPartitions() >= 8
    row = df.selectExpr("count(*) c", "count(distinct value) d").first()
    assert (row.c, row.d) == (200_000, 200_000)


@pytest.mark.smoke
def test_stream_reads_files_landing_while_it_runs(spark, tmp_path, unique):
    src = tmp_path / "in"
    src.mkdir()
    land(src, "0.json", json_lines(range(0, 100), "0"))
    query = (
        spark.readStream.format("connectors.files").schema(SCHEMA)
        .options(fileFormat="json", discoveryInterval="200ms", filePathColumn="file").load(str(src))
        .writeStream.format("memory").queryName(unique)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="0.5 seconds").start()
    )
    try:
        count = lambda: spark.table(unique).count()  # noqa: E731
        wait_for(lambda: count() == 100, what="the first file")
        for n in range(1, 4):
            land(src, f"{n}.json", json_lines(range(n * 100, n * 100 + 100), "x"))
            land(src, f"{n}.json.gz", compressing(json_lines(range(1000 + n * 100, 1100 + n * 100), "x"), "gzip"))
        wait_for(lambda: count() == 700, what="the files landed later")
        time.sleep(1.5)  # a few more triggers: nothing is read twice
        rows = spark.table(unique).collect()
        assert sorted(r.id for r in rows) == sorted([*range(400), *range(1100, 1400)])
        assert {r.file for r in rows if r.id < 100} == {str(src / "0.json")}
    finally:
        query.stop()
    offset = read_checkpoint(tmp_path / "cp").source_offsets[0]  # the last batch's end
    assert offset["files"] == 7 and offset["lateFiles"] == 0


def test_admission_limits_and_available_now(spark, tmp_path, unique):
    src = tmp_path / "in"
    src.mkdir()
    for n in range(7):
        land(src, f"{n}.json", json_lines(range(n * 10, n * 10 + 10), str(n)))
    query = (
        spark.readStream.format("connectors.files").schema(SCHEMA)
        .options(fileFormat="json", maxFilesPerTrigger="3").load(str(src))
        .writeStream.format("memory").queryName(unique)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )
    query.awaitTermination(180)
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [30, 30, 10]
    assert sorted(r.id for r in spark.table(unique).collect()) == list(range(70))


def test_replayed_batch_keeps_its_partitions_when_the_split_changes(spark, tmp_path, batch_partitions):
    src = tmp_path / "in"
    src.mkdir()
    for n in range(12):  # files of one size: the order they are dealt in decides their task
        land(src, f"{n:02}.json", json_lines(range(100 + n * 10, 110 + n * 10), f"{n:02}"))
        os.utime(src / f"{n:02}.json", (1_700_000_000 + n, 1_700_000_000 + n))

    def stream(**options):
        options = {"fileFormat": "json", "maxFilesPerTrigger": "4", "latestFirst": "true", **options}
        return spark.readStream.format("connectors.files").schema(SCHEMA).options(**options).load(str(src))

    checkpoint = str(tmp_path / "cp")
    # tasks of at most 100 bytes: each 260-byte file is cut in 3, whatever the cores
    first = batch_partitions(stream(maxPartitionBytes="100"), checkpoint, fail_at=1)
    assert len(first[1]) == 12 and sorted(sum(first[1].values(), [])) == list(range(140, 180))
    # restarted with tasks of at most 4 MiB (a file costs 4 MiB to open): one file each
    after = batch_partitions(stream(maxPartitionBytes="4m"), checkpoint)
    assert after[1] == first[1]  # the replay: the rows of the first run's partitions
    assert len(after[2]) == 4 and sorted(sum(after[2].values(), [])) == list(range(100, 140))


def test_glob_path_stream_skips_files_being_written_under_hidden_names(spark, tmp_path, batch_partitions):
    """A glob (``in/*``) matches no hidden name, as in Spark: a file written under ``.x.tmp`` and
    renamed in is read once, whole, after the rename (before: read half-written, then again)."""
    src = tmp_path / "in"
    src.mkdir()
    land(src, "a.json", json_lines([1], "a"))
    (src / ".b.json.tmp").write_bytes(json_lines([2], "b") + b'{"id": 3, "fi')  # still being written
    stream = spark.readStream.format("connectors.files").schema(SCHEMA).option("fileFormat", "json").load(str(src / "*"))
    checkpoint = str(tmp_path / "cp")
    ids = lambda batches: sorted(str(i) for parts in batches.values() for rows in parts.values() for i in rows)  # noqa: E731
    assert ids(batch_partitions(stream, checkpoint)) == ["1"]
    with open(src / ".b.json.tmp", "ab") as out:
        out.write(b'le": "b"}\n')
    os.rename(src / ".b.json.tmp", src / "b.json")
    assert ids(batch_partitions(stream, checkpoint)) == ["2", "3"]


@pytest.mark.parametrize("clean", ["archive", "delete"])
def test_clean_source_after_commit(spark, tmp_path, unique, clean):
    src, archive = tmp_path / "in", tmp_path / "archive"
    src.mkdir()
    for n in range(3):
        land(src, f"{n}.json", json_lines([n], str(n)))
    options = {"fileFormat": "json", "cleanSource": clean, "maxFilesPerTrigger": "2"}
    if clean == "archive":
        options["sourceArchiveDir"] = str(archive)
    query = (
        spark.readStream.format("connectors.files").schema(SCHEMA).options(**options).load(str(src))
        .writeStream.format("memory").queryName(unique)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )
    query.awaitTermination(180)
    assert sorted(r.id for r in spark.table(unique).collect()) == [0, 1, 2]
    # The last batch's files are cleaned when Spark commits it, just after the query ends.
    wait_for(lambda: len(os.listdir(src)) <= 1, timeout=30, what="cleanup")
    assert sorted(os.listdir(src)) in ([], ["2.json"])
    if clean == "archive":
        archived = sorted(p.name for p in archive.rglob("*.json"))
        assert set(archived) >= {"0.json", "1.json"}
        assert (archive / str(src).lstrip("/") / "0.json").exists()


def test_failfast_stream_names_file_and_line(spark, tmp_path, unique):
    src = tmp_path / "in"
    src.mkdir()
    land(src, "bad.json", b'{"id": 1}\n{"id": "one"}\n')
    query = (
        spark.readStream.format("connectors.files").schema(SCHEMA).options(fileFormat="json", mode="FAILFAST").load(str(src))
        .writeStream.format("memory").queryName(unique)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(180)
    assert f"malformed record in {src / 'bad.json'}, line 2 (mode FAILFAST)" in str(info.value)


def test_files_skipped_by_ignore_corrupt_files_are_counted(spark, tmp_path, unique):
    src = tmp_path / "in"
    src.mkdir()
    land(src, "good.json", json_lines(range(10), "good"))
    cut = [src / "cut.json.gz", src / "cut.json.xz"]
    for path, codec in zip(cut, ("gzip", "xz")):
        data = compressing(json_lines(range(100, 50_000), "cut"), codec)
        land(src, path.name, data[: len(data) // 2])
    options = {"fileFormat": "json", "ignoreCorruptFiles": "true", "filePathColumn": "file"}
    schema = f"{SCHEMA}, _corrupt_record string"
    # In the data: one row per skipped file in the corrupt-record column, exactly once per batch.
    query = (
        spark.readStream.format("connectors.files").schema(schema).options(**options).load(str(src))
        .writeStream.format("memory").queryName(unique)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )
    query.awaitTermination(180)
    rows = spark.table(unique).collect()
    assert sorted(r.id for r in rows if r.file == str(src / "good.json")) == list(range(10))
    skipped = [r for r in rows if r._corrupt_record is not None]
    assert sorted(r.file for r in skipped) == [str(p) for p in cut] and all(r.id is None for r in skipped)
    assert all(r._corrupt_record.startswith(f"connectors.files: corrupt or truncated file {r.file}: ") for r in skipped)
    # On the driver, from Spark's collected Python worker logs (batch reads).
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    try:
        assert spark.read.format("connectors.files").schema(SCHEMA).options(**options).load(str(src)).count() == 10
        logs = spark.tvf.python_worker_logs().where(f"logger = 'connectors.files.corrupt' and context.file like '{src}/%'")
        assert sorted(r.file for r in logs.select("context.file").collect()) == [str(p) for p in cut]
    finally:
        spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")


def test_s3_batch_and_stream(spark, s3_server, tmp_path, unique):
    import s3fs

    bucket = s3_server.create_bucket(unique)
    fs = s3fs.S3FileSystem(**s3_server.storage_options())
    fs.pipe(f"{unique}/in/a.json", json_lines(range(50), "a"))
    fs.pipe(f"{unique}/in/sub/b.json.gz", compressing(json_lines(range(50, 80), "b"), "gzip"))
    fs.pipe(f"{unique}/in/_temporary/c.json", b"not json\n")
    storage = json.dumps(s3_server.storage_options())
    reader = lambda r: r.format("connectors.files").schema(SCHEMA).options(fileFormat="json", storageOptions=storage)  # noqa: E731
    assert sorted(r.id for r in reader(spark.read).load(f"{bucket}/in").collect()) == list(range(80))
    query = (
        reader(spark.readStream).option("discoveryInterval", "200ms").load(f"{bucket}/in")
        .writeStream.format("memory").queryName(unique)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="0.5 seconds").start()
    )
    try:
        wait_for(lambda: spark.table(unique).count() == 80, what="existing objects")
        fs.pipe(f"{unique}/in/d.json", json_lines(range(80, 90), "d"))
        wait_for(lambda: spark.table(unique).count() == 90, what="a new object")
    finally:
        query.stop()
    assert sorted(r.id for r in spark.table(unique).collect()) == list(range(90))


@pytest.mark.parametrize(
    "options, schema, message",
    [
        ({"fileFormat": "jsonl"}, SCHEMA, "option 'fileformat' = 'jsonl': expected one of text, csv, json, parquet"),
        ({"fileFormat": "json", "maxFilesPerTrigger": "-2"}, SCHEMA, "option 'maxfilespertrigger' = '-2': must be greater than 0"),
        ({"fileFormat": "json"}, None, "a stream of csv or json files needs a schema"),
        ({"fileFormat": "csv"}, StructType([]), "a stream of csv or json files needs a schema"),  # batch reads it
        ({"fileFormat": "text"}, SCHEMA, "the text format has one column, value string"),
        ({"fileFormat": "json", "filePathColumn": "f"}, SCHEMA, "option 'filepathcolumn' = 'f': the schema has no such column"),
        ({"fileFormat": "parquet", "multiLine": "true"}, SCHEMA, "option 'multiline' = 'true': applies to csv and json, not parquet"),
    ],
)
def test_bad_options_fail_at_query_start(spark, tmp_path, options, schema, message):
    (tmp_path / "a.json").write_text('{"id": 1}\n')
    reader = spark.readStream.format("connectors.files").options(**options)
    if schema is not None:
        reader = reader.schema(schema)
    with pytest.raises((AnalysisException, PySparkException, StreamingQueryException)) as info:
        query = reader.load(str(tmp_path)).writeStream.format("console").option(
            "checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
        query.awaitTermination(120)
    assert message.lower() in str(info.value).lower()


@pytest.mark.crash
def test_sigkill_mid_batch_every_file_read_exactly_once(crash_harness, tmp_path):
    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    for n in range(12):
        data = json_lines(range(n * 500, n * 500 + 500), f"{n}")
        land(source, f"{n:02d}.json" + (".gz" if n % 3 == 0 else ""), compressing(data, "gzip") if n % 3 == 0 else data)
    harness = crash_harness("jobs.file_source:files_to_parquet", source=str(source), out=str(out), files_per_batch=3)
    report = harness.run(kills=2, kill_at="mid-batch", seed=11)
    assert report.kills == 2
    ids = pq.read_table(out).column("id").to_pylist()
    assert len(ids) == 6000 and sorted(ids) == list(range(6000))


@pytest.mark.crash
def test_sigkill_a_glob_stream_of_files_with_one_time_reads_each_once(crash_harness, tmp_path):
    """Files read through a glob, all stamped in the same millisecond (coarse clocks, S3's whole
    seconds), no lateness allowed, a writer's hidden in-progress files beside them; killed twice
    mid-batch and restarted from the checkpoint: every visible file is read once, hidden ones never."""
    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    for n in range(12):
        land(source, f"{n:02d}.json", json_lines(range(n * 500, n * 500 + 500), f"{n}"))
    for name in (".12.json.tmp", "_13.json"):
        land(source, name, json_lines(range(90_000, 90_010), name))
    stamp = 1_700_000_000_000_000_000
    for path in source.iterdir():
        os.utime(path, ns=(stamp, stamp))
    harness = crash_harness("jobs.file_source:files_to_parquet", source=str(source / "*"), out=str(out),
                            files_per_batch=3, options={"allowedLateness": "0"})
    report = harness.run(kills=2, kill_at="mid-batch", seed=12)
    assert report.kills == 2
    ids = pq.read_table(out).column("id").to_pylist()
    assert len(ids) == 6000 and sorted(ids) == list(range(6000))


@pytest.mark.crash
def test_sigkill_a_file_name_only_stream_reads_each_name_once(crash_harness, tmp_path):
    """fileNameOnly: files in two directories, one name landing again later in the other (the same
    file under another path, for Spark's option); killed twice mid-batch and restarted from the
    checkpoint: every name is read once, from its first path, and the later copy never."""
    source, out = tmp_path / "in", tmp_path / "out"
    for name in ("a", "b"):
        (source / name).mkdir(parents=True)
    for n in range(12):
        land(source / ("a" if n < 6 else "b"), f"{n:02d}.json", json_lines(range(n * 500, n * 500 + 500), f"{n}"))
    land(source / "b", "00.json", json_lines(range(90_000, 90_010), "copy"))
    later = os.stat(source / "b" / "11.json").st_mtime_ns + 1_000_000_000
    os.utime(source / "b" / "00.json", ns=(later, later))
    harness = crash_harness("jobs.file_source:files_to_parquet", source=str(source), out=str(out), files_per_batch=3,
                            options={"fileNameOnly": "true", "recursiveFileLookup": "true"})
    report = harness.run(kills=2, kill_at="mid-batch", seed=13)
    assert report.kills == 2
    ids = pq.read_table(out).column("id").to_pylist()
    assert len(ids) == 6000 and sorted(ids) == list(range(6000))
