"""connectors.jdbc through Spark against the real PostgreSQL: batch and streaming writes, types,
upsert, custom SQL, foreachBatch, odd names, errors at query start, a connection killed inside a
task, and crash recovery (SIGKILL mid-batch, restart)."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import psycopg2
import pytest
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connectors.core.options import OptionError
from connectors.jdbc import JdbcConnectionOptions, JdbcExecutionOptions, JdbcSink
from connectors.testing.spark import run_available_now

UTC = dt.timezone.utc


def rows(pg, query: str) -> list[tuple]:
    pg.execute(query)
    return pg.fetchall()


def write(df, dsn: str, **options) -> None:
    df.write.format("connectors.jdbc").option("url", dsn).options(**options).mode("append").save()


def numbers(spark, end: int, rows_per_batch: int, partitions: int = 2):
    return (
        spark.readStream.format("connectors.numbers").option("end", end).option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", partitions).load()
        .selectExpr("value AS id", "concat('n', value) AS name")
    )  # fmt: skip


SCALARS = StructType([
    StructField("b", BooleanType()), StructField("i", ShortType()), StructField("l", LongType()),
    StructField("f", FloatType()), StructField("d", DoubleType()), StructField("dec", DecimalType(12, 3)),
    StructField("s", StringType()), StructField("dt", DateType()), StructField("ts", TimestampType()),
    StructField("ntz", TimestampNTZType()), StructField("f8", FloatType()),
])  # fmt: skip
SCALAR_ROWS = [
    (True, 7, 2**62, 0.5, 0.1 + 0.2, Decimal("-12.345"), 'a,"b"\nc\\d', dt.date(2024, 2, 29),
     dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), dt.datetime(2024, 1, 2, 3, 4, 5, 6), 0.10000000149011612),
    (False, -1, -5, float("inf"), float("nan"), Decimal("0.000"), "", dt.date(1970, 1, 1),
     dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC), dt.datetime(2000, 1, 1), 3.4028234663852886e38),
    (None,) * 11,
]  # fmt: skip
SCALAR_DDL = """b boolean, i smallint, l bigint, f real, d double precision, dec numeric(12,3), s text, dt date,
                ts timestamptz, ntz timestamp, f8 double precision"""  # f8: a float's exact value (0.1f is not 0.1)


# into jsonb as Spark's to_json writes it, with every digit; a map within a struct is an object too
OBJECT = StructType([
    StructField("k", StringType()), StructField("n", DecimalType(20, 10)), StructField("f", DoubleType()),
    StructField("t", TimestampNTZType()), StructField("b", BinaryType()),
    StructField("m", MapType(StringType(), DateType())),
])  # fmt: skip
OBJECT_ROWS = [("v", Decimal("12.3456789012"), float("nan"), dt.datetime(2024, 1, 2, 3, 4, 5, 6), b"\x00\xff",
                {"x": dt.date(1, 1, 1)}), ("", None, float("-inf"), None, None, {})]  # fmt: skip
OBJECT_JSON = [
    {"k": "v", "n": 12.3456789012, "f": "NaN", "t": "2024-01-02T03:04:05.000006", "b": "AP8=",
     "m": {"x": "0001-01-01"}},
    {"k": "", "n": None, "f": "-Infinity", "t": None, "b": None, "m": {}},
]


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("path", [pytest.param("binary-copy", marks=pytest.mark.smoke), "csv-copy", "insert"])
def test_batch_append_round_trips_every_type(spark, postgres_dsn, pg, unique, path):
    schema, data, ddl = SCALARS, SCALAR_ROWS, SCALAR_DDL
    if path == "csv-copy":  # a string into uuid has no binary form: with it, COPY is CSV
        schema = StructType([*SCALARS.fields, StructField("u", StringType())])
        uuids = ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "00000000-0000-0000-0000-000000000000", None]
        data = [(*row, u) for row, u in zip(SCALAR_ROWS, uuids, strict=True)]
        ddl += ", u uuid"
    if path == "insert":  # binary, arrays and JSON take the multi-row INSERT path instead of COPY
        schema = StructType([*SCALARS.fields, StructField("bin", BinaryType()), StructField("arr", ArrayType(IntegerType())),
                             StructField("obj", OBJECT),
                             StructField("m", MapType(StringType(), LongType()))])  # fmt: skip
        data = [
            (*SCALAR_ROWS[0], b"\x00\xff,", [1, None, 3], OBJECT_ROWS[0], {"x": 1}),
            (*SCALAR_ROWS[1], b"", [], OBJECT_ROWS[1], {}),
            (None,) * 15,
        ]
        ddl += ", bin bytea, arr integer[], obj jsonb, m json"
    pg.execute(f"CREATE TABLE {unique} (row_no serial, {ddl})")
    write(spark.createDataFrame(data, schema).coalesce(1), postgres_dsn, dbtable=unique)
    names = ", ".join(schema.names)
    got = rows(pg, f"SELECT {names} FROM {unique} ORDER BY row_no")
    expected = [list(r) for r in data]
    if path == "insert":
        expected[0][11:] = [b"\x00\xff,", [1, None, 3], OBJECT_JSON[0], {"x": 1}]
        expected[1][11:] = [b"", [], OBJECT_JSON[1], {}]
    for got_row, want in zip(got, expected, strict=True):
        got_row = [bytes(v) if isinstance(v, memoryview) else v for v in got_row]
        diffs = [(n, g, w) for n, g, w in zip(schema.names, got_row, want, strict=True) if not same(g, w)]
        assert not diffs


@pytest.mark.smoke
def test_stream_exactly_once_prunes_progress_and_resumes(spark, postgres_dsn, pg, unique, tmp_path):
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY, name text NOT NULL)")
    checkpoint = str(tmp_path / "cp")
    for end in (2999, 4999):  # the second run continues from the checkpoint
        query = run_available_now(
            numbers(spark, end, 1000).writeStream.format("connectors.jdbc").option("url", postgres_dsn)
            .option("dbtable", unique).option("batchSize", 300).option("checkpointLocation", checkpoint)
        )  # fmt: skip
        query.awaitTermination(300)
        assert query.exception() is None
    assert rows(pg, f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {unique}") == [(5000, 5000, 0, 4999)]
    sink_id = f"{query.id}:\"public\".\"{unique}\""
    # batches 0-3 were pruned by the commits of later batches; the last one (4) stays
    assert rows(pg, f"SELECT batch_id, partition_id, row_count FROM connectors_jdbc_progress WHERE sink_id = '{sink_id}' ORDER BY 2") == [
        (4, 0, 500), (4, 1, 500)
    ]


def test_upsert_last_row_wins_with_primary_key_default(spark, postgres_dsn, pg, unique, tmp_path):
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY, name text, touched boolean DEFAULT true)")
    pg.execute(f"INSERT INTO {unique} (id, name, touched) VALUES (5, 'old', false), (500, 'other', false)")
    query = (
        numbers(spark, 999, 400, partitions=1).selectExpr("id % 100 AS id", "name")
        .writeStream.format("connectors.jdbc").option("url", postgres_dsn).option("dbtable", unique)
        .option("mode", "upsert").option("batchSize", 150).option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(300)
    assert query.exception() is None
    got = dict(rows(pg, f"SELECT id, name FROM {unique}"))
    assert got == {**{k: f"n{900 + k}" for k in range(100)}, 500: "other"}
    assert rows(pg, f"SELECT touched FROM {unique} WHERE id = 5") == [(False,)]  # not in the input: untouched


def test_upsert_composite_key_columns(spark, postgres_dsn, pg, unique):
    pg.execute(f"CREATE TABLE {unique} (a int, b text, v text, UNIQUE (b, a))")
    df = spark.createDataFrame([(1, "x", "first"), (1, "y", "y"), (1, "x", "second")], "a int, b string, v string")
    write(df.coalesce(1), postgres_dsn, dbtable=unique, mode="upsert", keyColumns="a,b")
    assert sorted(rows(pg, f"SELECT a, b, v FROM {unique}")) == [(1, "x", "second"), (1, "y", "y")]


def test_custom_sql_runs_once_per_row_exactly_once(spark, postgres_dsn, pg, unique):
    pg.execute(f"CREATE TABLE {unique} (id int PRIMARY KEY, total bigint, note text)")
    statement = (
        f"INSERT INTO {unique} (id, total, note) VALUES (:key, :amount, 'a:b %') "
        f"ON CONFLICT (id) DO UPDATE SET total = {unique}.total + EXCLUDED.total"
    )
    df = spark.range(0, 1000, 1, 3).selectExpr("CAST(id % 10 AS INT) AS key", "id AS amount")
    write(df, postgres_dsn, sql=statement, batchSize=128)
    expected = {k: sum(range(k, 1000, 10)) for k in range(10)}
    assert {k: t for k, t, _ in rows(pg, f"SELECT id, total, note FROM {unique}")} == expected
    assert rows(pg, f"SELECT DISTINCT note FROM {unique}") == [("a:b %",)]


def test_foreach_batch_sink_with_typed_options(spark, postgres_dsn, pg, unique, tmp_path):
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY, name text)")
    sink = JdbcSink(
        connection=JdbcConnectionOptions(url=postgres_dsn),
        execution=JdbcExecutionOptions(batch_size=250, max_retries=2),
        dbtable=unique,
    )
    assert "connectors:connectors@" not in repr(sink)
    query = (
        numbers(spark, 1999, 700).writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(300)
    assert query.exception() is None
    assert rows(pg, f"SELECT count(*), count(DISTINCT id) FROM {unique}") == [(2000, 2000)]
    pg.execute(f"SELECT DISTINCT batch_id FROM connectors_jdbc_progress WHERE sink_id = '{query.id}:\"public\".\"{unique}\"'")
    assert pg.fetchall() == [(2,)]  # keyed by the streaming query like the format, pruned the same way


def test_foreach_batch_without_a_query_id_needs_a_sink_id_then_writes_once(spark, postgres_dsn, pg, unique):
    # Called outside a streaming query, as under Spark Connect: no query id to key progress rows by.
    pg.execute(f"CREATE TABLE {unique} (id bigint)")  # no key: a second write would show
    pg.execute(f"CREATE TABLE {unique}_b (id bigint)")
    df = spark.range(0, 100, 1, 2)
    with pytest.raises(OptionError, match="option 'sinkId': required for exactly-once where the streaming query id"):
        JdbcSink(url=postgres_dsn, dbtable=unique)(df, 3)
    with pytest.raises(OptionError, match="option 'sinkId' = '': must not be empty"):
        JdbcSink(url=postgres_dsn, dbtable=unique, sinkId="")
    assert rows(pg, f"SELECT count(*) FROM {unique}") == [(0,)]
    sink = JdbcSink(url=postgres_dsn, dbtable=unique, sinkId=unique)
    sink(df, 3)
    sink(df, 3)  # batch 3 again: a replay
    assert rows(pg, f"SELECT count(*), count(DISTINCT id) FROM {unique}") == [(100, 100)]
    # the same sinkId writing another table is another sink: its batch 3 is not the first one's
    JdbcSink(url=postgres_dsn, dbtable=f"{unique}_b", sinkId=unique)(df, 3)
    assert rows(pg, f"SELECT count(*), count(DISTINCT id) FROM {unique}_b") == [(100, 100)]
    JdbcSink(url=postgres_dsn, dbtable=f"{unique}_b", deliveryGuarantee="at-least-once")(df, 4)  # needs no id
    assert rows(pg, f"SELECT count(*) FROM {unique}_b") == [(200,)]


def test_a_replay_whose_rows_moved_between_partitions_fails_instead_of_duplicating_silently(spark, postgres_dsn, pg,
                                                                                             unique):
    # Batch 5 committed both partitions, then the driver died before Spark's commit log: the batch
    # runs again, its rows now cut into partitions differently (a source's partition count, a
    # repartition changed before the restart). No partition's own check sees it: partition 0 begins
    # with the rows it committed, and a partition that is now empty reads nothing. The commit must.
    from connectors.jdbc.task_writer import JdbcWriteError

    for name, replay in [("fewer", spark.range(0, 100, 1, 1)),  # partition 0: 0..99, no partition 1
                         ("moved", spark.range(0, 100, 1, 1).union(spark.range(0, 0, 1, 1)))]:  # 1 now empty
        table = f"{unique}_{name}"
        pg.execute(f"CREATE TABLE {table} (id bigint)")  # no key: a row written twice stays twice
        sink = JdbcSink(url=postgres_dsn, dbtable=table, sinkId=unique)
        sink(spark.range(0, 100, 1, 2), 5)  # partition 0: 0..49, partition 1: 50..99
        assert rows(pg, f"SELECT count(*), count(DISTINCT id) FROM {table}") == [(100, 100)]
        for _ in range(2):  # and every time the batch runs again, until someone looks
            with pytest.raises(JdbcWriteError, match="batch 5 was re-executed with other rows per partition than it "
                                                     r"first committed \(partition 1: 50 rows committed, 0 now\)"):
                sink(replay, 5)
    keyed = f"{unique}_upsert"  # an upsert writes a moved row again by its key: nothing twice, no failure
    pg.execute(f"CREATE TABLE {keyed} (id bigint PRIMARY KEY)")
    sink = JdbcSink(url=postgres_dsn, dbtable=keyed, sinkId=f"{unique}_u", mode="upsert")
    sink(spark.range(0, 100, 1, 2), 5)
    sink(spark.range(0, 100, 1, 1), 5)
    assert rows(pg, f"SELECT count(*), count(DISTINCT id) FROM {keyed}") == [(100, 100)]


def test_odd_table_schema_and_column_names(spark, postgres_dsn, pg, unique):
    schema_name, table_name = f"Odd {unique}", 'we"ird.name'
    pg.execute(f'CREATE SCHEMA "{schema_name}"')
    pg.execute(f'CREATE TABLE "{schema_name}"."we""ird.name" ("Id" bigint PRIMARY KEY, "the value" text)')
    df = spark.createDataFrame([(1, "a"), (2, "b")], "`Id` long, `the value` string")
    dbtable = f'"{schema_name}"."we""ird.name"'
    write(df, postgres_dsn, dbtable=dbtable, progressTable=f'"{schema_name}"."progress ""x"""')
    write(df.selectExpr("Id", "'c' AS `the value`"), postgres_dsn, dbtable=dbtable, mode="upsert")
    assert sorted(rows(pg, f'SELECT "Id", "the value" FROM "{schema_name}"."we""ird.name"')) == [(1, "c"), (2, "c")]
    assert rows(pg, f"SELECT to_regclass('\"{schema_name}\".\"progress \"\"x\"\"\"') IS NOT NULL") == [(True,)]
    assert table_name  # the name really contains a quote and a dot


