"""fileFormat avro: the file sink's part files and the file source's splits, checked with fastavro
and with Spark's own ``avro`` format (spark-avro, in a separate Spark process)."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import fastavro
import pytest

from connectors.core.options import OptionError

FORMAT = "connectors.files"
SPARK_AVRO = "org.apache.spark:spark-avro_2.13:4.2.0"  # the newest on Maven Central (no 4.3.0)
DDL = ("id bigint, name string, amount double, at timestamp, day date, price decimal(10,2), "
       "tags array<string>, attrs map<string,int>, inner struct<x:int,y:string>")
AT = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc)


def rows(ids) -> list[tuple]:
    return [(i, None if i % 4 == 0 else f"n{i}", i / 2, AT, datetime.date(2026, 1, 1 + i % 28),
             decimal.Decimal(i) / 100, ["t"] * (i % 3), {"a": i} if i % 2 else {}, (i, f"y{i}"))
            for i in ids]


def parts(directory: Path) -> list[Path]:
    """The finished part files (not the sink's hidden state)."""
    return sorted(p for p in directory.rglob("*") if p.is_file()
                  and not any(part.startswith((".", "_")) for part in p.relative_to(directory).parts))


def avro_rows(directory: Path) -> list[dict]:
    out = []
    for path in parts(directory):
        with path.open("rb") as handle:
            out += list(fastavro.reader(handle))
    return sorted(out, key=lambda r: r["id"])


@pytest.mark.parametrize("codec", ["none", "uncompressed", "snappy", "deflate", "bzip2", "xz", "zstd", "zstandard"])
def test_sink_writes_avro_parts_fastavro_reads(spark, tmp_path, codec):
    out = tmp_path / "out"
    df = spark.createDataFrame(rows(range(300)), DDL).repartition(2)
    df.write.format(FORMAT).option("fileFormat", "avro").option("compression", codec).mode("append").save(str(out))
    got = avro_rows(out)
    assert [r["id"] for r in got] == list(range(300))
    assert got[5] == {"id": 5, "name": "n5", "amount": 2.5, "at": AT, "day": datetime.date(2026, 1, 6),
                      "price": decimal.Decimal("0.05"), "tags": ["t", "t"], "attrs": {"a": 5},
                      "inner": {"x": 5, "y": "y5"}}
    assert got[4]["name"] is None and got[4]["attrs"] == {}
    with parts(out)[0].open("rb") as handle:
        assert fastavro.reader(handle).codec == {"none": "null", "uncompressed": "null", "zstd": "zstandard"}.get(
            codec, codec)


def test_stream_rolls_an_avro_part_every_micro_batch(spark, tmp_path):
    out = tmp_path / "out"
    stream = (spark.readStream.format("connectors.numbers").option("end", 999).option("rowsPerBatch", 250)
              .option("numPartitions", 1).load().selectExpr("value as id", "cast(value as string) as name"))
    query = (stream.writeStream.format(FORMAT).option("fileFormat", "avro").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert len(parts(out)) == 4
    assert [r["id"] for r in avro_rows(out)] == list(range(1000))


def test_avro_options_are_checked(spark, tmp_path):
    df = spark.createDataFrame([(1,)], "id int")
    with pytest.raises(Exception, match="'compression' = 'gzip': avro takes none, uncompressed, snappy, deflate, bzip2, xz, zstd, zstandard"):
        df.write.format(FORMAT).options(fileFormat="avro", compression="gzip").mode("append").save(str(tmp_path / "a"))
    with pytest.raises(Exception, match="'rollingPolicy'.*bulk format"):
        df.write.format(FORMAT).options(fileFormat="avro", rollingPolicy="default").mode("append").save(
            str(tmp_path / "b"))
    with pytest.raises(OptionError, match="Avro maps need string keys"):
        from connectors.files.sink.formats import check_schema  # noqa: PLC0415

        check_schema(spark.createDataFrame([({1: 1},)], "m map<int,int>").schema, "avro", ["m"])


@pytest.mark.parametrize("codec", ["null", "deflate", "snappy", "zstandard"])
def test_source_splits_avro_files_at_sync_markers(spark, tmp_path, codec):
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"}, {"name": "text", "type": ["null", "string"]},
        {"name": "m", "type": {"type": "map", "values": "long"}}]}
    src = tmp_path / "src"
    src.mkdir()
    for f in range(2):
        records = [{"id": f * 30_000 + i, "text": None if i % 5 == 0 else "z" * (i % 90), "m": {"k": i}}
                   for i in range(30_000)]
        with (src / f"f{f}.avro").open("wb") as handle:
            fastavro.writer(handle, schema, records, codec=codec, sync_interval=4000)
    df = (spark.read.format(FORMAT).option("fileFormat", "avro").option("maxPartitionBytes", "64k")
          .load(str(src)))
    assert df.schema.simpleString() == "struct<id:bigint,text:string,m:map<string,bigint>>"
    assert df.rdd.getNumPartitions() >= 4
    row = df.selectExpr("count(*) c", "count(distinct id) d", "min(id) lo", "max(id) hi",
                        "sum(m['k']) s", "count(text) t").first()
    assert (row.c, row.d, row.lo, row.hi) == (60_000, 60_000, 0, 59_999)
    assert row.s == 2 * sum(range(30_000)) and row.t == 2 * 24_000


