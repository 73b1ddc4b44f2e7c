"""No secret shows, anywhere: a sentinel secret goes through every option and error path of every
connector, and is looked for in every message, repr and log line those produce.

Paths: option parsing (valid secret options, misspelt ones, secrets inside URLs and JSON), repr
and str of every options object and sink callable, errors at query start (the real PostgreSQL
with a wrong password, a Kafka client with bad SASL settings, an object store), errors raised in
Spark tasks, and the logs: the driver's Python logging here, and, in a child process whose
whole output is read, Spark's own log and its Python workers' stderr.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from connectors.core.options import OptionError, Options
from connectors.files import FileSink
from connectors.files.sink.options import FileSinkOptions
from connectors.files.source.options import FileSourceOptions
from connectors.jdbc import JdbcConnectionOptions, JdbcSink
from connectors.jdbc.options import JdbcSinkOptions
from connectors.kafka import KafkaSink
from connectors.kafka.sink.options import KafkaSinkOptions
from connectors.kafka.source.options import KafkaSourceOptions
from connectors.numbers.options import NumberSequenceOptions

SECRET = f"S3cr3t-Sentinel-{uuid.uuid4().hex}"
STORAGE = json.dumps({"key": "testing", "secret": SECRET})
TESTS_DIR = Path(__file__).parent


def assert_hidden(*texts: object) -> None:
    """Neither the secret nor any 8 characters of it (libpq quotes pieces of a URL) in ``texts``."""
    for text in map(str, texts):
        pieces = [SECRET[i : i + 8] for i in range(len(SECRET) - 7) if SECRET[i : i + 8] in text]
        assert not pieces, f"the secret leaks ({pieces[0]!r}) in: {text}"


@pytest.fixture(autouse=True)
def driver_logs(caplog):
    """Every test also checks what the driver's Python logging recorded: the connectors' at every
    level, the rest from INFO (py4j's DEBUG log echoes every call into the JVM, option values
    included: PySpark's own, not the connectors')."""
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="connectors")
    yield
    assert_hidden(caplog.text)


def with_url_password(dsn: str, password: str) -> str:
    user, _, rest = dsn.removeprefix("postgresql://").partition(":")
    return f"postgresql://{user}:{password}@{rest.partition('@')[2]}"


# -- options: parsing, errors, repr -----------------------------------------------------------

NUMBERS = (NumberSequenceOptions, {"end": "9"})
FILE_SOURCE = (FileSourceOptions, {"fileFormat": "json", "path": "/tmp/in"})
FILE_SINK = (FileSinkOptions, {"fileFormat": "json", "path": "/tmp/out"})
KAFKA_SOURCE = (KafkaSourceOptions, {"kafka.bootstrap.servers": "h:9092", "subscribe": "t"})
KAFKA_SINK = (KafkaSinkOptions, {"kafka.bootstrap.servers": "h:9092", "topic": "t"})
JDBC = (JdbcSinkOptions, {"url": "postgresql://h/db", "dbtable": "t"})
KAFKA_SECRETS = ("kafka.sasl.password", "kafka.ssl.key.password", "kafka.ssl.keystore.password",
                 "kafka.sasl.oauthbearer.client.secret", "kafka.ssl.key.pem")  # fmt: skip

CASES = [
    # misspelt secret option names: unknown options, whose values are never shown
    *[(kind, {name: SECRET}) for kind in (NUMBERS, FILE_SOURCE, FILE_SINK, KAFKA_SOURCE, KAFKA_SINK, JDBC)
      for name in ("password", "pasword", "sasl.password", "storageOption", "storage_options")],
    # storageOptions: valid, not JSON, not an object
    *[(kind, {"storageOptions": value}) for kind in (FILE_SOURCE, FILE_SINK)
      for value in (STORAGE, STORAGE[:-1], f"[{STORAGE}]")],
    # kafka.* client secrets, spelt right or wrong, and the Java-only JAAS setting
    *[(kind, {name: SECRET}) for kind in (KAFKA_SOURCE, KAFKA_SINK)
      for name in (*KAFKA_SECRETS, "kafka.sasl.pasword", "kafka.ssl.truststore.password")],
    *[(kind, {"kafka.sasl.jaas.config": f'PlainLoginModule required username="u" password="{SECRET}";'})
      for kind in (KAFKA_SOURCE, KAFKA_SINK)],
    # JDBC: the password option, SSL's, and passwords in URLs, good and bad
    (JDBC, {"password": SECRET}),
    (JDBC, {"sslpassword": SECRET}),
    (JDBC, {"sslpasword": SECRET}),
    (JDBC, {"url": f"postgresql://u:{SECRET}@h/db"}),
    (JDBC, {"url": f"jdbc:postgresql://h/db?user=u&password={SECRET}"}),
    (JDBC, {"url": f"jdbc:postgresql://u:{SECRET}@h/db?unknownParameter=1"}),
    (JDBC, {"url": f"jdbc:mysql://u:{SECRET}@h/db"}),
    (JDBC, {"url": f"postgresql://u:{SECRET[:20]}@{SECRET[20:]}@h/db"}),
    (JDBC, {"url": f"postgresql://u:{SECRET}@[h/db"}),  # not even a URL Python can split
    (JDBC, {"url": f"postgresql://u:{SECRET}@h/db", "batchSize": "0"}),  # another option's error
]


@pytest.mark.parametrize("kind, options", CASES, ids=lambda v: "-".join(v) if isinstance(v, dict) else v[0].__name__)
def test_options_never_show_a_secret(kind, options):
    cls, base = kind
    try:
        parsed = cls.from_options({**base, **options})
    except OptionError as exc:
        assert_hidden(exc, repr(exc))
    else:
        assert_hidden(repr(parsed), str(parsed))


def test_typed_options_never_show_a_secret():
    shown = [repr(JdbcConnectionOptions(url=f"postgresql://u:{SECRET}@h/db", password=SECRET))]
    for bad in ({"url": f"jdbc:mysql://u:{SECRET}@h/db"}, {"connection_check_timeout_seconds": 0}):
        with pytest.raises(OptionError) as info:
            JdbcConnectionOptions(**{"url": f"postgresql://u:{SECRET}@h/db", "password": SECRET, **bad})
        shown.append(info.value)
    assert_hidden(*shown)


def test_sink_callables_never_show_a_secret(tmp_path):
    kafka = KafkaSink(**{"kafka.bootstrap.servers": "h:9092", "topic": "t", "kafka.sasl.password": SECRET})
    jdbc = JdbcSink(url=f"postgresql://u:{SECRET}@h/db", dbtable="t", password=SECRET)
    files = FileSink(str(tmp_path), fileFormat="json", storageOptions=STORAGE)
    assert_hidden(*(text for sink in (kafka, jdbc, files) for text in (repr(sink), str(sink))))


def test_every_secret_option_is_declared_secret():
    """A secret option added later must be declared secret=True (kept out of repr and errors)."""
    from connectors.core.options import is_secret_name

    for cls in (NumberSequenceOptions, FileSourceOptions, FileSinkOptions, KafkaSourceOptions, KafkaSinkOptions,
                JdbcSinkOptions):  # fmt: skip
        assert issubclass(cls, Options)
        for spec in cls.specs().values():
            assert spec.secret == is_secret_name(spec.name), f"{cls.__name__}: {spec.name}"


# -- errors at query start, against the real services ----------------------------------------


def test_jdbc_errors_at_query_start(spark, postgres_dsn, unique):
    def write(**options):
        with pytest.raises(Exception) as info:
            spark.range(1).write.format("connectors.jdbc").options(dbtable=unique, **options).mode("append").save()
        return str(info.value)

    messages = [
        write(url=postgres_dsn, password=SECRET),
        write(url=with_url_password(postgres_dsn, SECRET)),
        write(url=with_url_password(postgres_dsn, f"{SECRET[:20]}@{SECRET[20:]}")),  # libpq: host "<rest>@host"
        write(url=with_url_password(postgres_dsn, f"{SECRET[:20]}/{SECRET[20:]}")),  # libpq: port "<start>"
        write(url=with_url_password(postgres_dsn, f"{SECRET[:20]}%zz{SECRET[20:]}")),  # libpq: the token
        write(url=postgres_dsn, pasword=SECRET),
    ]
    assert sum("password authentication failed" in m for m in messages) == 2
    assert "could not translate host name" in messages[2] and "invalid integer value" in messages[3]
    assert "invalid percent-encoded token" in messages[4] and "unknown option" in messages[5]
    assert_hidden(*messages)


def test_kafka_errors_at_query_start(spark, kafka_bootstrap, unique):
    sasl = {"kafka.bootstrap.servers": kafka_bootstrap, "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "u", "kafka.sasl.password": SECRET,
            "kafka.socket.timeout.ms": "3000"}  # fmt: skip
    messages = []
    for read_options in ({}, {"kafka.sasl.pasword": SECRET}):
        with pytest.raises(Exception) as info:
            (spark.read.format("connectors.kafka").options(**sasl, **read_options)
             .options(subscribe=unique, **{"fetchOffset.numRetries": "1"}).load().collect())  # fmt: skip
        messages.append(str(info.value))
    with pytest.raises(Exception) as info:
        (spark.range(1).selectExpr("CAST(id AS STRING) AS value").write.format("connectors.kafka")
         .options(**sasl, topic=unique, requestTimeout="3s").mode("append").save())  # fmt: skip
    messages.append(str(info.value))
    assert "Broker transport failure" in messages[0] and 'No such configuration property: "sasl.pasword"' in messages[1]
    assert "no broker answered" in messages[2]
    assert_hidden(*messages)


def test_a_kafka_setting_librdkafka_refuses_never_shows_a_secret(kafka_bootstrap):
    """librdkafka quotes a keystore's path when it cannot open it; the error names the option."""
    from connectors.kafka.sink.producer import check_cluster

    with pytest.raises(OptionError) as info:
        check_cluster(KafkaSinkOptions.from_options({
            "kafka.bootstrap.servers": kafka_bootstrap, "topic": "t", "kafka.security.protocol": "ssl",
            "kafka.ssl.keystore.location": f"/nonexistent/{SECRET}.p12", "kafka.ssl.keystore.password": SECRET}))
    assert "option 'kafka.ssl.keystore.location' = '***': librdkafka refuses it" in str(info.value)
    assert_hidden(info.value)