def test_a_missing_table_is_created_as_spark_creates_it(spark, postgres_dsn, pg, unique):
    """Spark's PostgreSQL column types, but timestamptz for an instant and jsonb for structs and maps;
    NOT NULL for a column that is not nullable; createTableColumnTypes and createTableOptions; an
    upsert's keyColumns as the primary key."""
    df = spark.sql("""
        SELECT id, CAST(id AS INT) AS i, CAST(id AS SMALLINT) AS s, CAST(id AS FLOAT) AS f, id * 1.5d AS d,
               CAST(id AS DECIMAL(10,2)) AS dec, CONCAT('n', id) AS name, BINARY('x') AS b, id % 2 = 0 AS flag,
               DATE'2024-01-01' AS day, TIMESTAMP'2024-01-01 10:00:00' AS ts, TIMESTAMP_NTZ'2024-01-01 10:00:00' AS ntz,
               ARRAY(id, 2) AS arr, NAMED_STRUCT('a', id) AS st, MAP('k', id) AS m, IF(id = 1, NULL, 'x') AS maybe
        FROM range(3)""")
    write(df, postgres_dsn, dbtable=unique, createTableColumnTypes="name varchar(8)",
          createTableOptions="WITH (fillfactor = 70)")
    columns = rows(pg, f"SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
                       f"WHERE attrelid = '{unique}'::regclass AND attnum > 0 ORDER BY attnum")
    assert columns == [
        ("id", "bigint", True), ("i", "integer", True), ("s", "smallint", True), ("f", "real", True),
        ("d", "double precision", True), ("dec", "numeric(10,2)", False), ("name", "character varying(8)", True),
        ("b", "bytea", True), ("flag", "boolean", False), ("day", "date", True),
        ("ts", "timestamp with time zone", True), ("ntz", "timestamp without time zone", True),
        ("arr", "bigint[]", True), ("st", "jsonb", True), ("m", "jsonb", True), ("maybe", "text", False)]
    assert rows(pg, f"SELECT reloptions FROM pg_class WHERE oid = '{unique}'::regclass") == [(["fillfactor=70"],)]
    assert rows(pg, f"SELECT count(*), sum(i), min(st->>'a') FROM {unique}") == [(3, 3, "0")]
    upserted = f"{unique}_u"
    for value in ("v", "w"):
        write(spark.range(3).selectExpr("id", f"CONCAT('{value}', id) AS v"), postgres_dsn, dbtable=upserted,
              mode="upsert", keyColumns="id")
    assert rows(pg, f"SELECT * FROM {upserted} ORDER BY id") == [(0, "w0"), (1, "w1"), (2, "w2")]