def test_source_reports_a_corrupt_avro_file(spark, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    with (src / "ok.avro").open("wb") as handle:
        fastavro.writer(handle, {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]},
                        [{"id": i} for i in range(100)])
    data = (src / "ok.avro").read_bytes()
    (src / "cut.avro").write_bytes(data[:-20])
    reader = spark.read.format(FORMAT).option("fileFormat", "avro").schema("id long")
    with pytest.raises(Exception, match="corrupt or truncated file .*cut.avro"):
        reader.load(str(src)).collect()
    assert reader.option("ignoreCorruptFiles", "true").load(str(src)).count() == 100


def write_avro(path: Path, fields: list[dict], records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        fastavro.writer(handle, {"type": "record", "name": "R", "namespace": "x", "fields": fields}, records)


def test_source_reads_named_types_used_twice_enums_times_and_fixed(spark, tmp_path):
    """Schemas as other tools write them: a named type defined once and then used by name, enums
    (nullable, in arrays and maps), time-millis / -micros (int and long, as spark_type maps them),
    fixed, a union with null second, a decimal as fixed."""
    enum = {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}
    fields = [{"name": "id", "type": "long"}, {"name": "k", "type": ["null", enum]},
              {"name": "ks", "type": {"type": "array", "items": "x.Kind"}},
              {"name": "km", "type": {"type": "map", "values": ["null", "Kind"]}},
              {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
              {"name": "tu", "type": ["null", {"type": "long", "logicalType": "time-micros"}]},
              {"name": "f", "type": {"type": "fixed", "name": "F3", "size": 3}},
              {"name": "s", "type": ["string", "null"]},
              {"name": "d", "type": {"type": "fixed", "name": "D16", "size": 16, "logicalType": "decimal",
                                     "precision": 38, "scale": 2}}]
    write_avro(tmp_path / "src" / "a.avro", fields, [
        {"id": 1, "k": "B", "ks": ["A", "B"], "km": {"x": None, "y": "A"}, "t": datetime.time(1, 2, 3, 4000),
         "tu": datetime.time(23, 59, 59, 999999), "f": b"\x00\x01\x02", "s": None, "d": D("-" + "9" * 36 + ".99")},
        {"id": 2, "k": None, "ks": [], "km": {}, "t": datetime.time(0), "tu": None, "f": b"abc", "s": "",
         "d": D("0.01")}])
    df = spark.read.format(FORMAT).option("fileFormat", "avro").load(str(tmp_path / "src"))
    assert df.schema.simpleString() == ("struct<id:bigint,k:string,ks:array<string>,km:map<string,string>,t:int,"
                                        "tu:bigint,f:binary,s:string,d:decimal(38,2)>")
    assert [tuple(r) for r in df.orderBy("id").collect()] == [
        (1, "B", ["A", "B"], {"x": None, "y": "A"}, 3_723_004, 86_399_999_999, bytearray(b"\x00\x01\x02"), None,
         D("-" + "9" * 36 + ".99")),
        (2, None, [], {}, 0, None, bytearray(b"abc"), "", D("0.01"))]


def test_source_reads_unions_of_several_types_as_spark_avro(spark, tmp_path):
    """int and long as bigint, float and double as double, other unions as a struct of one member per
    non-null branch with only the branch written set (two records told apart by name); a column of
    such a union is not read as another type."""
    point = {"type": "record", "name": "P", "fields": [{"name": "x", "type": "int"}]}
    fields = [{"name": "id", "type": "long"}, {"name": "u", "type": ["null", "int", "string"]},
              {"name": "n", "type": ["int", "long"]}, {"name": "f", "type": ["float", "double"]},
              {"name": "r", "type": [point, {**point, "name": "Q"}]}, {"name": "s", "type": ["null", "x.P", "string"]}]
    write_avro(tmp_path / "src" / "a.avro", fields, [
        {"id": 1, "u": 5, "n": 1 << 40, "f": 0.25, "r": ("x.Q", {"x": 1}), "s": {"x": 2}},
        {"id": 2, "u": "v", "n": -1, "f": 0.1, "r": ("x.P", {"x": 3}), "s": "w"},
        {"id": 3, "u": None, "n": 0, "f": -2.5, "r": ("x.Q", {"x": 4}), "s": None}])
    reader = spark.read.format(FORMAT).option("fileFormat", "avro")
    df = reader.load(str(tmp_path / "src"))
    assert df.schema.simpleString() == (
        "struct<id:bigint,u:struct<member0:int,member1:string>,n:bigint,f:double,"
        "r:struct<member0:struct<x:int>,member1:struct<x:int>>,s:struct<member0:struct<x:int>,member1:string>>")
    assert [r.asDict(recursive=True) for r in df.orderBy("id").collect()] == [
        {"id": 1, "u": {"member0": 5, "member1": None}, "n": 1 << 40, "f": 0.25,
         "r": {"member0": None, "member1": {"x": 1}}, "s": {"member0": {"x": 2}, "member1": None}},
        {"id": 2, "u": {"member0": None, "member1": "v"}, "n": -1, "f": 0.1,
         "r": {"member0": {"x": 3}, "member1": None}, "s": {"member0": None, "member1": "w"}},
        {"id": 3, "u": None, "n": 0, "f": -2.5, "r": {"member0": None, "member1": {"x": 4}}, "s": None}]
    with pytest.raises(Exception, match="column 'u' is .* which cannot be read as string"):
        reader.schema("id long, u string").load(str(tmp_path / "src")).collect()


def test_source_refuses_a_file_whose_column_would_change_value(spark, tmp_path):
    """Files of an evolved schema: int -> long and a new column read as Avro promotes them; a
    column that became text (read as the first file's long: "0042" would become 42) or a double
    (1.5 would fail as a 'corrupt file') fails naming the file and the column, and ignoreCorruptFiles
    does not skip it silently."""
    write_avro(tmp_path / "ok" / "a.avro", [{"name": "id", "type": "long"}, {"name": "n", "type": "int"}],
               [{"id": 1, "n": 1}])
    write_avro(tmp_path / "ok" / "b.avro", [{"name": "id", "type": "long"}, {"name": "n", "type": "long"},
                                             {"name": "new", "type": "string"}], [{"id": 2, "n": 1, "new": "x"}])
    reader = spark.read.format(FORMAT).option("fileFormat", "avro")
    got = reader.schema("id long, n long, new string").load(str(tmp_path / "ok")).orderBy("id").collect()
    assert [tuple(r) for r in got] == [(1, 1, None), (2, 1, "x")]
    for name, avro_type, value in [("text", "string", "0042"), ("double", "double", 1.5)]:
        write_avro(tmp_path / name / "a.avro", [{"name": "id", "type": "long"}, {"name": "n", "type": "long"}],
                   [{"id": 1, "n": 1}])
        write_avro(tmp_path / name / "b.avro", [{"name": "id", "type": "long"}, {"name": "n", "type": avro_type}],
                   [{"id": 2, "n": value}])
        for ignore in ("false", "true"):
            with pytest.raises(Exception, match=f'b.avro: column \'n\' is "{avro_type}" in the file.s Avro schema, '
                                                 "which cannot be read as bigint without changing values"):
                reader.option("ignoreCorruptFiles", ignore).load(str(tmp_path / name)).collect()


UTC = datetime.timezone.utc
D = decimal.Decimal
# Values a codec can change on the way: 38 digits, high scales, year 1 and 9999, NaN, -0.0, 4-byte UTF-8,
# nulls inside arrays and maps, a null struct against a struct of nulls, 3 levels of structs.
EDGE_DDL = ("id int, b byte, s short, d38 decimal(38,0), hi decimal(38,37), d decimal(10,2), ts timestamp, "
            "ntz timestamp_ntz, day date, f float, x double, str string, bin binary, arr array<int>, "
            "m map<string,int>, deep struct<a:struct<b:struct<c:int,d:string>>>, st struct<p:int,q:string>, "
            "ms map<string,struct<p:int>>")
EDGE_ROWS = [
    (0, -128, -32768, D("-" + "9" * 38), D("-9." + "9" * 37), D("-12345678.90"),
     datetime.datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC), datetime.datetime(1, 1, 1, 0, 0, 0, 1), datetime.date(1, 1, 1),
     float("nan"), float("nan"), "", b"", [], {}, None, None, {}),
    (1, 127, 32767, D("9" * 38), D("1E-37"), D("-0.01"),
     datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
     datetime.datetime(9999, 12, 31, 23, 59, 59, 999999),
     datetime.date(9999, 12, 31), float("inf"), float("-inf"), "😀𝄞é中", b"\x00\xff", [None, 1, None],
     {"a": None}, {"a": None}, {"p": None, "q": None}, {"k": None}),
    (2, -1, -1, D("-1"), D("-1E-37"), D("99999999.99"),
     datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), datetime.datetime(1582, 10, 10, 1, 2, 3, 4),
     datetime.date(1969, 12, 31), -0.0, -0.0, "\x00", b"\x00", [None], {"": 0}, {"a": {"b": None}},
     {"p": -1, "q": ""}, {"k": {"p": None}}),
    (3, *[None] * 14, {"a": {"b": {"c": None, "d": None}}}, None, None),
]


