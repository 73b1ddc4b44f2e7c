"""connectors.jdbc without Spark: options, SQL parsing, and the partition writer against the real
PostgreSQL (the exact code a Spark task runs): transactions, retries after a killed connection or
a restarted server, exactly-once skips, constraint violations."""

from __future__ import annotations

import decimal
import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    FloatType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from connectors.core.digest import arrow_digest
from connectors.core.options import OptionError
from connectors.jdbc import JdbcConnectionOptions, JdbcExecutionOptions, JdbcSinkOptions
from connectors.jdbc import lease
from connectors.jdbc.exactly_once import ProgressKey
from connectors.jdbc.options import libpq_dsn, redact_url
from connectors.jdbc.overwrite import stage
from connectors.jdbc.statements import (
    TableChanged,
    last_per_key,
    parse_named_parameters,
)
from connectors.jdbc.table import parse_table_name
from connectors.jdbc.task_writer import (
    JdbcCommitMessage,
    JdbcWriteError,
    PartitionWriter,
    chunks,
    connect,
)
from connectors.jdbc.writer import plan_write, stream_writer, writer as batch_writer

SCHEMA = StructType([StructField("id", LongType(), False), StructField("name", StringType())])


def arrow_batches(first: int, count: int, size: int) -> list[pa.RecordBatch]:
    ids = list(range(first, first + count))
    return [
        pa.RecordBatch.from_pydict({"id": ids[i : i + size], "name": [f"n{v}" for v in ids[i : i + size]]})
        for i in range(0, count, size)
    ]


def wait_until(condition, timeout: float = 60, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return result


@pytest.fixture
def table(pg, unique) -> str:
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY, name text CHECK (name <> 'bad'))")
    return unique


def count(pg, table: str) -> tuple[int, int]:
    pg.execute(f"SELECT count(*), count(DISTINCT id) FROM {table}")
    return pg.fetchone()


def make_writer(dsn: str, table: str, app: str, **options) -> tuple[PartitionWriter, ProgressKey]:
    raw = {"url": f"{dsn}?application_name={app}", "dbtable": table, "batchSize": "100", **options}
    _, plan, name, _ = plan_write(raw, SCHEMA, False)
    key = ProgressKey(f"test:{name}", 7, 0)
    return PartitionWriter(plan, key), key


# --- options ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        ({"dbtable": "t"}, "option 'url': required option is missing"),
        ({"url": "jdbc:mysql://h/db", "dbtable": "t"}, "option 'url' = 'jdbc:mysql://h/db': expected jdbc:postgresql"),
        ({"url": "jdbc:postgresql://h/db?fancy=1", "dbtable": "t"}, "URL parameter 'fancy' is not supported"),
        ({"url": "postgresql://h/db"}, "give exactly one of 'dbtable' and 'sql'"),
        ({"url": "postgresql://h/db", "dbtable": "t", "sql": "x"}, "give exactly one of 'dbtable' and 'sql'"),
        ({"url": "postgresql://h/db", "dbtable": "t", "batchSize": "0"}, "option 'batchSize' = '0': must be greater than 0"),
        ({"url": "postgresql://h/db", "dbtable": "t", "maxRetries": "-1"}, "option 'maxRetries' = '-1': must not be negative"),
        ({"url": "postgresql://h/db", "dbtable": "t", "mode": "merge"}, "option 'mode' = 'merge': expected one of append, upsert"),
        ({"url": "postgresql://h/db", "dbtable": "t", "keyColumns": "id"}, "option 'keyColumns' = ('id',): only used with mode 'upsert'"),
        ({"url": "postgresql://h/db", "dbtable": "t", "deliveryGuarantee": "twice"}, "option 'deliveryGuarantee' = 'twice'"),
        ({"url": "postgresql://h/db", "dbtable": "t", "batchsise": "5"}, "unknown option; did you mean 'batchSize'?"),
        ({"url": "postgresql://h/db", "dbtable": "t", "sslfoo": "1"}, "option 'sslfoo': unknown option; SSL options are"),
        ({"url": "postgresql://h/db", "dbtable": "t", "sinkId": ""}, "option 'sinkId' = '': must not be empty"),
        ({"url": "postgresql://h/db", "dbtable": "t", "sinkId": "  "}, "option 'sinkId' = '  ': must not be empty"),
        ({"url": "postgresql://h/db", "dbtable": "t", "maxBufferedBytes": "0"}, "option 'maxBufferedBytes' = '0': must be"),
        ({"url": "postgresql://h/db", "dbtable": "t", "lockTimeout": "soon"}, "option 'lockTimeout' = 'soon': expected a duration"),
        ({"url": "postgresql://h/db", "dbtable": "t", "queryTimeout": "-1"}, "option 'queryTimeout' = '-1': must not be negative"),
        ({"url": "jdbc:postgresql://h/db?socketTimeout=30", "dbtable": "t"},
         "URL parameter 'socketTimeout' (a client read timeout) has no libpq equivalent: remove it; the options 'queryTimeout'"),
        ({"url": "jdbc:postgresql://h/db?tcpKeepAlive=yes", "dbtable": "t"}, "URL parameter 'tcpKeepAlive' must be true or false"),
        ({"url": "postgresql://h/db", "dbtable": "t", "isolationLevel": "SNAPSHOT"},
         "option 'isolationLevel' = 'SNAPSHOT': expected one of NONE, READ_UNCOMMITTED, READ_COMMITTED, REPEATABLE_READ"),
        ({"url": "postgresql://h/db", "dbtable": "t", "isolationLevel": "NONE"},
         "option 'isolationLevel' = 'NONE': NONE means no transactions, which deliveryGuarantee 'exactly-once' needs"),
        ({"url": "postgresql://h/db", "dbtable": "t", "isolationLevel": "NONE", "deliveryGuarantee": "at-least-once"},
         "which deliveryGuarantee 'at-least-once' needs"),
        ({"url": "postgresql://h/db", "dbtable": "t", "sessionInitStatement": " "}, "option 'sessionInitStatement' = ' ': must not"),
        ({"url": "postgresql://h/db", "dbtable": "t", "cascadeTruncate": "yes"}, "option 'cascadeTruncate' = 'yes': expected true"),
        ({"url": "postgresql://h/db", "dbtable": "t", "cascadeTruncate": "true"},
         "option 'cascadeTruncate' = 'true': only used with truncate=true"),
        ({"url": "postgresql://h/db", "dbtable": "t", "numPartitions": "0"}, "option 'numPartitions' = '0': must be greater"),
        ({"url": "postgresql://h/db", "dbtable": "t", "numPartitions": "4"},
         "option 'numPartitions' = 4: a Python data source cannot coalesce its input: call df.coalesce(4) before writing"),
    ],
)
def test_bad_options_name_option_and_value(options, message):
    with pytest.raises(OptionError) as info:
        JdbcSinkOptions.from_options(options)
    assert message in str(info.value)


def test_password_never_shown():
    secret = "s3cr3t-pw"
    config = JdbcSinkOptions.from_options(
        {"url": f"jdbc:postgresql://h/db?user=u&password={secret}", "password": secret, "dbtable": "t", "sslpassword": secret}
    )
    assert secret not in repr(config) and secret not in repr(config.connection)
    with pytest.raises(OptionError) as info:
        JdbcSinkOptions.from_options({"url": f"jdbc:oracle://u:{secret}@h/db", "dbtable": "t"})
    assert secret not in str(info.value) and "u:***@h" in str(info.value)
    with pytest.raises(OptionError) as info:
        JdbcSinkOptions.from_options({"url": "postgresql://h/db", "dbtable": "t", "password": secret, "batchSize": "x"})
    assert secret not in str(info.value)
    assert redact_url(f"postgresql://u:{secret}@h:5/db?sslpassword={secret}") == "postgresql://u:***@h:5/db?sslpassword=***"