def test_constraint_violation_names_the_constraint_and_leaves_no_partial_partition(spark, postgres_dsn, pg, unique):
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY, amount int CHECK (amount >= 0))")
    df = spark.range(0, 5000, 1, 1).selectExpr("id", "CAST(IF(id = 4321, -1, 1) AS INT) AS amount")
    with pytest.raises(PySparkException) as info:
        write(df, postgres_dsn, dbtable=unique, batchSize=500)
    assert f'constraint "{unique}_amount_check"' in str(info.value)
    assert rows(pg, f"SELECT count(*) FROM {unique}") == [(0,)]


@pytest.mark.parametrize(
    "ddl, select, options, message",
    [
        ("id int", "CAST(id AS STRING) AS id", {}, "input column 'id' (string) cannot be written to column \"id\" (integer)"),
        ("id bigint, name text NOT NULL", "id", {}, 'table column "name" is NOT NULL without a default but not in the input'),
        ("id bigint", "id, id AS extra", {}, "input column 'extra' is not in the table (its columns: id)"),
        ("id bigint", "id", {"dbtable": "{t}_new", "mode": "upsert"}, "_new': no such table: give keyColumns"),
        ("id bigint", "id", {"dbtable": "{t}_new", "createTableColumnTypes": "nope int"},
         "option 'createTableColumnTypes' = 'nope int': no input column 'nope'"),
        ("id bigint", "id", {"dbtable": "{t}_new", "createTableColumnTypes": "id notatype"},
         'creating the missing table failed: type "notatype" does not exist'),
        ("id bigint", "array(array(id)) AS a", {"dbtable": "{t}_new"},
         "input column 'a' (array<array<bigint>>) has no PostgreSQL type to create it with"),
        ("id bigint", "id", {"mode": "upsert"}, "option 'keyColumns': required for upsert: the table has no primary key"),
        ("id bigint, v int", "id, 1 AS v", {"mode": "upsert", "keyColumns": "v"}, "no primary key or unique index on exactly (v)"),
        ("id bigint", "id", {"sql": "INSERT INTO {t} VALUES (:nope)"}, "parameter(s) :nope name no input column"),
        ("id bigint", "id", {"sql": "INSERT INTO {t} VALUS (:id)"}, "PostgreSQL rejects the statement: syntax error"),
        ("id bigint", "id", {"dbtable": "a; DROP TABLE x"}, "expected table, schema.table or \"Quoted Name\""),
        ("id bigint", "id", {"batchSize": "lots"}, "option 'batchSize' = 'lots': expected an integer"),
    ],
)
def test_mistakes_fail_at_query_start(spark, postgres_dsn, pg, unique, ddl, select, options, message):
    pg.execute(f"CREATE TABLE {unique} ({ddl})")
    options = {key: value.replace("{t}", unique) for key, value in options.items()}
    if "sql" not in options:
        options.setdefault("dbtable", unique)
    with pytest.raises(AnalysisException) as info:  # raised while planning: no task ran
        write(spark.range(3).selectExpr(*select.split(", ")), postgres_dsn, **options)
    assert message.lower() in str(info.value).lower()