def as_strings(df) -> list[list[str]]:
    """Every value as Spark prints it (binary in hex): exact, and comparable across sessions in UTC."""
    columns = [f"hex({f.name})" if f.dataType.simpleString() == "binary" else f"cast({f.name} as string)"
               for f in df.schema.fields]
    return sorted([list(row) for row in df.selectExpr(*columns).collect()], key=lambda row: int(row[0]))


SPARK_SCRIPT = textwrap.dedent("""
    import json, sys
    from connectors.testing.spark import local_session
    ours, theirs, edge = sys.argv[1], sys.argv[2], sys.argv[4]
    spark = local_session("spark-avro-interop", conf={"spark.jars.packages": sys.argv[3],
                                                      "spark.sql.session.timeZone": "UTC"})
    df = spark.read.format("avro").option("recursiveFileLookup", "true").load(ours)
    first = df.where("id = 5").first().asDict(recursive=True)
    edges = spark.read.format("avro").option("recursiveFileLookup", "true").load(edge)
    columns = [f"hex({f.name})" if f.dataType.simpleString() == "binary" else f"cast({f.name} as string)"
               for f in edges.schema.fields]
    edge_values = sorted([list(row) for row in edges.selectExpr(*columns).collect()], key=lambda row: int(row[0]))
    edges.write.format("avro").save(theirs + "/edge")
    print(json.dumps({"count": df.count(), "ids": df.selectExpr("sum(id)").first()[0],
                      "schema": df.schema.simpleString(), "first": first, "edge": edge_values,
                      "edge_schema": edges.schema.simpleString()}, default=str))
    source = spark.range(1000).selectExpr("id", "cast(id as string) as name", "id / 4 as amount",
                                          "timestamp_micros(1767225600000000 + id) as at",
                                          "if(id % 2 = 0, null, array(id)) as list")
    source.repartition(2).write.format("avro").save(theirs + "/snappy")
    for codec in ("deflate", "bzip2", "xz", "zstandard"):
        source.write.format("avro").option("compression", codec).save(theirs + "/" + codec)
    spark.stop()
""")