def test_jdbc_url_becomes_libpq_dsn():
    assert libpq_dsn("jdbc:postgresql://h:5433/db?user=u&ssl=true&ApplicationName=app&currentSchema=s&prepareThreshold=0") == (
        "postgresql://h:5433/db?user=u&sslmode=require&application_name=app&options=-csearch_path%3Ds"
    )
    assert libpq_dsn("jdbc:postgresql:db") == "postgresql://localhost/db"
    assert libpq_dsn("jdbc:postgresql://h/db?tcpKeepAlive=true&socketTimeout=0") == "postgresql://h/db?keepalives=1"
    assert libpq_dsn("jdbc:postgresql://h/db?tcpKeepAlive=FALSE") == "postgresql://h/db?keepalives=0"
    # the URL's connectTimeout holds unless connectionCheckTimeoutSeconds is set to another value
    assert "connect_timeout" not in JdbcConnectionOptions(url="jdbc:postgresql://h/db?connectTimeout=5").connect_kwargs()
    assert JdbcConnectionOptions(url="postgresql://h/db").connect_kwargs()["connect_timeout"] == 60
    options = JdbcConnectionOptions(url="jdbc:postgresql://h/db?connectTimeout=5", connection_check_timeout_seconds=7)
    assert options.connect_kwargs()["connect_timeout"] == 7
    assert libpq_dsn("postgresql://u@h/db?sslmode=verify-full") == "postgresql://u@h/db?sslmode=verify-full"


def test_typed_options_render_to_the_same_string_options():
    connection = JdbcConnectionOptions(url="jdbc:postgresql://h/db", username="u", password="p")
    execution = JdbcExecutionOptions(batch_size=1000, batch_interval_ms=200, max_retries=5)
    assert {**connection.to_options(), **execution.to_options()} == {
        "url": "jdbc:postgresql://h/db", "user": "u", "password": "p",
        "batchSize": "1000", "batchIntervalMs": "200", "maxRetries": "5",
    }  # fmt: skip
    sink = JdbcSinkOptions(url="postgresql://h/db", dbtable="t", mode="upsert", delivery_guarantee="at-least-once")
    assert JdbcSinkOptions.from_options(sink.to_options()) == sink
    assert sink.execution == JdbcExecutionOptions()  # Flink's defaults: 5000 rows, no interval, 3 retries
    with pytest.raises(OptionError, match="'batchSize' = 0: must be greater than 0"):
        JdbcExecutionOptions(batch_size=0)


# --- SQL text ---------------------------------------------------------------------------------


def test_table_names_follow_sql_quoting():
    assert parse_table_name("Events") == ("events",)
    assert parse_table_name('Sales."Odd ""x"".y"') == ("sales", 'Odd "x".y')
    for bad in ("a.b.c", "a.", "a; DROP TABLE x", '""'):
        with pytest.raises(ValueError):
            parse_table_name(bad)


def test_named_parameters_skip_literals_comments_and_casts():
    parsed = parse_named_parameters(
        "UPDATE t SET v = :v::int || ':x' || $$:y$$ WHERE id = :id /* :z */ AND s LIKE '5%' AND w = :v -- :q"
    )
    assert parsed.psycopg == "UPDATE t SET v = %s::int || ':x' || $$:y$$ WHERE id = %s /* :z */ AND s LIKE '5%%' AND w = %s -- :q"
    assert parsed.numbered == "UPDATE t SET v = $1::int || ':x' || $$:y$$ WHERE id = $2 /* :z */ AND s LIKE '5%' AND w = $1 -- :q"
    assert parsed.names == ("v", "id", "v") and parsed.distinct == ("v", "id")


def test_chunks_by_size_and_interval():
    sizes = [c.num_rows for c in chunks(iter(arrow_batches(0, 1050, 70)), 250, 0)]
    assert sizes == [250, 250, 250, 250, 50]

    def slow() -> Iterator[pa.RecordBatch]:
        for batch in arrow_batches(0, 30, 10):
            yield batch
            time.sleep(0.06)

    # checked as batches arrive: the 2nd comes 60 ms after the start, so the first send holds 20
    assert [c.num_rows for c in chunks(slow(), 1000, 50)] == [20, 10]


def test_upsert_keeps_the_last_row_per_key():
    rows = [(1, "a"), (2, "b"), (1, "c"), (None, "x"), (None, "y")]
    assert last_per_key(rows, [0]) == [(2, "b"), (1, "c"), (None, "x"), (None, "y")]


# --- the partition writer against PostgreSQL --------------------------------------------------


def test_exactly_once_skips_a_committed_key_and_detects_changed_input(postgres_dsn, pg, table, unique):
    writer, key = make_writer(postgres_dsn, table, unique)
    message = writer.write(iter(arrow_batches(0, 1000, 300)))
    assert (message.rows, message.skipped) == (1000, 0)
    again = make_writer(postgres_dsn, table, unique)[0].write(iter(arrow_batches(0, 1000, 70)))  # other batch sizes
    assert (again.rows, again.skipped) == (0, 1000)
    assert count(pg, table) == (1000, 1000)
    with pytest.raises(JdbcWriteError, match="committed with 1000 rows, but its re-execution has 999"):
        make_writer(postgres_dsn, table, unique)[0].write(iter(arrow_batches(0, 999, 300)))
    pg.execute("SELECT row_count FROM connectors_jdbc_progress WHERE sink_id = %s", (key.sink_id,))
    assert pg.fetchall() == [(1000,)]


def test_a_retry_after_a_cut_short_attempt_writes_exactly_the_missing_rows(postgres_dsn, pg, table, unique):
    # Spark ends a Python writer's input early, as if complete, when an upstream operator fails:
    # the first attempt commits 400 rows; the retry, with the whole partition, adds the other 600.
    writer, key = make_writer(postgres_dsn, table, unique)
    assert writer.write(iter(arrow_batches(0, 400, 300))).rows == 400
    retry = make_writer(postgres_dsn, table, unique)[0].write(iter(arrow_batches(0, 1000, 300)))
    assert (retry.rows, retry.skipped) == (600, 400)
    assert count(pg, table) == (1000, 1000)
    pg.execute("SELECT row_count FROM connectors_jdbc_progress WHERE sink_id = %s", (key.sink_id,))
    assert pg.fetchall() == [(1000,)]


def test_at_least_once_writes_no_progress_row(postgres_dsn, pg, table, unique):
    writer, key = make_writer(postgres_dsn, table, unique, deliveryGuarantee="at-least-once")
    assert writer.write(iter(arrow_batches(0, 500, 100))).rows == 500
    pg.execute("SELECT count(*) FROM connectors_jdbc_progress WHERE sink_id = %s", (key.sink_id,))
    assert pg.fetchone() == (0,) and count(pg, table) == (500, 500)


def test_constraint_violation_rolls_back_the_whole_partition(postgres_dsn, pg, table, unique):
    batches = arrow_batches(0, 1000, 100)
    batches[7] = pa.RecordBatch.from_pydict({"id": [700], "name": ["bad"]})  # after 7 chunks were sent
    writer, key = make_writer(postgres_dsn, table, unique)
    with pytest.raises(JdbcWriteError) as info:
        writer.write(iter(batches))
    assert f'constraint "{table}_name_check"' in str(info.value) and "rolled back" in str(info.value)
    assert count(pg, table) == (0, 0)
    pg.execute("SELECT count(*) FROM connectors_jdbc_progress WHERE sink_id = %s", (key.sink_id,))
    assert pg.fetchone() == (0,)