def test_wrong_password_fails_at_start_without_showing_it(spark, postgres_dsn, unique):
    secret = "n0t-the-Passw0rd"
    with pytest.raises(AnalysisException) as info:
        write(spark.range(1), postgres_dsn, dbtable=unique, password=secret)
    assert "cannot connect" in str(info.value) and "password authentication failed" in str(info.value)
    assert secret not in str(info.value)
    url = postgres_dsn.replace("connectors:connectors@", f"connectors:{secret}@")
    with pytest.raises(AnalysisException) as info:
        spark.range(1).write.format("connectors.jdbc").option("url", url).option("dbtable", "x").option("sink", "1").mode("append").save()
    assert secret not in str(info.value) and "unknown option" in str(info.value)


def test_password_not_in_stream_explain_or_progress(spark, postgres_dsn, pg, unique, tmp_path):
    pg.execute(f"CREATE TABLE {unique} (id bigint)")
    user, _, rest = postgres_dsn.removeprefix("postgresql://").partition(":")
    password = rest.partition("@")[0]
    url = postgres_dsn.replace(f"{user}:{password}@", "")
    query = (
        spark.readStream.format("connectors.numbers").option("end", 9).load().selectExpr("value AS id")
        .writeStream.format("connectors.jdbc").option("url", url).option("user", user).option("password", password)
        .option("dbtable", unique).option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(300)
    assert query.exception() is None and rows(pg, f"SELECT count(*) FROM {unique}") == [(10,)]
    shown = query._jsq.explainInternal(True) + str(query.lastProgress) + str(query.recentProgress)
    assert f"password={password}" not in shown.lower() and f"'{password}'" not in shown


def test_connection_killed_inside_a_spark_task_is_retried(spark, postgres_dsn, pg, unique):
    """pg_terminate_backend on the sink's connection while its transaction is open: the task
    reconnects, resends the partition and commits it once."""
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY)")
    app, dsn = unique, postgres_dsn

    def kill_after_first_rows(batches):
        import time

        import psycopg2 as pg2
        import pyarrow as pa

        # Between this worker and the sink's, Spark buffers (64 KiB streams, 10000-row Arrow
        # batches): pass plenty of rows on before the kill, so the sink is mid-transaction.
        table = pa.Table.from_batches(list(batches))
        yield from table.slice(0, 200_000).to_batches()
        admin = pg2.connect(dsn)
        admin.autocommit = True  # pg_stat_activity is one snapshot per transaction (and `with` opens one)
        try:
            cursor, deadline = admin.cursor(), time.monotonic() + 120
            while time.monotonic() < deadline:
                cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                               "WHERE application_name = %s AND backend_xid IS NOT NULL", (app,))  # fmt: skip
                if cursor.fetchall():
                    break
                time.sleep(0.05)
            else:
                raise AssertionError("the sink never opened its transaction")
        finally:
            admin.close()
        yield from table.slice(200_000).to_batches()

    df = spark.range(0, 300_000, 1, 1).mapInArrow(kill_after_first_rows, "id long")
    write(df, f"{postgres_dsn}?application_name={app}", dbtable=unique, batchSize=10000)
    assert rows(pg, f"SELECT count(*), count(DISTINCT id) FROM {unique}") == [(300_000, 300_000)]