def test_spark_avro_reads_our_parts_and_we_read_its_files(utc_session, tmp_path):
    """Spark's own ``avro`` format (spark-avro), in its own Spark process, reads what our sink
    wrote; our source reads what Spark's avro writer wrote (every codec it takes). Edge values
    come back exactly every way: ours -> Spark, Spark (decimals as fixed) -> ours, ours -> ours."""
    spark = utc_session
    ours, theirs, edge = tmp_path / "ours", tmp_path / "theirs", tmp_path / "edge"
    spark.createDataFrame(rows(range(300)), DDL).write.format(FORMAT).options(fileFormat="avro", partSuffix=".avro") \
        .mode("append").save(str(ours))
    edges = spark.createDataFrame(EDGE_ROWS, EDGE_DDL)
    edges.write.format(FORMAT).options(fileFormat="avro", partSuffix=".avro").mode("append").save(str(edge))
    result = subprocess.run([sys.executable, "-c", SPARK_SCRIPT, str(ours), str(theirs), SPARK_AVRO, str(edge)],
                            capture_output=True, text=True, timeout=600, env={**os.environ})
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["count"] == 300 and seen["ids"] == sum(range(300))
    assert seen["schema"] == ("struct<id:bigint,name:string,amount:double,at:timestamp,day:date,price:decimal(10,2),"
                              "tags:array<string>,attrs:map<string,int>,inner:struct<x:int,y:string>>")
    assert seen["first"]["name"] == "n5" and seen["first"]["price"] == "0.05" and seen["first"]["inner"] == {
        "x": 5, "y": "y5"}

    for codec in ("snappy", "deflate", "bzip2", "xz", "zstandard"):
        df = spark.read.format(FORMAT).option("fileFormat", "avro").load(str(theirs / codec))
        assert df.schema.simpleString() == "struct<id:bigint,name:string,amount:double,at:timestamp,list:array<bigint>>"
        got = sorted(df.collect())
        assert [r.id for r in got] == list(range(1000))
        assert got[3].name == "3" and got[3].amount == 0.75 and got[3].list == [3] and got[2].list is None
        assert got[1].at == datetime.datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=datetime.timezone.utc).astimezone(
            ).replace(tzinfo=None)

    expected = as_strings(edges)
    assert seen["edge"] == expected
    assert seen["edge_schema"].startswith("struct<id:int,b:int,s:int,d38:decimal(38,0),hi:decimal(38,37),")
    for path in (edge, theirs / "edge"):
        assert as_strings(spark.read.format(FORMAT).option("fileFormat", "avro").load(str(path))) == expected