def test_guarantee_none_commits_each_chunk(postgres_dsn, pg, table, unique):
    batches = arrow_batches(0, 300, 100) + [pa.RecordBatch.from_pydict({"id": [0], "name": ["dup"]})]
    writer, _ = make_writer(postgres_dsn, table, unique, deliveryGuarantee="none")
    with pytest.raises(JdbcWriteError, match=f'constraint "{table}_pkey"'):
        writer.write(iter(batches))
    assert count(pg, table) == (300, 300)  # Flink's plain JdbcSink: what was flushed stays


def test_copy_is_binary_when_every_column_has_a_binary_form(postgres_dsn, pg, unique):
    pg.execute(f"CREATE TABLE {unique} (s smallint, w bigint, f double precision, v varchar(4), c char(3), n integer)")
    schema = StructType([StructField("s", ShortType()), StructField("w", ShortType()), StructField("f", FloatType()),
                         StructField("v", StringType()), StructField("c", StringType())])  # fmt: skip
    _, plan, _, _ = plan_write({"url": postgres_dsn, "dbtable": unique}, schema, False)
    assert "FORMAT binary" in plan.statement.sql  # widening pairs: smallint into bigint, float into double
    batch = pa.RecordBatch.from_pydict(
        {"s": [-2, None], "w": [7, 8], "f": [0.5, None], "v": ["é€", ""], "c": ["ab", None]},
        pa.schema([("s", pa.int16()), ("w", pa.int16()), ("f", pa.float32()), ("v", pa.string()), ("c", pa.string())]),
    )
    PartitionWriter(plan, ProgressKey(f"test:{unique}", 0, 0)).write(iter([batch]))
    pg.execute(f"SELECT s, w, f, v, c FROM {unique} ORDER BY w")
    assert pg.fetchall() == [(-2, 7, 0.5, "é€", "ab "), (None, 8, None, "", None)]
    # a narrowing pair (bigint into integer) stays CSV: an out-of-range value fails with the server's error
    _, plan, _, _ = plan_write({"url": postgres_dsn, "dbtable": unique}, StructType([StructField("n", LongType())]), False)
    assert "FORMAT csv" in plan.statement.sql


def test_decimals_with_a_fraction_round_into_integer_columns(postgres_dsn, pg, unique):
    # COPY's integer input refuses "5.00": the INSERT path rounds it, as Spark's jdbc writer does
    pg.execute(f"CREATE TABLE {unique} (n integer)")
    schema = StructType([StructField("n", DecimalType(10, 2))])
    _, plan, _, _ = plan_write({"url": postgres_dsn, "dbtable": unique}, schema, False)
    values = [decimal.Decimal(v) for v in ("5.00", "1.50", "-2.50")]
    batch = pa.RecordBatch.from_pydict({"n": pa.array([*values, None], pa.decimal128(10, 2))})
    PartitionWriter(plan, ProgressKey(f"test:{unique}", 0, 0)).write(iter([batch]))
    pg.execute(f"SELECT n FROM {unique}")
    assert sorted(pg.fetchall(), key=str) == [(-3,), (2,), (5,), (None,)]


@pytest.mark.parametrize(
    "ddl, options",
    [
        ("id bigint, name text", {}),  # binary COPY
        ("id bigint, name json", {}),  # CSV COPY: the server's error names no column
        ("id bigint PRIMARY KEY, name text", {"mode": "upsert"}),  # psycopg2 refuses it, naming nothing
        ("id bigint, name text", {"sql": "INSERT INTO {t} VALUES (:id, :name)"}),
    ],
)
def test_a_nul_character_names_its_column_and_value(postgres_dsn, pg, unique, ddl, options):
    pg.execute(f"CREATE TABLE {unique} ({ddl})")
    options = {key: value.replace("{t}", unique) for key, value in options.items()}
    target = {} if "sql" in options else {"dbtable": unique}
    _, plan, _, _ = plan_write({"url": postgres_dsn, **target, **options}, SCHEMA, False)
    batch = pa.RecordBatch.from_pydict({"id": [1, 2], "name": ['"ok"', '"a\x00b"']})
    with pytest.raises(JdbcWriteError) as info:
        PartitionWriter(plan, ProgressKey(f"test:{unique}", 0, 0)).write(iter([batch]))
    message = "input column 'name' holds a NUL character (0x00), which PostgreSQL text cannot store: '\"a\\x00b\"'"
    assert message in str(info.value)
    assert count(pg, unique) == (0, 0)


REFUSING = "id bigint PRIMARY KEY, n integer, v varchar(3), d numeric(4, 2), u uuid, a varchar(2)[], b bytea"


@pytest.mark.parametrize(
    "options, field, values, message",
    [  # rows (1, ...), (1, ...), (2, ...): an upsert sends only the last of key 1
        ({"mode": "upsert"}, StructField("n", LongType()), [3_000_000_000, 5, 4_000_000_000],
         ": input column 'n' value 4000000000 (row 3 of the chunk) does not fit integer: integer out of range"),
        ({"mode": "upsert"}, StructField("v", StringType()), ["x", "abcd", None],
         ": input column 'v' value 'abcd' (row 2 of the chunk) does not fit character varying(3): value too long for "
         "type character varying(3)"),  # a CAST to varchar(3) would cut it: the probe assigns it
        ({}, StructField("d", DecimalType(6, 3)), [decimal.Decimal("1.5"), decimal.Decimal("123.456"), None],
         ": input column 'd' value 123.456 (row 2 of the chunk) does not fit numeric(4,2): numeric field overflow. "
         "A field with precision 4, scale 2 must round to an absolute value less than 10^2."),
        ({"mode": "upsert"}, StructField("u", StringType()), [None, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "nope"],
         ": input column 'u' value 'nope' (row 3 of the chunk) does not fit uuid: invalid input syntax for type uuid: "
         '"nope"'),
        ({}, StructField("a", ArrayType(StringType())), [["ab"], [], ["ab", "abc"]],
         ": input column 'a' value ARRAY['ab','abc'] (row 3 of the chunk) does not fit character varying(2)[]: value "
         "too long for type character varying(2)"),
        ({"sql": "INSERT INTO {t} (id, n) VALUES (:id, :n) -- n"}, StructField("n", LongType()), [3_000_000_000, 5, 6],
         ": parameter :n value 3000000000 (row 1 of the chunk) does not fit integer: integer out of range"),
        ({"sql": "INSERT INTO {t} (id, v) VALUES (:id, :v)"}, StructField("v", StringType()), ["abcd", "x", "y"],
         " (error, SQLSTATE 22001): value too long for type character varying(3). The open transaction was rolled "
         "back."),  # the parameter's type has no length: the server's message stays
    ],
)
def test_a_value_an_insert_refuses_names_its_column_and_row(postgres_dsn, pg, unique, options, field, values,
                                                             message):
    # COPY's errors name the column and value; INSERT's (upsert, sql, binary columns) would only name the type
    pg.execute(f"CREATE TABLE {unique} ({REFUSING})")
    options = {key: value.replace("{t}", unique) for key, value in options.items()}
    target = {} if "sql" in options else {"dbtable": unique}
    extra = [] if options else [StructField("b", BinaryType())]  # a binary column: append by INSERT
    schema = StructType([StructField("id", LongType()), field, *extra])
    _, plan, _, _ = plan_write({"url": postgres_dsn, **target, **options}, schema, False)
    data = {"id": [1, 1, 2], field.name: values, **({"b": [b"x"] * 3} if extra else {})}
    batch = pa.RecordBatch.from_pydict({k: pa.array(v, pa.decimal128(6, 3) if k == "d" else None)
                                        for k, v in data.items()})  # fmt: skip
    key = ProgressKey(f"test:{unique}", 0, 0)
    with pytest.raises(JdbcWriteError) as info:
        PartitionWriter(plan, key).write(iter([batch]))
    target_name = f'table "public"."{unique}"' if target else "the custom sql statement"
    assert str(info.value) == f"connectors.jdbc: writing to {target_name} failed{message}"
    assert count(pg, unique) == (0, 0) and progress_row(pg, key) is None