def count_table(dsn: str, table: str) -> tuple[int, int, int]:
    """Rows, distinct ids, and rows whose decimal ``amount`` arrived as ``id * 0.25``."""
    with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE amount = id * 0.25) FROM {table}")
        return cursor.fetchone()


@pytest.mark.crash
@pytest.mark.parametrize("isolation, end, kills", [("READ_UNCOMMITTED", 5999, 2), ("SERIALIZABLE", 2999, 1)])
def test_sigkill_mid_batch_format_exactly_once(crash_harness, postgres_dsn, pg, unique, isolation, end, kills):
    pg.execute(f"CREATE TABLE {unique} (id bigint, name text, amount numeric(20, 2))")  # no key: a duplicate would count
    harness = crash_harness("jobs.jdbc:numbers_to_postgres", url=postgres_dsn, table=unique, end=end,
                            rows_per_batch=1000, foreach_batch=False, isolation_level=isolation)  # fmt: skip
    report = harness.run(kills=kills, kill_at="mid-batch", seed=11)
    assert report.kills == kills
    assert count_table(postgres_dsn, unique) == (end + 1,) * 3


@pytest.mark.crash
def test_sigkill_mid_batch_foreach_batch_exactly_once(crash_harness, postgres_dsn, pg, unique):
    pg.execute(f"CREATE TABLE {unique} (id bigint, name text, amount double precision)")
    harness = crash_harness("jobs.jdbc:numbers_to_postgres", url=postgres_dsn, table=unique, end=3999,
                            rows_per_batch=1000, foreach_batch=True)  # fmt: skip
    report = harness.run(kills=1, kill_at="mid-batch", seed=5)
    assert report.kills == 1
    assert count_table(postgres_dsn, unique) == (4000, 4000, 4000)