def test_files_errors_at_query_start(spark, s3_server, unique):
    storage = json.dumps({**s3_server.storage_options(), "secret": SECRET})
    messages = []
    for options in ({"storageOptions": storage}, {"storageOptions": storage[:-1]}, {"storageOption": storage}):
        with pytest.raises(Exception) as info:
            spark.read.format("connectors.files").options(fileFormat="json", **options).load(f"s3://{unique}/in").collect()
        messages.append(str(info.value))
    assert "option 'storageOptions' = '***': expected a JSON object" in messages[1]
    assert "option 'storageoption': unknown option" in messages[2]  # Spark lower-cases option names
    assert_hidden(*messages)


# -- errors in tasks, and Spark's own log and its Python workers' output ----------------------


def test_errors_in_tasks_and_every_log_line(tmp_path, postgres_dsn, kafka_bootstrap, s3_server):
    """Tasks fail with the secret in their settings in a child process (its own Spark session)
    whose whole output (driver logging at DEBUG, the JVM's log, the Python workers' stderr) is
    read back."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(TESTS_DIR)}
    storage = {**s3_server.storage_options(), "secret": SECRET}
    run = subprocess.run(
        [sys.executable, "-m", "jobs.secrets_in_tasks", SECRET, postgres_dsn, kafka_bootstrap, json.dumps(storage)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-5000:]
    errors = json.loads(run.stdout.strip().splitlines()[-1])
    assert "password authentication failed" in errors["jdbc wrong password"]
    assert "could not translate host name" in errors["jdbc password libpq cannot parse"]
    assert "delivered nothing" in errors["kafka source with bad SASL"]
    assert "NoSuchBucket" in errors["file sink to a missing bucket"] or "bucket" in errors["file sink to a missing bucket"]
    assert "Lost task" in output or "PythonException" in output  # Spark's log was read too
    assert_hidden(output)