def test_arrays_of_structs_and_maps_land_as_json_arrays(postgres_dsn, pg, unique):
    # each element's JSON, as Spark's to_json writes it (json keeps the text, jsonb normalises it);
    # ARRAY['...'] is a text[], which casts to jsonb[] or uuid[] only explicitly
    pg.execute(f"CREATE TABLE {unique} (id bigint, s jsonb[], m json[], u uuid[])")
    item = StructType([StructField("k", StringType()), StructField("n", DecimalType(5, 2))])
    schema = StructType([StructField("id", LongType()), StructField("s", ArrayType(item)),
                         StructField("m", ArrayType(MapType(StringType(), LongType()))),
                         StructField("u", ArrayType(StringType()))])  # fmt: skip
    _, plan, _, _ = plan_write({"url": postgres_dsn, "dbtable": unique, "mode": "append"}, schema, False)
    item_type = pa.struct([("k", pa.string()), ("n", pa.decimal128(5, 2))])
    batch = pa.RecordBatch.from_pydict({
        "id": [1, 2, 3],
        "s": pa.array([[{"k": "a", "n": decimal.Decimal("1.50")}, None], None, []], pa.list_(item_type)),
        "m": pa.array([[[("x", 1)], []], [], None], pa.list_(pa.map_(pa.string(), pa.int64()))),
        "u": [["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", None], None, []],
    })  # fmt: skip
    PartitionWriter(plan, ProgressKey(f"test:{unique}", 0, 0)).write(iter([batch]))
    pg.execute(f"SELECT s::text[], m::text[], u::text[] FROM {unique} ORDER BY id")
    assert pg.fetchall() == [
        (['{"k": "a", "n": 1.50}', None], ['{"x":1}', "{}"], ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", None]),
        (None, [], None),
        ([], None, []),
    ]


def test_an_insert_names_a_date_python_cannot_hold(postgres_dsn, pg, unique):
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY, d date)")
    schema = StructType([StructField("id", LongType()), StructField("d", DateType())])
    _, plan, _, _ = plan_write({"url": postgres_dsn, "dbtable": unique, "mode": "upsert"}, schema, False)
    batch = pa.RecordBatch.from_pydict({"id": [1], "d": pa.array([2_932_897], pa.date32())})  # 10000-01-01
    with pytest.raises(JdbcWriteError, match="input column 'd' holds a value Python cannot represent .*: only COPY"):
        PartitionWriter(plan, ProgressKey(f"test:{unique}", 0, 0)).write(iter([batch]))


def test_binary_decimals_land_as_the_server_reads_their_text(postgres_dsn, pg, unique):
    import random

    columns = {  # column: (Spark type, PostgreSQL type, digits of the random unscaled values)
        "a": (DecimalType(23, 2), "double precision", 21),  # both sides of 2^53: numpy's division, the text
        "b": (DecimalType(38, 25), "double precision", 30),  # scale past 10^22, the last exact power of ten
        "c": (DecimalType(38, 18), "numeric", 38),  # unscaled values past 2^64
        "d": (DecimalType(23, 5), "numeric(12, 3)", 13),  # rounded to the column's scale by the server
        "e": (DecimalType(9, 0), "numeric", 9),
    }  # fmt: skip
    pg.execute(f"CREATE TABLE {unique} ({', '.join(f'{c} {t}, text_{c} text' for c, (_, t, _) in columns.items())})")
    schema = StructType([field for c, (spark, _, _) in columns.items()
                         for field in (StructField(c, spark), StructField(f"text_{c}", StringType()))])  # fmt: skip
    _, plan, _, _ = plan_write({"url": postgres_dsn, "dbtable": unique}, schema, False)
    assert "FORMAT binary" in plan.statement.sql
    rng, data = random.Random(7), {}
    with decimal.localcontext(prec=80):
        for column, (spark, _, digits) in columns.items():
            unscaled = [rng.randrange(-(10 ** rng.randint(0, digits)), 10 ** rng.randint(0, digits)) for _ in range(3000)]
            values = [decimal.Decimal(u).scaleb(-spark.scale) for u in unscaled]
            extremes = (0, -min(2**63, 10**digits - 1), 10**digits - 1)  # -2^63: the int64 whose negation wraps
            values[:4] = [None, *(decimal.Decimal(u).scaleb(-spark.scale) for u in extremes)]
            data[column] = pa.array(values, pa.decimal128(spark.precision, spark.scale))
            data[f"text_{column}"] = pa.array([None if v is None else str(v) for v in values])
    batch = pa.RecordBatch.from_pydict(data)
    PartitionWriter(plan, ProgressKey(f"test:{unique}", 0, 0)).write(iter([batch.slice(1), batch.slice(0, 1)]))
    same = [f"count(*) FILTER (WHERE {c}::text = text_{c}::{t}::text)" for c, (_, t, _) in columns.items()]
    pg.execute(f"SELECT count(*), count(a), {', '.join(same)} FROM {unique}")
    assert pg.fetchone() == (3000, 2999, *[2999] * len(columns))  # every value bit for bit what its text gives


def test_binary_copy_fails_when_the_table_changed_since_the_query_started(postgres_dsn, pg, table, unique):
    writer, _ = make_writer(postgres_dsn, table, unique)
    assert "FORMAT binary" in writer.plan.statement.sql
    pg.execute(f"ALTER TABLE {table} ALTER COLUMN id TYPE double precision")  # int8 bytes would read as a wrong float8
    with pytest.raises(TableChanged, match='changed since the query started \\(column "id" is float8, was int8\\)'):
        writer.write(iter(arrow_batches(0, 100, 100)))
    assert count(pg, table) == (0, 0)


def test_every_plan_checks_the_table_as_it_is_now_on_the_idle_connection(postgres_dsn, pg, table, unique):
    # Spark asks for a stream writer at every micro-batch and again to commit: each checks the
    # table again (a query restarted after a fix must see it), without connecting each time.
    options = {"url": f"{postgres_dsn}?application_name={unique}", "dbtable": table, "checkpointLocation": "/cp"}
    stream_writer(options, SCHEMA, False)
    (kept,) = backends(pg, unique)
    stream_writer(options, SCHEMA, False)
    assert backends(pg, unique) == [kept]
    pg.execute(f"ALTER TABLE {table} ALTER COLUMN id TYPE text")
    with pytest.raises(OptionError, match="input column 'id' \\(bigint\\) cannot be written"):
        stream_writer(options, SCHEMA, False)


def backends(cursor, app: str) -> list[int]:
    cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,))
    return [pid for (pid,) in cursor.fetchall()]