def test_a_range_owns_the_block_that_starts_exactly_at_its_start():
    from connectors.files.source.split_reader import _after_sync  # noqa: PLC0415

    sync = bytes(range(16))
    data = b"h" * 40 + sync + b"block-1" + sync + b"block-2" * 200000 + sync
    begin_1, begin_2 = 56, 56 + 7 + 16
    assert _after_sync(io.BytesIO(data), begin_1, sync, len(data)) == begin_1
    assert _after_sync(io.BytesIO(data), begin_1 + 1, sync, len(data)) == begin_2
    assert _after_sync(io.BytesIO(data), begin_2 + 1, sync, len(data)) == len(data)  # found past a 1 MiB chunk
    assert _after_sync(io.BytesIO(data + b"tail"), len(data) + 1, sync, len(data) + 4) == len(data) + 4


UNION_SCHEMA = {"type": "record", "name": "R", "fields": [
    {"name": "id", "type": "long"},
    {"name": "u", "type": ["null", "int", "string", {"type": "record", "name": "Rec", "namespace": "a",
                                                      "fields": [{"name": "x", "type": "int"}]},
                           {"type": "array", "items": "long"}]},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}}]}  # before 1582: no rebase with CORRECTED
UNION_ROWS = [{"id": 1, "u": 7, "day": datetime.date(1500, 1, 1)}, {"id": 2, "u": "s", "day": datetime.date(1, 1, 1)},
              {"id": 3, "u": {"x": 9}, "day": datetime.date(2026, 1, 1)}, {"id": 4, "u": [1, 2], "day": AT.date()},
              {"id": 5, "u": None, "day": AT.date()}]
CONFLICT_SCHEMA = {"type": "record", "name": "C", "fields": [  # the type names int and Int differ in case only
    {"name": "u", "type": ["int", {"type": "record", "name": "Int", "fields": [{"name": "x", "type": "int"}]}]}]}
READER_SCHEMA = {"type": "record", "name": "P", "fields": [
    {"name": "a", "type": "long"}, {"name": "b", "type": "string"}, {"name": "c", "type": "string", "default": "d"}]}
ENUM_SCHEMA = {"type": "record", "name": "W", "namespace": "w", "fields": [
    {"name": "key", "type": "long"}, {"name": "label", "type": ["null", "string"]},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["RED", "GREEN"]}}]}
# Defaults of fields the files lack, at any depth (bytes as code points 0-255, a decimal, a union read as a
# struct: of its first branch), and a long read as a double, through fastavro (a map) and polars (none)
DEFAULT_WRITER = {"type": "record", "name": "D", "fields": [
    {"name": "id", "type": "long"}, {"name": "n", "type": "long"},
    {"name": "m", "type": {"type": "map", "values": "long"}}]}
