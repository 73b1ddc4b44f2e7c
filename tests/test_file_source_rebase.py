"""Dates and timestamps in the hybrid Julian+Gregorian calendar (Spark 2.x, Spark 3+ LEGACY mode):
the file source reads parquet and avro files as Spark's own readers do, or fails, never shifted."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import textwrap

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import PySparkException
from pyspark.sql.types import ArrayType, DateType, IntegerType, StructField, StructType

from connectors.core.options import OptionError
from connectors.files.source.rebase import CalendarError, FileCalendar, file_mode

FORMAT = "connectors.files"
SPARK_AVRO = "org.apache.spark:spark-avro_2.13:4.2.0"  # as tests/test_file_avro.py
VALUES = """select id, d, ts, cast(ts as timestamp_ntz) as ntz, if(id = 6, null, named_struct('d', d, 'ts', ts)) as s,
    array(d, null) as a, map('k', ts) as m from values
    (1, date'1000-01-01', timestamp'1000-01-01 12:34:56.123456'), (2, date'1582-10-04', timestamp'1582-10-04 23:59:59.999999'),
    (3, date'1582-10-15', timestamp'1899-12-31 23:59:59.999999'), (4, date'0001-01-01', timestamp'0001-01-01 00:00:00'),
    (5, date'2026-11-28', timestamp'1900-01-01 00:00:00'), (6, null, null) as t(id, d, ts)"""
# What the rows hold, as integers (days, microseconds): exact, and the same from Spark's rows and from ours
COLUMNS = ["id", "unix_date(d)", "unix_micros(ts)", "unix_micros(cast(ntz as timestamp))", "unix_date(s.d)",
           "unix_micros(s.ts)", "transform(a, x -> unix_date(x))", "unix_micros(m['k'])"]
# Spark writes them (legacy: hybrid calendar, in the session zone; corrected: as they are) and reads them back
SPARK_SCRIPT = textwrap.dedent("""
    import json, sys
    from connectors.testing.spark import local_session
    root, values, columns = sys.argv[1], sys.argv[3], json.loads(sys.argv[4])
    legacy = {"spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY", "spark.sql.parquet.int96RebaseModeInWrite": "LEGACY",
              "spark.sql.avro.datetimeRebaseModeInWrite": "LEGACY"}
    spark = local_session("spark-rebase", conf={"spark.jars.packages": sys.argv[2], **legacy})
    written = []
    def write(name, zone, kind, conf=()):
        spark.conf.set("spark.sql.session.timeZone", zone)
        for key, value in conf:
            spark.conf.set(key, value)
        df = spark.sql(values)
        # a map makes our avro reader decode with fastavro, whose dates end at 0001-01-01 (Julian 0001-01-01 is before)
        (df.drop("m").write.format("avro") if kind == "avro" else df.write).save(f"{root}/{name}")
        written.append((name, kind))
    write("legacy/int96", "UTC", "parquet")
    write("legacy/avro", "UTC", "avro")
    write("zone/int96", "America/Los_Angeles", "parquet")
    write("zone/avro", "America/Los_Angeles", "avro")
    write("legacy/micros", "UTC", "parquet", [("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")])
    write("zone/micros", "America/Los_Angeles", "parquet")
    write("corrected/micros", "UTC", "parquet", [(key, "CORRECTED") for key in legacy])
    write("corrected/avro", "UTC", "avro")
    out = {}
    for name, kind in written:
        df = spark.read.format(kind).load(f"{root}/{name}")
        out[name] = [list(row) for row in df.selectExpr(*columns[:len(df.columns) + 1]).orderBy("id").collect()]
    print(json.dumps(out))
    spark.stop()