def test_the_next_task_reuses_the_idle_connection_and_replaces_a_dead_one(postgres_dsn, pg, table, unique):
    def write(first: int) -> None:  # maxRetries 0: a dead connection handed out would fail the write
        writer, _ = make_writer(postgres_dsn, table, unique, deliveryGuarantee="at-least-once", maxRetries="0")
        assert writer.write(iter(arrow_batches(first, 100, 100))).rows == 100

    write(0)
    (kept,) = backends(pg, unique)
    write(100)
    assert backends(pg, unique) == [kept]
    pg.execute("SELECT pg_terminate_backend(%s)", (kept,))
    wait_until(lambda: not backends(pg, unique), what="the idle connection's backend to end")
    write(200)
    assert len(backends(pg, unique)) == 1 and backends(pg, unique) != [kept]
    assert count(pg, table) == (300, 300)


def disrupted(batches: list[pa.RecordBatch], disrupt) -> Iterator[pa.RecordBatch]:
    """Yield the first batch, let the writer send it, call ``disrupt()``, yield the rest."""
    yield batches[0]
    disrupt()
    yield from batches[1:]


def open_transaction(cursor, app: str) -> list[int]:
    """Backends of ``app`` inside a transaction that has written (a COPY in progress or idle)."""
    cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s AND backend_xid IS NOT NULL", (app,))
    return [pid for (pid,) in cursor.fetchall()]


def test_killed_connection_mid_partition_is_retried_without_duplicates(postgres_dsn, pg, table, unique, caplog):
    def kill() -> None:
        pids = wait_until(lambda: open_transaction(pg, unique), what="the writer's open transaction")
        pg.execute("SELECT pg_terminate_backend(%s)", (pids[0],))

    writer, _ = make_writer(postgres_dsn, table, unique)
    with caplog.at_level(logging.WARNING, logger="connectors.core.retry"):
        message = writer.write(disrupted(arrow_batches(0, 1000, 100), kill))
    assert message.rows == 1000 and count(pg, table) == (1000, 1000)
    assert any("attempt 1 of 4" in r.getMessage() for r in caplog.records)


class PrivateServer:
    """A PostgreSQL cluster of this test alone, so restarting it disturbs no other test."""

    def __init__(self, runtime_dir: Path):
        from connectors.testing.postgres_server import PostgresServer

        self.server = PostgresServer(runtime_dir)
        self.dsn = self.server.start()
        self.pg_ctl = max(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        self.owner = {"user": "postgres", "group": "postgres", "extra_groups": []} if os.geteuid() == 0 else {}

    def ctl(self, *args: str) -> None:
        data = self.server.data_dir
        subprocess.run([self.pg_ctl, "-D", str(data), "-l", str(data / "restart.log"), "-w", *args], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd="/", **self.owner)  # fmt: skip

    def close(self) -> None:
        self.ctl("-m", "immediate", "stop")
        self.server.state_file.unlink(missing_ok=True)
        shutil.rmtree(self.server.data_dir.parent if os.geteuid() == 0 else self.server.data_dir, ignore_errors=True)


def test_server_restart_mid_partition_is_retried_without_duplicates(tmp_path, unique, caplog):
    server = PrivateServer(tmp_path / "pg")
    try:
        admin = psycopg2.connect(server.dsn)
        admin.autocommit = True
        admin.cursor().execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY, name text)")

        def restart() -> None:
            wait_until(lambda: open_transaction(admin.cursor(), unique), what="the writer's open transaction")
            server.ctl("-m", "fast", "restart")

        writer, _ = make_writer(server.dsn, unique, unique)
        with caplog.at_level(logging.WARNING, logger="connectors.core.retry"):
            message = writer.write(disrupted(arrow_batches(0, 1000, 100), restart))
        assert message.rows == 1000
        with psycopg2.connect(server.dsn) as check, check.cursor() as cursor:
            assert count(cursor, unique) == (1000, 1000)
        assert any("attempt 1 of 4" in r.getMessage() for r in caplog.records)
    finally:
        server.close()


@pytest.mark.parametrize("isolation", ["READ_UNCOMMITTED", "REPEATABLE_READ", "SERIALIZABLE"])
def test_concurrent_attempts_at_one_key_write_once(postgres_dsn, pg, table, unique, isolation):
    """A speculative copy or zombie running alongside: the second waits on the first's progress
    row, then finds it committed and skips. From REPEATABLE_READ on, the row the second waited
    for is newer than its snapshot: PostgreSQL fails it with a serialization failure, and the
    retry, on a new snapshot, skips."""
    first_app, second_app = unique + "a", unique + "b"

    def hold_until_second_waits() -> None:
        wait_until(lambda: pg.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'", (second_app,)
        ) or pg.fetchall(), what="the second attempt to wait for the first")  # fmt: skip

    first, _ = make_writer(postgres_dsn, table, first_app, isolationLevel=isolation)
    second, _ = make_writer(postgres_dsn, table, second_app, isolationLevel=isolation)
    results = {}
    started = threading.Event()

    def run_first() -> None:
        def batches():
            yield from arrow_batches(0, 100, 100)
            started.set()
            hold_until_second_waits()
            yield from arrow_batches(100, 400, 100)

        results["first"] = first.write(batches())

    thread = threading.Thread(target=run_first)
    thread.start()
    assert started.wait(60)
    results["second"] = second.write(iter(arrow_batches(0, 500, 100)))
    thread.join(60)
    assert (results["first"].skipped, results["second"].skipped) == (0, 500)
    assert count(pg, table) == (500, 500)


def test_an_upstream_failure_mid_copy_surfaces_unchanged_and_commits_nothing(postgres_dsn, pg, table, unique):
    def broken() -> Iterator[pa.RecordBatch]:
        yield from arrow_batches(0, 300, 100)
        raise ValueError("upstream broke")

    writer, _ = make_writer(postgres_dsn, table, unique)
    with pytest.raises(ValueError, match="upstream broke"):
        writer.write(broken())
    assert count(pg, table) == (0, 0)


def test_a_zombie_task_of_a_batch_committed_since_writes_nothing(postgres_dsn, pg, unique):
    # A task of a driver that died runs on (its executor not stopped yet) and reaches the database
    # only after the restarted query re-ran its batch 7 and committed it and later batches, whose
    # commits pruned batch 7's progress rows.
    pg.execute(f"CREATE TABLE {unique} (id bigint, name text)")  # no key: a row written twice stays twice
    raw = {"url": f"{postgres_dsn}?application_name={unique}", "dbtable": unique, "batchSize": "100", "sinkId": unique}
    _, plan, name, _ = plan_write(raw, SCHEMA, False)
    driver = stream_writer(raw, SCHEMA, False)  # commit() needs no Spark task
    sink = f"{unique}:{name}"

    def task(batch: int, rows: list[pa.RecordBatch]) -> JdbcCommitMessage:
        return PartitionWriter(plan, ProgressKey(sink, batch, 0)).write(iter(rows))

    zombies = [PartitionWriter(plan, ProgressKey(sink, 7, 0)) for _ in range(2)]  # the dead driver's
    driver.commit([task(7, arrow_batches(0, 500, 100))], 7)  # the restarted query's batch 7
    driver.commit([task(8, [])], 8)  # batch 8: nothing came in, so it has no progress row
    assert zombies[0].write(iter(arrow_batches(0, 500, 100))) == JdbcCommitMessage(ProgressKey(sink, 7, 0), 0, 500)
    assert count(pg, unique) == (500, 500)
    driver.commit([task(9, arrow_batches(500, 100, 100))], 9)  # batch 7's rows are pruned now
    with pytest.raises(JdbcWriteError, match=f"sink id '{sink}', batch 7, partition 0: batch 9 of this sink id is "
                                             "committed already.*this task is a zombie"):  # fmt: skip
        zombies[1].write(iter(arrow_batches(0, 500, 100)))
    assert count(pg, unique) == (600, 600)