def overwrite(df, dsn: str, **options) -> None:
    df.write.format("connectors.jdbc").option("url", dsn).options(**options).mode("overwrite").save()


def staging_tables(pg, unique: str) -> list[tuple]:
    return rows(pg, f"SELECT relname FROM pg_class WHERE relname LIKE '{unique}__overwrite_%'")


def test_overwrite_replaces_the_table_at_the_job_commit(spark, postgres_dsn, pg, unique):
    """truncate=false (Spark's default) recreates the table from the DataFrame's schema; truncate=true
    keeps it (its key, its other columns' defaults) and replaces the rows; a missing table is created."""
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY, v text, made timestamptz DEFAULT now())")
    pg.execute(f"INSERT INTO {unique} (id, v) SELECT g, 'old' FROM generate_series(1, 5) g")
    overwrite(spark.range(10, 13).selectExpr("id", "'new' AS v"), postgres_dsn, dbtable=unique, truncate="true")
    assert rows(pg, f"SELECT id, v, made IS NOT NULL FROM {unique} ORDER BY id") == [(i, "new", True) for i in (10, 11, 12)]
    assert rows(pg, f"SELECT count(*) FROM pg_index WHERE indrelid = '{unique}'::regclass AND indisprimary") == [(1,)]
    overwrite(spark.range(2).selectExpr("CAST(id AS INT) AS n"), postgres_dsn, dbtable=unique)
    assert rows(pg, f"SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                    f"WHERE attrelid = '{unique}'::regclass AND attnum > 0 AND NOT attisdropped") == [("n", "integer")]
    assert rows(pg, f"SELECT n FROM {unique} ORDER BY n") == [(0,), (1,)]
    overwrite(spark.range(2), postgres_dsn, dbtable=f"{unique}_new", truncate="true")
    assert rows(pg, f"SELECT count(*) FROM {unique}_new") == [(2,)]
    assert staging_tables(pg, unique) == []


@pytest.mark.parametrize("truncate", ["false", "true"])
def test_a_failed_overwrite_leaves_the_old_rows(spark, postgres_dsn, pg, unique, truncate):
    """Spark's writer empties the table before it writes; here a job that fails (a task's error, or
    the table's own CHECK refusing a row at the commit) leaves the table as it was, and no staging table."""
    pg.execute(f"CREATE TABLE {unique} (id bigint, v text CHECK (v <> 'bad'))")
    pg.execute(f"INSERT INTO {unique} VALUES (1, 'old')")
    failing = spark.range(0, 10, 1, 2).selectExpr("id", "IF(id = 7, raise_error('boom'), 'x') AS v")
    with pytest.raises(Exception, match="boom"):
        overwrite(failing, postgres_dsn, dbtable=unique, truncate=truncate)
    if truncate == "true":
        with pytest.raises(Exception, match=f'constraint "{unique}_v_check"'):
            overwrite(spark.range(3).selectExpr("id", "IF(id = 2, 'bad', 'x') AS v"), postgres_dsn,
                      dbtable=unique, truncate=truncate)
    assert rows(pg, f"SELECT * FROM {unique}") == [(1, "old")]
    assert staging_tables(pg, unique) == []


@pytest.mark.crash
def test_overwrite_killed_at_every_step_shows_old_or_new_rows(crash_harness, postgres_dsn, pg, unique):
    """SIGKILL while the partitions go into the staging table, before the swap and after it: the
    table holds exactly its old rows or exactly the new ones after every kill; the last run ends
    with the new ones, and the staging tables the kills before the swap left are dropped by the
    runs after them."""
    end, old, new = 999, [(-i,) for i in range(5, 0, -1)], [(i,) for i in range(1000)]
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY)")
    pg.execute(f"INSERT INTO {unique} SELECT -g FROM generate_series(1, 5) g")
    harness = crash_harness("jobs.jdbc:overwrite_postgres", url=postgres_dsn, table=unique, end=end)
    seen = []

    def old_or_new(point: str) -> None:
        held = rows(pg, f"SELECT id FROM {unique} ORDER BY id")
        seen.append((point, "old" if held == old else "new" if held == new else held))
        assert held in (old, new), f"after the kill at {point} the table holds {len(held)} rows: {held[:5]}..."

    report = harness.run_faults(["jdbc.task.after_commit:2", "jdbc.overwrite.staged:1", "jdbc.overwrite.swapped:1"],
                                check=old_or_new)
    assert report.kills == 3
    assert [state for _, state in seen] == ["old", "old", "new"]
    assert rows(pg, f"SELECT id FROM {unique} ORDER BY id") == new
    assert staging_tables(pg, unique) == []