""")


def integers(kind: pa.DataType) -> pa.DataType:
    """``kind`` with its dates and timestamps as their integers."""
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(integers(f.type)) for f in kind])
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(integers(kind.value_type)))
    if pa.types.is_map(kind):
        return pa.map_(kind.key_type, integers(kind.item_type))
    return pa.int32() if pa.types.is_date32(kind) else pa.int64() if pa.types.is_timestamp(kind) else kind


def read_ours(path, kind: str, schema: StructType | None = None) -> list[list]:
    """Our source's rows (in-process, through the data source's reader), as the script selects COLUMNS."""
    from connectors.files.source import reader as source  # noqa: PLC0415

    options = {"fileFormat": "avro" if kind == "avro" else "parquet", "path": str(path)}
    read = source.reader(options, schema or source.schema(options))
    table = pa.Table.from_batches([batch for part in read.partitions() for batch in read.read(part)])
    table = table.cast(pa.schema([f.with_type(integers(f.type)) for f in table.schema]))
    rows = []
    for row in table.to_pylist():
        s, m = row.get("s"), row.get("m")
        whole = [row["id"], row["d"], row.get("ts"), row.get("ntz"), s and s["d"], s and s["ts"], row.get("a"),
                 m and dict(m)["k"]]
        rows.append(whole[:len(row) + 1] if schema is None else [row[f.name] for f in schema.fields])
    return sorted(rows)


def test_files_spark_wrote_in_either_calendar_read_as_spark_reads_them(tmp_path):
    """Spark 4 in LEGACY mode (INT96 and INT64 timestamps, avro; dates and timestamps at top level, in a
    struct, an array, a map) and in CORRECTED mode: the same values as Spark's parquet and avro readers."""
    result = subprocess.run([sys.executable, "-c", SPARK_SCRIPT, str(tmp_path), SPARK_AVRO, VALUES, json.dumps(COLUMNS)],
                            capture_output=True, text=True, timeout=600, env={**os.environ})
    assert result.returncode == 0, result.stderr[-3000:]
    theirs = json.loads(result.stdout.strip().splitlines()[-1])
    assert theirs["legacy/int96"][0][1:3] == [-354285, -30610178703876544]  # 1000-01-01: Spark rebased them
    for name, expected in theirs.items():
        if not name.startswith("zone"):
            assert read_ours(tmp_path / name, name.split("/")[1]) == expected, name

    # Written in another zone: dates are rebased; timestamps before 1900 need that zone's table: refused
    dates = StructType([StructField("id", IntegerType()), StructField("d", DateType()),
                        StructField("a", ArrayType(DateType()))])
    for kind in ("int96", "micros", "avro"):
        name = f"zone/{kind}"
        assert read_ours(tmp_path / name, kind, dates) == [row[:2] + row[6:7] for row in theirs[name]]
        with pytest.raises(CalendarError, match=r"part-\S+: column 'ts' holds timestamps before 1900-01-01T00:00:00Z "
                                                r".* in time zone America/Los_Angeles"):
            read_ours(tmp_path / name, kind)


def as_strings(df) -> list[list[str]]:
    return sorted(map(list, df.selectExpr(*[f"cast({c} as string)" for c in df.columns]).orderBy("id").collect()))


def ours(spark, path, kind: str, **options):
    return spark.read.format(FORMAT).options(fileFormat=kind, **options).load(str(path))