# --- digests: a replay with other rows ----------------------------------------------------------


def progress_row(cursor, key: ProgressKey, table: str = "connectors_jdbc_progress") -> tuple:
    cursor.execute(f"SELECT row_count, digest FROM {table} WHERE sink_id = %s AND batch_id = %s AND partition_id = %s",
                   key.params())  # fmt: skip
    return cursor.fetchone()


def test_a_replay_bringing_other_rows_fails_instead_of_losing_or_duplicating(postgres_dsn, pg, table, unique):
    # The source's partition count changed before the restart: partition 0 of batch 7 holds other rows.
    writer, key = make_writer(postgres_dsn, table, unique)
    writer.write(iter(arrow_batches(0, 1000, 300)))
    assert progress_row(pg, key) == (1000, arrow_digest(arrow_batches(0, 1000, 1000)))
    for replay in (arrow_batches(1000, 1000, 300), arrow_batches(500, 1500, 300)):  # as many rows; more rows
        with pytest.raises(JdbcWriteError) as info:
            make_writer(postgres_dsn, table, unique)[0].write(iter(replay))
        assert f"sink id '{key.sink_id}', batch 7, partition 0: the first 1000 rows of this re-execution are not the 1000 rows committed" in str(info.value)
    assert count(pg, table) == (1000, 1000) and progress_row(pg, key)[0] == 1000


def test_a_replay_of_every_committed_row_in_another_order_skips_them_all(postgres_dsn, pg, table, unique):
    # After a shuffle a re-executed batch's partition may bring its rows in another order.
    writer, key = make_writer(postgres_dsn, table, unique)
    writer.write(iter(arrow_batches(0, 1000, 300)))
    rows = pa.Table.from_batches(list(arrow_batches(0, 1000, 1000)))
    reversed_rows = rows.take(list(range(999, -1, -1))).to_batches(max_chunksize=300)
    assert make_writer(postgres_dsn, table, unique)[0].write(iter(reversed_rows)) == JdbcCommitMessage(key, 0, 1000)
    assert count(pg, table) == (1000, 1000)
    # Only a part committed: which rows it held is unknown once the order changed.
    part = f"{table}_part"  # created by the sink
    writer, key = make_writer(postgres_dsn, part, unique)
    writer.write(iter(arrow_batches(0, 600, 300)))
    replay = rows.slice(0, 600).take(list(range(599, -1, -1))).to_batches(max_chunksize=300) + list(arrow_batches(600, 400, 300))
    with pytest.raises(JdbcWriteError) as info:
        make_writer(postgres_dsn, part, unique)[0].write(iter(replay))
    assert f"sink id '{key.sink_id}', batch 7, partition 0: this re-execution begins with the 600 rows committed in " \
           "another order and has more after them" in str(info.value)
    assert count(pg, part) == (600, 600) and progress_row(pg, key)[0] == 600


def test_an_old_progress_table_gains_the_digest_column_and_its_rows_still_skip(postgres_dsn, pg, table, unique):
    progress = f"{unique}_progress"
    pg.execute(f"""CREATE TABLE {progress} (sink_id text NOT NULL, batch_id bigint NOT NULL, partition_id integer NOT NULL,
                   row_count bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(),
                   PRIMARY KEY (sink_id, batch_id, partition_id))""")  # as the previous version created it
    running = psycopg2.connect(postgres_dsn)  # a running query's transaction holds a row of it
    try:
        running.cursor().execute(f"INSERT INTO {progress} (sink_id, batch_id, partition_id, row_count) VALUES ('q', 0, 0, 1)")
        with pytest.raises(OptionError, match=f"option 'progressTable' = '{progress}': cannot create or update it: "
                                              "canceling statement due to lock timeout"):  # fmt: skip
            make_writer(postgres_dsn, table, unique, progressTable=progress, lockTimeout="200ms")
    finally:
        running.close()
    writer, key = make_writer(postgres_dsn, table, unique, progressTable=progress)
    pg.execute(f"INSERT INTO {progress} (sink_id, batch_id, partition_id, row_count) VALUES (%s, %s, %s, 1000)", key.params())
    assert progress_row(pg, key, progress) == (1000, None)  # committed before digests existed: counted only
    assert writer.write(iter(arrow_batches(0, 1000, 300))) == JdbcCommitMessage(key, 0, 1000)


# --- the memory bound: transactions of maxBufferedBytes ---------------------------------------


def wide_batches(first: int, count: int, size: int) -> Iterator[pa.RecordBatch]:
    """About 100 bytes a row, allocated as they are yielded (as Spark's input arrives)."""
    for start in range(first, first + count, size):
        ids = range(start, min(start + size, first + count))
        yield pa.RecordBatch.from_pydict({"id": list(ids), "name": [f"{i:0100d}" for i in ids]})


def test_a_partition_larger_than_max_buffered_bytes_commits_in_pieces_keeping_only_the_open_one(
    postgres_dsn, pg, table, unique
):
    writer, key = make_writer(postgres_dsn, table, unique, maxBufferedBytes="256k", batchSize="1000")
    baseline, peak, seen = pa.total_allocated_bytes(), 0, []

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal peak
        for batch in wide_batches(0, 40_000, 1000):  # 4.5 MB of Arrow
            yield batch
            peak = max(peak, pa.total_allocated_bytes() - baseline)
            seen.append(count(pg, table)[0])

    assert writer.write(batches()) == JdbcCommitMessage(key, 40_000, 0)
    assert count(pg, table) == (40_000, 40_000) and progress_row(pg, key)[0] == 40_000
    assert peak < 1 << 20, f"{peak} bytes of Arrow held"  # 256 KiB kept, a chunk, Spark's batch
    assert 0 < seen[20] < 40_000  # pieces are committed (visible) while the partition is being read


def test_a_killed_connection_in_a_later_piece_resumes_after_the_committed_ones(postgres_dsn, pg, table, unique, caplog):
    def kill() -> None:
        wait_until(lambda: count(pg, table)[0] > 0, what="a first committed piece")
        pids = wait_until(lambda: open_transaction(pg, unique), what="the writer's next open transaction")
        pg.execute("SELECT pg_terminate_backend(%s)", (pids[0],))

    writer, key = make_writer(postgres_dsn, table, unique, maxBufferedBytes="64k", batchSize="500")
    batches = list(wide_batches(0, 20_000, 500))

    def input_() -> Iterator[pa.RecordBatch]:
        yield from batches[:10]
        kill()
        yield from batches[10:]

    with caplog.at_level(logging.WARNING, logger="connectors.core.retry"):
        message = writer.write(input_())
    # the table's primary key fails a resent committed row: none was resent, none is missing
    assert message == JdbcCommitMessage(key, 20_000, 0) and count(pg, table) == (20_000, 20_000)
    assert any("attempt 1 of 4" in r.getMessage() for r in caplog.records)


def test_a_re_execution_resumes_after_the_pieces_a_failed_attempt_committed(postgres_dsn, pg, table, unique):
    options = {"maxBufferedBytes": "64k", "batchSize": "500"}
    writer, key = make_writer(postgres_dsn, table, unique, **options)

    def broken() -> Iterator[pa.RecordBatch]:
        yield from wide_batches(0, 5200, 400)
        raise ValueError("upstream broke")

    with pytest.raises(ValueError, match="upstream broke"):
        writer.write(broken())
    committed = progress_row(pg, key)[0]
    assert 0 < committed < 5200 and count(pg, table) == (committed, committed)
    again = make_writer(postgres_dsn, table, unique, **options)[0].write(wide_batches(0, 10_000, 700))
    assert again == JdbcCommitMessage(key, 10_000 - committed, committed)
    assert count(pg, table) == (10_000, 10_000)