DEFAULT_ROWS = [{"id": i, "n": (1 << 63) - 1 - i, "m": {"k": i}} for i in range(3)]
DEFAULT_READER = {"type": "record", "name": "D", "fields": [
    *[{**f, "type": "double"} if f["name"] == "n" else f for f in DEFAULT_WRITER["fields"]],
    {"name": "b", "type": "bytes", "default": "\u00ff\u0001"},
    {"name": "r", "type": {"type": "record", "name": "In", "fields": [
        {"name": "x", "type": "bytes"}, {"name": "d", "type": {"type": "bytes", "logicalType": "decimal",
                                                               "precision": 5, "scale": 2}},
        {"name": "u", "type": ["bytes", "long", "string"]}]},
     "default": {"x": "\u00e9", "d": "\u0001\u0000", "u": "\u00ff"}}]}
# Unions read as structs with branches a value does not tell apart: an int of [map, long, int], a double of
# [string, float, double] that a float holds, are of the branch written (fastavro's writer takes the branch's name)
BRANCH_SCHEMA = {"type": "record", "name": "B", "fields": [
    {"name": "id", "type": "int"}, {"name": "a", "type": [{"type": "map", "values": "long"}, "long", "int"]},
    {"name": "b", "type": ["null", "string", "float", "double"]}]}
BRANCH_ROWS = [{"id": 1, "a": ("int", -1), "b": ("double", 1.5)}, {"id": 2, "a": ("long", 7), "b": ("float", 2.5)},
               {"id": 3, "a": {"k": 1}, "b": None}]
# Strings that are not UTF-8, in a file's string (through fastavro: polars refuses them) or bytes read as a string
# (through polars): Spark keeps their bytes, and its rows show U+FFFD as Java decodes them (one for ED A0 80)
TEXT_SCHEMA = {"type": "record", "name": "T", "fields": [{"name": "id", "type": "int"},
                                                         {"name": "s", "type": "string"}]}
TEXT_BYTES = {**TEXT_SCHEMA, "fields": [TEXT_SCHEMA["fields"][0], {"name": "s", "type": "bytes"}]}
NOT_UTF8 = [{"id": i, "s": s} for i, s in enumerate([b"ok", b"a\xffb", b"\xe2\x82", b"\xed\xa0\x80x", b"\xc0\xaf",
                                                      b"\xf4\x90\x80\x80", "é".encode()])]
# A map's keys that are not UTF-8 (written as the array of key bytes and value records a map's bytes also are):
# Spark keeps their bytes
KEYS_SCHEMA = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "int"},
                                                         {"name": "m", "type": {"type": "map", "values": "long"}}]}
KEYS_ENTRIES = {**KEYS_SCHEMA, "fields": [KEYS_SCHEMA["fields"][0], {"name": "m", "type": {"type": "array", "items": {
    "type": "record", "name": "E", "fields": [{"name": "key", "type": "bytes"}, {"name": "value", "type": "long"}]}}}]}
KEYS_ROWS = [{"id": 1, "m": [{"key": b"a\xffb", "value": 1}, {"key": b"ok", "value": 2}]},
             {"id": 2, "m": [{"key": b"\xed\xa0\x80", "value": 3}, {"key": b"\xed\xa0\x80", "value": 4}]}]
# Float and double defaults given as JSON strings, which Java parses as numbers, or refuses ("nan")
FLOAT_DEFAULTS = {**TEXT_SCHEMA, "fields": [TEXT_SCHEMA["fields"][0], *(
    {"name": n, "type": t, "default": d} for n, t, d in (("nan", "double", "NaN"), ("inf", "float", "-Infinity"),
                                                         ("d", "double", " 1.5d "), ("h", "float", "0x1p3")))]}
# Union defaults of a branch other than the first: Avro's Java reader takes the first branch the JSON fits
UNION_DEFAULTS = {**TEXT_SCHEMA, "fields": [TEXT_SCHEMA["fields"][0], *(
    {"name": n, "type": t, "default": d} for n, t, d in (("a", ["null", "double"], 1.5), ("b", ["null", "string"], "x"),
                                                         ("e", ["null", "string", "long"], 5)))]}