def test_files_not_written_by_spark_follow_the_rebase_options_as_spark(utc_session, tmp_path):
    """No Spark metadata: CORRECTED (the default, Spark 4's) reads them as written; EXCEPTION fails on values the
    calendars disagree on, as Spark's reader; LEGACY rebases dates as Spark does, refuses timestamps of an unknown zone."""
    days = [datetime.date(1000, 1, 1), datetime.date(1582, 10, 14), None, datetime.date(2026, 1, 1)]
    nested = pa.array([{"d": d} for d in days], pa.struct([("d", pa.date32())]))
    pq.write_table(pa.table({"id": [1, 2, 3, 4], "d": days, "s": nested}), tmp_path / "dates.parquet")
    for read in (ours, lambda spark, path, kind, **options: spark.read.options(**options).parquet(str(path))):
        with pytest.raises(PySparkException, match="datetimeRebaseMode"):
            read(utc_session, tmp_path / "dates.parquet", "parquet", datetimeRebaseMode="EXCEPTION").collect()
    for options, first in (({}, "1000-01-01"), ({"datetimeRebaseMode": "LEGACY"}, "0999-12-27")):  # Julian 0999-12-27
        expected = as_strings(utc_session.read.options(**options).parquet(str(tmp_path / "dates.parquet")))
        assert as_strings(ours(utc_session, tmp_path / "dates.parquet", "parquet", **options)) == expected
        assert expected[0][1] == first

    # INT96 timestamps follow int96RebaseMode
    at = pa.array([datetime.datetime(1800, 1, 1), None], pa.timestamp("us"))
    pq.write_table(pa.table({"id": [1, 2], "ts": at}), tmp_path / "int96.parquet", use_deprecated_int96_timestamps=True)
    with pytest.raises(PySparkException, match=r"int96\.parquet: column 'ts' .*int96RebaseMode"):
        ours(utc_session, tmp_path / "int96.parquet", "parquet", int96RebaseMode="EXCEPTION").collect()
    assert as_strings(ours(utc_session, tmp_path / "int96.parquet", "parquet")) == [["1", "1800-01-01 00:00:00"], ["2", None]]
    with pytest.raises(PySparkException, match="a time zone the file does not record"):
        ours(utc_session, tmp_path / "int96.parquet", "parquet", int96RebaseMode="LEGACY").collect()

    with (tmp_path / "dates.avro").open("wb") as handle:
        fastavro.writer(handle, {"type": "record", "name": "r", "fields": [
            {"name": "id", "type": "int"}, {"name": "d", "type": ["null", {"type": "int", "logicalType": "date"}]}]},
                        [{"id": i, "d": d} for i, d in enumerate(days)])
    with pytest.raises(PySparkException, match=r"dates\.avro: column 'd' holds dates before 1582-10-15"):
        ours(utc_session, tmp_path / "dates.avro", "avro", datetimeRebaseMode="EXCEPTION").collect()
    assert as_strings(ours(utc_session, tmp_path / "dates.avro", "avro"))[0][1] == "1000-01-01"
    legacy = as_strings(ours(utc_session, tmp_path / "dates.avro", "avro", datetimeRebaseMode="LEGACY"))
    assert [row[1] for row in legacy] == ["0999-12-27", "1582-10-04", None, "2026-01-01"]


def test_which_files_spark_rebases():
    """DataSourceUtils.getRebaseSpec: Spark's version and marks decide; the option only without a version."""
    assert file_mode({}, "EXCEPTION", "3.0.0", b"org.apache.spark.legacyDateTime") == "EXCEPTION"
    assert file_mode({b"org.apache.spark.version": b"2.4.8"}, "EXCEPTION", "3.0.0", b"x") == "LEGACY"
    assert file_mode({b"org.apache.spark.version": b"3.0.1"}, "LEGACY", "3.1.0", b"org.apache.spark.legacyINT96") == "LEGACY"
    assert file_mode({b"org.apache.spark.version": b"3.5.0"}, "LEGACY", "3.1.0", b"org.apache.spark.legacyINT96") == "CORRECTED"
    marked = {b"org.apache.spark.version": b"4.3.0", b"org.apache.spark.legacyDateTime": b""}
    assert file_mode(marked, "CORRECTED", "3.0.0", b"org.apache.spark.legacyDateTime") == "LEGACY"
    # rebasing a sliced, nested column: only its own values, the nulls kept
    calendar = FileCalendar("f", "LEGACY", "CORRECTED", "UTC")
    kind = pa.list_(pa.struct([("d", pa.date32()), ("t", pa.timestamp("ms", "UTC"))]))
    julian = [[{"d": -354280, "t": -354280 * 86400_000}], None, [None, {"d": None, "t": None}], [{"d": 0, "t": 0}]]
    rebased = calendar.fix(kind, "c")(pa.array(julian, kind).slice(0, 3))
    assert rebased.to_pylist()[1:] == [None, [None, {"d": None, "t": None}]]
    assert rebased.to_pylist()[0][0]["d"] == datetime.date(1000, 1, 1)
    assert rebased.to_pylist()[0][0]["t"] == datetime.datetime(1000, 1, 1, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize("options, error", [
    ({"fileFormat": "csv", "datetimeRebaseMode": "LEGACY"}, "applies to parquet, avro, not csv"),
    ({"fileFormat": "avro", "int96RebaseMode": "LEGACY"}, "applies to parquet, not avro"),
    ({"fileFormat": "parquet", "int96RebaseMode": "JULIAN"}, "expected one of EXCEPTION, CORRECTED, LEGACY"),
])
def test_rebase_options_are_checked(options, error):
    from connectors.files.source.options import FileSourceOptions  # noqa: PLC0415

    with pytest.raises(OptionError, match=error):
        FileSourceOptions.from_options({**options, "path": "/x"})