# --- timeouts ---------------------------------------------------------------------------------


def in_thread(call) -> tuple[threading.Thread, dict]:
    result: dict = {}

    def run() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_a_lock_held_by_a_dead_peer_times_out_and_a_retry_takes_over(postgres_dsn, pg, table, unique, caplog):
    # An attempt whose executor died mid-transaction holds the progress row until the server ends
    # its session (for a vanished host: TCP keepalive, hours): the writer must not wait for it.
    zombie = psycopg2.connect(postgres_dsn)
    try:
        writer, key = make_writer(postgres_dsn, table, unique, lockTimeout="300ms", maxRetries="1")
        zombie.cursor().execute(
            "INSERT INTO connectors_jdbc_progress (sink_id, batch_id, partition_id, row_count) VALUES (%s, %s, %s, -1)",
            key.params(),
        )
        thread, result = in_thread(lambda: writer.write(iter(arrow_batches(0, 100, 100))))
        thread.join(20)
        assert not thread.is_alive(), "the write waits on the lock"
        assert isinstance(result["error"], JdbcWriteError)
        message = str(result["error"])  # PostgreSQL's context (the locked row) may stand between the two
        assert "SQLSTATE 55P03): canceling statement due to lock timeout" in message
        assert "(the option 'lockTimeout' sets it)" in message
        # with retries left, a retry takes the row once the dead peer's transaction ended
        writer, _ = make_writer(postgres_dsn, table, unique, lockTimeout="300ms", maxRetries="5")
        with caplog.at_level(logging.WARNING, logger="connectors.core.retry"):
            thread, result = in_thread(lambda: writer.write(iter(arrow_batches(0, 100, 100))))
            wait_until(lambda: any("lock timeout" in r.getMessage() for r in caplog.records), 20, "a retry")
            zombie.rollback()
            thread.join(60)
        assert result["value"] == JdbcCommitMessage(key, 100, 0) and count(pg, table) == (100, 100)
    finally:
        zombie.close()


def test_a_statement_waiting_longer_than_query_timeout_fails(postgres_dsn, pg, table, unique):
    holder = psycopg2.connect(postgres_dsn)
    try:
        writer, _ = make_writer(postgres_dsn, table, unique, lockTimeout="0", queryTimeout="1")
        holder.cursor().execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        thread, result = in_thread(lambda: writer.write(iter(arrow_batches(0, 100, 100))))
        thread.join(20)
        assert not thread.is_alive(), "the write waits without a statement timeout"
        assert time.monotonic() - started < 10
        assert "canceling statement due to statement timeout (the option 'queryTimeout' sets it)" in str(result["error"])
    finally:
        holder.close()
    assert count(pg, table) == (0, 0)


def test_sessions_carry_the_timeouts_and_the_url_keepalive_setting(postgres_dsn):
    parts = urlsplit(postgres_dsn)
    url = f"jdbc:postgresql://{parts.hostname}:{parts.port}{parts.path}?tcpKeepAlive=false&connectTimeout=7"
    options = JdbcConnectionOptions(url=url, username=parts.username, password=parts.password,
                                    lock_timeout="1500ms", query_timeout=9)  # fmt: skip
    connection = connect(options)
    try:
        assert {k: connection.get_dsn_parameters()[k] for k in ("keepalives", "connect_timeout")} == {
            "keepalives": "0", "connect_timeout": "7"}  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('lock_timeout'), current_setting('statement_timeout'), "
                           "current_setting('idle_in_transaction_session_timeout'), current_setting('TimeZone')")  # fmt: skip
            assert cursor.fetchone() == ("1500ms", "9s", "9s", "UTC")
    finally:
        connection.close()


def test_isolation_level_and_session_init_statement_hold_on_every_new_connection(postgres_dsn, pg, unique):
    """Spark's default isolation level, then each named one, NONE leaving the server's default; the
    sessionInitStatement runs once per connection, and a failing one is named without the password."""
    pg.execute(f"CREATE TABLE {unique} (pid int)")
    parts = urlsplit(postgres_dsn)
    url = f"jdbc:postgresql://{parts.hostname}:{parts.port}{parts.path}?user={parts.username}&password={parts.password}"
    for level, expected in [(None, "read uncommitted"), ("REPEATABLE_READ", "repeatable read"), ("NONE", "read committed")]:
        chosen = {"isolation_level": level} if level else {}
        connection = connect(JdbcConnectionOptions(url=url, session_init_statement=f"INSERT INTO {unique} VALUES "
                                                   "(pg_backend_pid())", **chosen))  # fmt: skip
        try:
            with connection.cursor() as cursor:
                cursor.execute("SHOW transaction_isolation")
                assert cursor.fetchone() == (expected,)
                cursor.execute(f"SELECT count(*) FROM {unique} WHERE pid = pg_backend_pid()")
                assert cursor.fetchone() == (1,)
        finally:
            connection.close()
    with pytest.raises(OptionError) as info:
        connect(JdbcConnectionOptions(url=url, session_init_statement="SELECT nope"))
    assert "option 'sessionInitStatement' = 'SELECT nope': failed on a new connection: column \"nope\" does not exist" in str(info.value)
    assert "password=" not in str(info.value)  # the URL is never shown


# --- the lease of an overwrite's staging table: the driver's JVM watched through /proc, else ps ----------------


def ancestors(pid: int, proc: bool | None) -> list[tuple[int, lease.Process]]:
    """A process and its ancestors, read from /proc (``proc``), ps, or the machine's way (None)."""
    found = []
    while pid > 1 and (process := lease._process(pid, proc)) is not None:
        found.append((pid, process))
        pid = process.parent
    return found


def started_at(process: lease.Process, proc: bool) -> float:
    """A start time read from /proc (clock ticks after boot) or ps (local time), in seconds since 1970."""
    if not proc:
        return time.mktime(time.strptime(process.started, "%a %b %d %H:%M:%S %Y"))
    boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime "))
    return boot + int(process.started) / os.sysconf("SC_CLK_TCK")


def test_without_proc_ps_finds_the_same_ancestors_as_proc(monkeypatch, tmp_path):
    """On a machine without /proc (macOS, BSD) the facts come from ps: here, this process's real
    ancestors, each with the name, parent and start time /proc gives (ps's to the second)."""
    monkeypatch.setattr(lease, "_PROC", False)
    by_ps, by_proc = ancestors(os.getpid(), None), ancestors(os.getpid(), True)
    assert [pid for pid, _ in by_ps[:2]] == [os.getpid(), os.getppid()]
    assert [(pid, p.name, p.parent, p.zombie) for pid, p in by_ps] == [(pid, p.name, p.parent, False)
                                                                         for pid, p in by_proc]
    for (_, ps), (_, proc) in zip(by_ps, by_proc):
        assert abs(started_at(ps, False) - started_at(proc, True)) < 2, (ps, proc)  # ps's to the second
    monkeypatch.setenv("PATH", str(tmp_path))  # only ps is asked: without it, no driver is found
    with pytest.raises(FileNotFoundError):
        lease._process(os.getpid())
    assert lease._driver() is None and lease._process(os.getpid(), True) is not None