@pytest.mark.crash
def test_overwrite_drops_the_staging_table_of_a_dead_job_never_of_a_live_one(spark, postgres_dsn, pg, unique,
                                                                               tmp_path):
    """Job A stops at its commit, every row in its staging table: an overwrite meanwhile replaces
    the table and leaves A's staging table (A's lease is held). Then A's driver is SIGKILLed: the
    next overwrite drops A's staging table, and the table holds exactly that overwrite's rows."""
    from connectors.jdbc.lease import lock_key
    from connectors.testing import faults

    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY)")
    spec = json.dumps({"job": "jobs.jdbc:overwrite_postgres", "args": {"url": postgres_dsn, "table": unique, "end": 999},
                       "checkpoint": str(tmp_path / "checkpoint"), "events": str(tmp_path / "events"), "master": None})
    # held at the point until "never" gets there too, i.e. until killed (at most HOLD_SECONDS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
           faults.ENV: f"jdbc.overwrite.staged:1:{unique},never", faults.DIR_ENV: str(tmp_path / "faults")}
    with open(tmp_path / "job.log", "w") as log:
        job = subprocess.Popen([sys.executable, "-m", "connectors.testing.crash", spec], env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (tmp_path / "faults" / "jdbc.overwrite.staged.held").exists():
            assert job.poll() is None and time.monotonic() < deadline, f"job A never got to its commit: {tmp_path}"
            time.sleep(0.1)
        [(staged,)] = staging_tables(pg, unique)
        assert rows(pg, f"SELECT count(*) FROM {staged}") == [(1000,)]
        overwrite(spark.range(2000, 2003), postgres_dsn, dbtable=unique, truncate="true")
        assert rows(pg, f"SELECT id FROM {unique} ORDER BY id") == [(2000,), (2001,), (2002,)]
        assert staging_tables(pg, unique) == [(staged,)]
    finally:
        faults.kill_session(job.pid)
        job.wait()
    # the holder sees the driver gone within a poll (a second)
    held = f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND (classid::bigint << 32 | objid::bigint) = {lock_key(staged)}"
    deadline = time.monotonic() + 10
    while rows(pg, held) != [(0,)]:
        assert time.monotonic() < deadline, "the dead job's lease is still held"
        time.sleep(0.1)
    overwrite(spark.range(5, 7), postgres_dsn, dbtable=unique, truncate="true")
    assert rows(pg, f"SELECT id FROM {unique} ORDER BY id") == [(5,), (6,)]
    assert staging_tables(pg, unique) == []


def test_overwrite_refuses_what_it_cannot_replace(spark, postgres_dsn, pg, unique, tmp_path):
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY)")
    with pytest.raises(AnalysisException, match="save mode overwrite takes an appending write to a dbtable"):
        overwrite(spark.range(3), postgres_dsn, dbtable=unique, mode="upsert")
    with pytest.raises(AnalysisException, match="input column 'x' is not in the table"):
        overwrite(spark.range(3).selectExpr("id", "id AS x"), postgres_dsn, dbtable=unique, truncate="true")
    query = (spark.readStream.format("connectors.numbers").option("end", 3).load().groupBy().count()
             .writeStream.format("connectors.jdbc").option("url", postgres_dsn).option("dbtable", unique)
             .option("checkpointLocation", str(tmp_path / "cp")).outputMode("complete").start())
    with pytest.raises(Exception, match="only appending streams are supported"):
        query.awaitTermination(120)
    assert staging_tables(pg, unique) == [] and rows(pg, f"SELECT count(*) FROM {unique}") == [(0,)]