WRITE_DDL = "id long, name string, kind string, inner struct<x:int>"
WRITE_ROWS = [(1, "a", "RED", (1,)), (2, None, "GREEN", (2,))]
READS = {  # name -> (directory, options, schema DDL or None), read by spark-avro and by our source alike
    "stable": ("union", {"enableStableIdentifiersForUnionType": "true", "datetimeRebaseMode": "CORRECTED"}, None),
    "prefix": ("union", {"enableStableIdentifiersForUnionType": "true", "stableIdentifierPrefixForUnionType": "",
                         "datetimeRebaseMode": "CORRECTED"}, None),
    "conflict": ("conflict", {"enableStableIdentifiersForUnionType": "true"}, None),
    "positional": ("pos", {"positionalFieldMatching": "true"}, "x long, y string"),
    "url": ("pos", {"avroSchemaUrl": "{reader}"}, None),
    "defaults": ("dflt", {"avroSchema": json.dumps(DEFAULT_READER)}, None),
    "defaults_columnar": ("dfltc", {"avroSchema": json.dumps({**DEFAULT_READER, "fields": [
        f for f in DEFAULT_READER["fields"] if f["name"] != "m"]})}, None),
    "branches": ("branch", {}, None),
    "not_utf8": ("text", {}, None),
    "not_utf8_promoted": ("bytes", {"avroSchema": json.dumps(TEXT_SCHEMA)}, None),
    "not_utf8_keys": ("keys", {}, None),
    "float_defaults": ("text", {"avroSchema": json.dumps(FLOAT_DEFAULTS)}, None),
    "union_defaults": ("text", {"avroSchema": json.dumps(UNION_DEFAULTS)}, None),
    "float_default_refused": ("text", {"avroSchema": json.dumps({**FLOAT_DEFAULTS, "fields": [
        *FLOAT_DEFAULTS["fields"], {"name": "x", "type": "double", "default": "nan"}]})}, None),
    # a reader schema of no field: a row of no column per record (struct<>)
    "no_fields": ("dflt", {"avroSchema": json.dumps({**DEFAULT_READER, "fields": []})}, None),
    "no_fields_columnar": ("dfltc", {"avroSchema": json.dumps({**DEFAULT_READER, "fields": []})}, None),
}
OPTIONS_SCRIPT = textwrap.dedent("""
    import json, sys
    from connectors.testing.spark import local_session
    root, reads = sys.argv[1], json.loads(sys.argv[3])
    spark = local_session("spark-avro-options", conf={"spark.jars.packages": sys.argv[2],
                                                      "spark.sql.session.timeZone": "UTC"})
    out = {}
    for name, (directory, options, ddl) in reads.items():
        reader = spark.read.format("avro").options(**options)
        try:
            df = (reader.schema(ddl) if ddl else reader).load(root + "/" + directory)
            text = [f"hex(cast({f.name} as binary))" for f in df.schema if f.dataType.simpleString() == "string"] + [
                f"transform(map_keys({f.name}), k -> hex(cast(k as binary)))" for f in df.schema
                if f.dataType.simpleString().startswith("map<string,")]
            out[name] = [df.schema.simpleString(), sorted(map(str, df.collect())),
                         sorted(map(str, df.selectExpr(*text).collect()))]
        except Exception as exc:
            out[name] = str(exc)
    df = spark.createDataFrame([(1, "a", "RED", (1,)), (2, None, "GREEN", (2,))], sys.argv[4])
    df.write.format("avro").options(recordName="Rn", recordNamespace="ns.x").save(root + "/theirs/named")
    df.drop("inner").write.format("avro").options(avroSchema=sys.argv[5], positionalFieldMatching="true").save(
        root + "/theirs/enum")
    print(json.dumps(out))
    spark.stop()
""")


def container(directory: Path) -> tuple[list[str], list[dict]]:
    """The full names of the records of the parts' schemas, and their records (fastavro's)."""
    from connectors.core import avro  # noqa: PLC0415

    def records(schema) -> set[str]:
        if isinstance(schema, list):
            return set().union(*map(records, schema))
        if not isinstance(schema, dict):
            return set()
        nested = [f["type"] for f in schema.get("fields", ())] + [schema[k] for k in ("items", "values") if k in schema]
        return ({schema["name"]} if schema["type"] == "record" else set()) | set().union(*map(records, nested))

    names, rows = set(), []
    for path in (p for p in parts(directory) if p.suffix == ".avro" or "theirs" not in p.parts):
        with path.open("rb") as handle:
            names |= records(avro.parse(avro.read_header(handle)[0]))
        with path.open("rb") as handle:
            rows += list(fastavro.reader(handle))
    return sorted(names), sorted(rows, key=lambda r: json.dumps(r, default=str, sort_keys=True))


