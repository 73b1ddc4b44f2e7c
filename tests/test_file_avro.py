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


@pytest.mark.parametrize("codec", ["none", "snappy", "deflate", "zstd"])
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
        assert fastavro.reader(handle).codec == {"none": "null", "zstd": "zstandard"}.get(codec, codec)


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
    with pytest.raises(Exception, match="'compression' = 'gzip': avro takes none, snappy, deflate, zstd"):
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


SPARK_SCRIPT = textwrap.dedent("""
    import json, sys
    from connectors.testing.spark import local_session
    ours, theirs = sys.argv[1], sys.argv[2]
    spark = local_session("spark-avro-interop", conf={"spark.jars.packages": sys.argv[3]})
    df = spark.read.format("avro").option("recursiveFileLookup", "true").load(ours)
    first = df.where("id = 5").first().asDict(recursive=True)
    print(json.dumps({"count": df.count(), "ids": df.selectExpr("sum(id)").first()[0],
                      "schema": df.schema.simpleString(), "first": first}, default=str))
    source = spark.range(1000).selectExpr("id", "cast(id as string) as name", "id / 4 as amount",
                                          "timestamp_micros(1767225600000000 + id) as at",
                                          "if(id % 2 = 0, null, array(id)) as list")
    source.repartition(2).write.format("avro").save(theirs + "/snappy")
    source.write.format("avro").option("compression", "deflate").save(theirs + "/deflate")
    spark.stop()
""")


def test_spark_avro_reads_our_parts_and_we_read_its_files(spark, tmp_path):
    """Spark's own ``avro`` format (spark-avro), in its own Spark process, reads what our sink
    wrote; our source reads what Spark's avro writer wrote (snappy and deflate)."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    spark.createDataFrame(rows(range(300)), DDL).write.format(FORMAT).options(fileFormat="avro", partSuffix=".avro") \
        .mode("append").save(str(ours))
    result = subprocess.run([sys.executable, "-c", SPARK_SCRIPT, str(ours), str(theirs), SPARK_AVRO],
                            capture_output=True, text=True, timeout=600, env={**os.environ})
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["count"] == 300 and seen["ids"] == sum(range(300))
    assert seen["schema"] == ("struct<id:bigint,name:string,amount:double,at:timestamp,day:date,price:decimal(10,2),"
                              "tags:array<string>,attrs:map<string,int>,inner:struct<x:int,y:string>>")
    assert seen["first"]["name"] == "n5" and seen["first"]["price"] == "0.05" and seen["first"]["inner"] == {
        "x": 5, "y": "y5"}

    for codec in ("snappy", "deflate"):
        df = spark.read.format(FORMAT).option("fileFormat", "avro").load(str(theirs / codec))
        assert df.schema.simpleString() == "struct<id:bigint,name:string,amount:double,at:timestamp,list:array<bigint>>"
        got = sorted(df.collect())
        assert [r.id for r in got] == list(range(1000))
        assert got[3].name == "3" and got[3].amount == 0.75 and got[3].list == [3] and got[2].list is None
        assert got[1].at == datetime.datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=datetime.timezone.utc).astimezone(
            ).replace(tzinfo=None)


def test_a_range_owns_the_block_that_starts_exactly_at_its_start():
    from connectors.files.source.formats import _after_sync  # noqa: PLC0415

    sync = bytes(range(16))
    data = b"h" * 40 + sync + b"block-1" + sync + b"block-2" * 200000 + sync
    begin_1, begin_2 = 56, 56 + 7 + 16
    assert _after_sync(io.BytesIO(data), begin_1, sync, len(data)) == begin_1
    assert _after_sync(io.BytesIO(data), begin_1 + 1, sync, len(data)) == begin_2
    assert _after_sync(io.BytesIO(data), begin_2 + 1, sync, len(data)) == len(data)  # found past a 1 MiB chunk
    assert _after_sync(io.BytesIO(data + b"tail"), len(data) + 1, sync, len(data) + 4) == len(data) + 4