def test_spark_session_options_hold_in_the_tasks_and_the_overwrite_commit(spark, postgres_dsn, pg, unique):
    """Spark's isolationLevel and sessionInitStatement, seen by a trigger in the tasks' transactions
    (append) and the driver's (the overwrite's commit); cascadeTruncate empties a referencing table."""
    pg.execute(f"CREATE TABLE {unique}_seen (isolation text, init text)")
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY)")
    pg.execute(f"CREATE TABLE {unique}_child (id bigint REFERENCES {unique}); INSERT INTO {unique} VALUES (1); "
               f"INSERT INTO {unique}_child VALUES (1)")  # fmt: skip
    pg.execute(f"CREATE FUNCTION {unique}_probe() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO "
               f"{unique}_seen VALUES (current_setting('transaction_isolation'), current_setting('probe.init', true)); "
               f"RETURN NULL; END $$; CREATE TRIGGER probe AFTER INSERT ON {unique} EXECUTE FUNCTION {unique}_probe()")
    options = {"dbtable": unique, "isolationLevel": "SERIALIZABLE", "sessionInitStatement": "SET probe.init = 'yes'"}
    write(spark.range(2, 6, 1, 2), postgres_dsn, **options)
    overwrite(spark.range(10, 12), postgres_dsn, truncate="true", cascadeTruncate="true", **options)
    assert rows(pg, f"SELECT id FROM {unique} ORDER BY id") == [(10,), (11,)]
    assert rows(pg, f"SELECT count(*) FROM {unique}_child") == [(0,)]
    assert rows(pg, f"SELECT isolation, init, count(*) FROM {unique}_seen GROUP BY 1, 2") == [("serializable", "yes", 3)]