def test_spark_avro_options_read_and_write_as_spark_avro(utc_session, tmp_path):
    """spark-avro's options: union stable identifiers (and their conflict), positionalFieldMatching,
    avroSchemaUrl, datetimeRebaseMode CORRECTED on reads; recordName/recordNamespace, avroSchema with
    an enum and positionalFieldMatching on writes (Spark's writer takes unions as member0, ... only).
    Spark's avro format and ours read the same files, and write the same records and names."""
    from connectors.core import avro  # noqa: PLC0415

    spark = utc_session
    for directory, schema, records in (("union", UNION_SCHEMA, UNION_ROWS), ("conflict", CONFLICT_SCHEMA, [{"u": 1}]),
                                       ("pos", {**READER_SCHEMA, "fields": READER_SCHEMA["fields"][:2]},
                                        [{"a": 1, "b": "one"}, {"a": 2, "b": "two"}]),
                                       ("dflt", DEFAULT_WRITER, DEFAULT_ROWS),
                                       ("dfltc", {**DEFAULT_WRITER, "fields": DEFAULT_WRITER["fields"][:2]},
                                        [{k: v for k, v in r.items() if k != "m"} for r in DEFAULT_ROWS]),
                                       ("branch", BRANCH_SCHEMA, BRANCH_ROWS), ("bytes", TEXT_BYTES, NOT_UTF8)):
        (tmp_path / directory).mkdir()
        with (tmp_path / directory / "f.avro").open("wb") as handle:
            fastavro.writer(handle, schema, records)
    # strings of the bytes NOT_UTF8 has, map keys of KEYS_ROWS's: written as bytes, the same on the wire
    for directory, schema, written, records in (("text", TEXT_SCHEMA, TEXT_BYTES, NOT_UTF8),
                                                 ("keys", KEYS_SCHEMA, KEYS_ENTRIES, KEYS_ROWS)):
        header, sync = avro.container_header(json.dumps(schema))
        body = io.BytesIO()
        for record in records:
            fastavro.schemaless_writer(body, fastavro.parse_schema(written), record)
        (tmp_path / directory).mkdir()
        (tmp_path / directory / "f.avro").write_bytes(header + avro.container_block(len(records), body.getvalue(),
                                                                                     sync))
    (tmp_path / "reader.avsc").write_text(json.dumps(READER_SCHEMA))
    reads = json.loads(json.dumps(READS).replace("{reader}", str(tmp_path / "reader.avsc")))
    result = subprocess.run([sys.executable, "-c", OPTIONS_SCRIPT, str(tmp_path), SPARK_AVRO, json.dumps(reads),
                             WRITE_DDL, json.dumps(ENUM_SCHEMA)],
                            capture_output=True, text=True, timeout=600, env={**os.environ})
    assert result.returncode == 0, result.stderr[-3000:]
    theirs = json.loads(result.stdout.strip().splitlines()[-1])

    for name, (directory, options, ddl) in reads.items():
        reader = spark.read.format(FORMAT).options(fileFormat="avro", **options)
        try:
            df = (reader.schema(ddl) if ddl else reader).load(str(tmp_path / directory))
            text = [f"hex(cast({f.name} as binary))" for f in df.schema if f.dataType.simpleString() == "string"] + [
                f"transform(map_keys({f.name}), k -> hex(cast(k as binary)))" for f in df.schema
                if f.dataType.simpleString().startswith("map<string,")]
            ours = [df.schema.simpleString(), sorted(map(str, df.collect())),
                    sorted(map(str, df.selectExpr(*text).collect()))]
        except Exception as exc:  # noqa: BLE001 - compared with Spark's error below
            ours = str(exc)
        if name == "conflict":
            assert "name conflict of type name Int" in theirs[name] and "name conflict of type name Int" in ours
        elif name == "float_default_refused":
            assert 'For input string: "nan"' in theirs[name] and "the default of the field 'x', 'nan'" in ours
        else:
            assert ours == theirs[name], name
    assert theirs["stable"][0] == ("struct<id:bigint,u:struct<member_int:int,member_string:string,"
                                   "member_Rec:struct<x:int>,member_array:array<bigint>>,day:date>")

    df = spark.createDataFrame(WRITE_ROWS, WRITE_DDL)
    df.write.format(FORMAT).options(fileFormat="avro", recordName="Rn", recordNamespace="ns.x").mode("append").save(
        str(tmp_path / "ours" / "named"))
    df.drop("inner").write.format(FORMAT).options(fileFormat="avro", avroSchema=json.dumps(ENUM_SCHEMA),
                                                  positionalFieldMatching="true").mode("append").save(
        str(tmp_path / "ours" / "enum"))
    for name in ("named", "enum"):
        assert container(tmp_path / "ours" / name) == container(tmp_path / "theirs" / name), name
    assert container(tmp_path / "ours" / "named")[0] == ["ns.x.Rn", "ns.x.Rn.inner"]