def test_ps_tells_a_live_a_zombie_and_a_dead_process_apart_as_proc_does(monkeypatch, tmp_path):
    """The driver seen through ps is alive until it exits (a zombie is not), and a process with its
    pid but another start time is not it; ps failing or saying nonsense: no such process; ps not
    running: no answer, the driver is taken for alive until it gives one."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        by_proc, by_ps = lease._process(child.pid, True), lease._process(child.pid, False)
        assert by_proc[:3] == by_ps[:3] == ("sleep", os.getpid(), False)
        driver = lease.Driver(child.pid, by_ps.started, False)
        assert lease._alive(driver)
        assert not lease._alive(driver._replace(started="Thu Jan 1 00:00:00 1970"))  # a later process with its pid
        child.kill()
        wait_until(lambda: lease._process(child.pid, True).zombie, what="the killed process to be a zombie")
        assert lease._process(child.pid, False)[:3] == ("sleep", os.getpid(), True)
        assert not lease._alive(driver)
    finally:
        child.kill()
        child.wait()
    assert lease._process(child.pid, True) is None and lease._process(child.pid, False) is None
    assert not lease._alive(driver)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError):  # no ps
        lease._process(os.getpid(), False)
    assert lease._alive(lease.Driver(os.getpid(), by_ps.started, False))  # no answer: a live job keeps its table
    line = " ".join([str(os.getppid()), "S", by_ps.started, "java"])
    for script in [f"echo '{line}'; exit 1", "echo 'no such option'", "exit 0", f"echo '{line}' | cut -c -12"]:
        (tmp_path / "ps").write_text(f"#!/bin/sh\n{script}\n")
        (tmp_path / "ps").chmod(0o755)
        assert lease._process(os.getpid(), False) is None, script
    (tmp_path / "ps").write_text(f"#!/bin/sh\necho '{line.replace(' java', ' /Library/Java/bin/java')}'\n")
    assert lease._process(os.getpid(), False) == (  # as macOS's ps shows it: the full path
        "java", os.getppid(), False, by_ps.started)


# The planning worker of an overwrite, a child of a process named java (its driver), on a machine without /proc.
PLANNER = """
import json, sys
from pyspark.sql.types import LongType, StructField, StructType
from connectors.jdbc import JdbcSinkOptions, lease
from connectors.jdbc.overwrite import stage
from connectors.jdbc.task_writer import connect

lease._PROC = False  # as on macOS: ps it is, here and in the holder the lease starts
config = JdbcSinkOptions.from_options({"url": sys.argv[1], "dbtable": sys.argv[2], "truncate": "true"})
with connect(config.connection).cursor() as cursor:
    overwrite, _ = stage(config, StructType([StructField("id", LongType())]), cursor)
print(json.dumps([overwrite.staging[1], lease._driver()]), flush=True)
sys.stdin.read()  # stays, the job's tasks writing, until the test is done
"""


def test_without_proc_a_dead_drivers_staging_table_is_swept_never_a_live_ones(postgres_dsn, pg, unique, tmp_path):
    """The overwrite's planner finds its driver (a ``java`` ancestor) through ps, and its lease's
    holder watches it through ps: a sweep leaves the staging table while the driver lives; when it
    is killed (a zombie, not yet waited for) the lock is released and the next overwrite drops it."""
    pg.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY)")
    (tmp_path / "java").symlink_to(sys.executable)  # a process's name is its program's file name
    tree = str(Path(lease.__file__).parents[2])  # the connectors tested here, in the planner and its holder too
    java = subprocess.Popen([tmp_path / "java", "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
                             sys.executable, "-c", PLANNER, postgres_dsn, unique], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": tree})
    config = JdbcSinkOptions.from_options({"url": postgres_dsn, "dbtable": unique, "truncate": "true"})
    held = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND (classid::bigint << 32 | objid::bigint) = %s")

    def next_overwrite() -> None:  # sweeps, then aborts
        connection = connect(config.connection)
        try:
            with connection.cursor() as cursor:
                overwrite, _ = stage(config, StructType([StructField("id", LongType())]), cursor)
            overwrite.abort(connection)
        finally:
            connection.close()

    try:
        staged, driver = json.loads(java.stdout.readline())
        assert driver[0] == java.pid and driver[2:] == [False], driver  # found through ps, to be watched so
        assert driver[1] == lease._process(java.pid, False).started
        time.sleep(2 * lease.POLL_SECONDS)  # the holder has looked at the live driver through ps
        next_overwrite()
        pg.execute(f"SELECT relname FROM pg_class WHERE relname LIKE '{unique}__overwrite_%'")
        assert pg.fetchall() == [(staged,)]
        java.kill()  # the driver dies; not waited for yet
        wait_until(lambda: lease._process(java.pid, True).zombie, what="the killed driver to be a zombie")
        wait_until(lambda: pg.execute(held, (lease.lock_key(staged),)) or pg.fetchone() == (0,), timeout=15,
                   what="the holder to release the dead driver's lock")
        next_overwrite()
        pg.execute(f"SELECT relname FROM pg_class WHERE relname LIKE '{unique}__overwrite_%'")
        assert pg.fetchall() == []
    finally:
        java.kill()
        java.stdin.close()  # the planner reads to its end
        java.wait()


# --- batch writes: attempts that outlive the job ------------------------------------------------


def batch_sink_id(job) -> str:
    return f"{job.sink_id or 'batch'}:{job.write_id}"  # what JdbcBatchWriter.write keys partitions by


def test_a_losing_attempt_of_a_committed_batch_write_writes_nothing(postgres_dsn, pg, unique):
    # Speculation: attempt A of partition 0 is slow to bring its first rows, attempt B commits the
    # partition, the job commits; A is being killed asynchronously (or its input ended early as if
    # complete) and reaches the database only now, after the commit pruned the write's progress rows.
    pg.execute(f"CREATE TABLE {unique} (id bigint, name text)")  # no key: a row written twice stays twice
    job = batch_writer({"url": f"{postgres_dsn}?application_name={unique}", "dbtable": unique}, SCHEMA, False)
    key = ProgressKey(batch_sink_id(job), 0, 0)
    winner = PartitionWriter(job.plan, key).write(iter(arrow_batches(0, 100, 100)))
    job.commit([winner])
    with pytest.raises(JdbcWriteError, match=f"sink id '{key.sink_id}', batch 0, partition 0: the batch write this "
                                             "task belongs to is committed already.*late attempt"):  # fmt: skip
        PartitionWriter(job.plan, key).write(iter(arrow_batches(0, 100, 100)))
    assert count(pg, unique) == (100, 100)


def test_a_batch_write_leaves_one_tombstone_and_prunes_those_a_day_old(postgres_dsn, pg, unique):
    # Each write is its own sink id: the tombstone of one never stops the next write of the table.
    pg.execute(f"CREATE TABLE {unique} (id bigint, name text)")
    raw = {"url": f"{postgres_dsn}?application_name={unique}", "dbtable": unique}

    def write(first: int) -> str:
        job = batch_writer(raw, SCHEMA, False)
        sink = batch_sink_id(job)
        job.commit([PartitionWriter(job.plan, ProgressKey(sink, 0, p)).write(iter(arrow_batches(first + 50 * p, 50, 50)))
                    for p in range(2)])  # fmt: skip
        return sink

    def progress(sink: str) -> list[tuple]:
        pg.execute("SELECT batch_id, partition_id, row_count FROM connectors_jdbc_progress WHERE sink_id = %s", (sink,))
        return pg.fetchall()

    first = write(0)
    assert progress(first) == [(1, -1, 0)]
    pg.execute("UPDATE connectors_jdbc_progress SET committed_at = now() - interval '25 hours' WHERE sink_id = %s",
               (first,))  # fmt: skip
    second = write(100)
    assert (progress(first), progress(second)) == ([], [(1, -1, 0)])
    assert count(pg, unique) == (200, 200)
