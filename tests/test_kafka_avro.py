"""avro-confluent keys and values, against the real broker and the real Schema Registry: the
source's decoding (evolution, FAILFAST / PERMISSIVE), the sink's encoding, and interoperability
with confluent-kafka's own AvroSerializer / AvroDeserializer both ways."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import math
import re
import time

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connectors.core import avro
from connectors.core.options import OptionError
from connectors.kafka.source.options import KafkaSourceOptions

FORMAT = "connectors.kafka"

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
]}
# v2 adds a field with a default (a BACKWARD-compatible change)
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}
AT = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def registry(schema_registry_url) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": schema_registry_url})


@pytest.fixture(scope="module")
def admin(kafka_bootstrap) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def topic(admin, unique) -> str:
    admin.create_topics([NewTopic(unique, 1, 1)])[unique].result(30)
    return unique


def order(i: int, **extra) -> dict:
    return {"id": i, "customer": f"c{i % 7}", "amount": i * 1.5, "note": None if i % 3 else f"n{i}", "at": AT, **extra}


def serializer(registry: SchemaRegistryClient, schema: dict) -> AvroSerializer:
    return AvroSerializer(registry, json.dumps(schema), conf={"auto.register.schemas": True})


def produce_with_confluent(bootstrap: str, topic: str, ser: AvroSerializer, rows: list[dict],
                           field: str = MessageField.VALUE) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for row in rows:
        data = ser(row, SerializationContext(topic, field))
        if field == MessageField.VALUE:
            producer.produce(topic, value=data)
        else:
            producer.produce(topic, key=data, value=b"v")
    assert producer.flush(30) == 0


def produce_raw(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def read(spark, bootstrap: str, topic: str, url: str, **options):
    reader = (spark.read.format(FORMAT).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("valueFormat", "avro-confluent").option("schema.registry.url", url))
    return reader.options(**options).load()


# -- source ---------------------------------------------------------------------------------


def test_source_decodes_confluent_records_across_a_schema_evolution(spark, kafka_bootstrap, schema_registry_url,
                                                                     registry, topic):
    """Records written by confluent-kafka's AvroSerializer with v1, then v2 (a field added with a
    default) in the middle of the topic: the reader schema is the subject's latest (v2), the v1
    records get the default."""
    produce_with_confluent(kafka_bootstrap, topic, serializer(registry, ORDER_V1), [order(i) for i in range(5)])
    produce_with_confluent(kafka_bootstrap, topic, serializer(registry, ORDER_V2),
                           [order(i, channel="app") for i in range(5, 8)])
    df = read(spark, kafka_bootstrap, topic, schema_registry_url)
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,customer:string,amount:double,note:string,at:timestamp,channel:string>")
    rows = [r.value.asDict() for r in df.orderBy("offset").collect()]
    assert [r["id"] for r in rows] == list(range(8))
    assert [r["channel"] for r in rows] == ["web"] * 5 + ["app"] * 3
    assert rows[3]["note"] == "n3" and rows[4]["note"] is None
    assert rows[0]["at"].astimezone(datetime.timezone.utc) == AT
    assert rows[6]["amount"] == 9.0 and rows[6]["customer"] == "c6"

    # pinned to v1: the v2 records lose the new field (schema resolution drops it)
    pinned = read(spark, kafka_bootstrap, topic, schema_registry_url, valueSchemaVersion="1")
    assert pinned.schema["value"].dataType.names == ["id", "customer", "amount", "note", "at"]
    assert [r.value.id for r in pinned.orderBy("offset").collect()] == list(range(8))


def test_source_reader_schema_and_key_format(spark, kafka_bootstrap, schema_registry_url, registry, topic):
    key_schema = {"type": "record", "name": "Key", "fields": [{"name": "k", "type": "int"}]}
    produce_with_confluent(kafka_bootstrap, topic, serializer(registry, key_schema),
                           [{"k": i} for i in range(3)], field=MessageField.KEY)
    reader_schema = {"type": "record", "name": "Key", "fields": [{"name": "k", "type": "long"},
                                                                 {"name": "extra", "type": "string", "default": "x"}]}
    df = (spark.read.format(FORMAT).option("kafka.bootstrap.servers", kafka_bootstrap).option("subscribe", topic)
          .option("keyFormat", "avro-confluent").option("keySchema", json.dumps(reader_schema))
          .option("schema.registry.url", schema_registry_url).load())
    assert df.schema["key"].dataType.simpleString() == "struct<k:bigint,extra:string>"
    assert [(r.key.k, r.key.extra, r.value) for r in df.orderBy("offset").collect()] == [
        (i, "x", bytearray(b"v")) for i in range(3)]


def _bad_records(registry: SchemaRegistryClient, topic: str) -> list[bytes]:
    ser = serializer(registry, ORDER_V1)
    good = ser(order(1), SerializationContext(topic, MessageField.VALUE))
    return [
        good,
        b"\x01" + good[1:],                     # wrong magic byte
        b"\x00\x7f\xff\xff\x00" + good[5:],     # an id the registry does not have
        good[:-3],                              # a body cut short
        b"\x00\x00",                            # too short for the header
        good,
    ]


def test_source_failfast_names_topic_partition_offset_and_schema_id(spark, kafka_bootstrap, schema_registry_url,
                                                                    registry, topic):
    produce_raw(kafka_bootstrap, topic, _bad_records(registry, topic))
    with pytest.raises(Exception) as error:
        read(spark, kafka_bootstrap, topic, schema_registry_url).collect()
    message = str(error.value)
    assert f"topic {topic} partition 0 offset 1" in message
    assert "wire format" in message and "mode=PERMISSIVE" in message
    # offset 2, the unknown id, is named with its id when it is the first bad one
    with pytest.raises(Exception) as error:
        read(spark, kafka_bootstrap, topic, schema_registry_url,
             startingOffsets=json.dumps({topic: {"0": 2}})).collect()
    assert f"offset 2 (schema id {0x7fffff00})" in str(error.value)


def test_source_permissive_keeps_raw_bytes_of_bad_records(spark, kafka_bootstrap, schema_registry_url, registry,
                                                          topic):
    records = _bad_records(registry, topic)
    produce_raw(kafka_bootstrap, topic, records)
    df = read(spark, kafka_bootstrap, topic, schema_registry_url, mode="PERMISSIVE",
              columnNameOfCorruptRecord="bad")
    rows = df.orderBy("offset").collect()
    assert [r.value is None for r in rows] == [False, True, True, True, True, False]
    assert [None if r.bad is None else bytes(r.bad) for r in rows] == [None, *records[1:5], None]
    assert rows[5].value.id == 1
    # Without the record too short for a header, a batch takes every header at once: the same verdicts.
    rows = read(spark, kafka_bootstrap, topic, schema_registry_url, mode="PERMISSIVE", columnNameOfCorruptRecord="bad",
                endingOffsets=json.dumps({topic: {"0": 4}})).orderBy("offset").collect()
    assert [None if r.bad is None else bytes(r.bad) for r in rows] == [None, *records[1:4]]
    assert rows[0].value.id == 1


def test_a_given_schema_selects_the_decoded_value_and_bad_records_are_still_named(
        spark, kafka_bootstrap, schema_registry_url, registry, topic):
    records = _bad_records(registry, topic)
    produce_raw(kafka_bootstrap, topic, records)
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "bad"}
    value = read(spark, kafka_bootstrap, topic, schema_registry_url, **options).schema["value"].dataType.simpleString()

    def given(schema: str, **extra):
        reader = spark.read.format(FORMAT).schema(schema).option("kafka.bootstrap.servers", kafka_bootstrap)
        reader = reader.option("subscribe", topic).option("valueFormat", "avro-confluent")
        return reader.option("schema.registry.url", schema_registry_url).options(**extra).load()

    df = given(f"bad binary, value {value}", **options)
    assert df.columns == ["bad", "value"]
    rows = df.collect()  # one partition: in offset order
    assert [r.value is None for r in rows] == [False, True, True, True, True, False]
    assert [None if r.bad is None else bytes(r.bad) for r in rows] == [None, *records[1:5], None]
    with pytest.raises(Exception) as error:  # FAILFAST names the record, though no such column was asked for
        given(f"value {value}").collect()
    assert f"topic {topic} partition 0 offset 1" in str(error.value)


def test_source_options_are_checked_at_query_start(kafka_bootstrap, schema_registry_url, topic):
    base = {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic}
    with pytest.raises(OptionError, match="'schema.registry.url': required with valueFormat avro-confluent"):
        KafkaSourceOptions.from_options({**base, "valueFormat": "avro-confluent"})
    with pytest.raises(OptionError, match="'valueFormat' = 'avro': expected one of raw, avro-confluent"):
        KafkaSourceOptions.from_options({**base, "valueFormat": "avro"})
    with pytest.raises(OptionError, match="'valueSchema' = '\\{\"type\": \"recrd\"\\}': not a valid Avro schema"):
        KafkaSourceOptions.from_options({**base, "valueSchema": '{"type": "recrd"}'})
    secret = KafkaSourceOptions.from_options({**base, "valueFormat": "avro-confluent",
                                              "schema.registry.url": schema_registry_url,
                                              "schema.registry.basic.auth.user.info": "me:hunter2"})
    assert "hunter2" not in repr(secret)
    assert secret.registry_settings()["basic.auth.user.info"] == "me:hunter2"


def test_source_without_a_subject_fails_at_query_start(spark, kafka_bootstrap, schema_registry_url, topic):
    with pytest.raises(Exception, match=f"subject '{topic}-value'"):
        read(spark, kafka_bootstrap, topic, schema_registry_url).schema


# -- the columnar codec ---------------------------------------------------------------------


def fastavro_bodies(schema: dict, rows: list[dict]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    bodies = []
    for row in rows:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
        bodies.append(out.getvalue())
    return bodies


def test_columnar_decoding_matches_fastavro_and_encoding_is_byte_exact():
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "l", "type": "long"}, {"name": "s", "type": "string"}, {"name": "f", "type": "float"},
        {"name": "b", "type": "boolean"}, {"name": "n", "type": ["null", "long"], "default": None},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "a", "type": {"type": "array", "items": ["string", "null"]}},
        {"name": "r", "type": ["null", {"type": "record", "name": "In", "fields": [{"name": "x", "type": "bytes"}]}]},
    ]}
    rows = [{"l": (-1) ** i * i ** 8, "s": "é" * (i % 5), "f": i / 4, "b": i % 2 == 0, "n": None if i % 3 else i,
             "e": "AB"[i % 2], "d": datetime.date(2020, 1, 1) + datetime.timedelta(days=i),
             "t": AT + datetime.timedelta(milliseconds=i), "a": [None if j % 2 else str(j) for j in range(i % 4)],
             "r": None if i % 4 == 0 else {"x": bytes(range(i % 6))}} for i in range(200)]
    bodies = fastavro_bodies(schema, rows)
    decoder = avro.Decoder(json.dumps(schema), avro.parse(schema), avro.arrow_type(avro.parse(schema)))
    assert decoder.columnar
    columnar = decoder._columnar(pa.array(bodies, pa.binary()))
    per_record, bad = decoder._per_record(bodies)
    assert bad == {} and columnar.equals(per_record)
    encoded = avro.Encoder(avro.parse(schema), columnar.type, b"\x00\x00\x00\x00\x09").encode(columnar).to_pylist()
    assert [e[5:] for e in encoded] == bodies and {e[:5] for e in encoded} == {b"\x00\x00\x00\x00\x09"}


@pytest.mark.parametrize("size", [0, 3, 500])  # strings copied by positions (short) and by a mask (long)
def test_strings_of_every_length_are_encoded_byte_exact(size):
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "s", "type": "string"}, {"name": "n", "type": ["null", "string"], "default": None},
        {"name": "l", "type": "long"}]}
    rows = [{"s": "x" * (size + i % 3), "n": None if i % 2 else "é" * i, "l": i} for i in range(50)]
    bodies = fastavro_bodies(schema, rows)
    array = pa.array(rows, avro.arrow_type(avro.parse(schema)))
    assert avro.Encoder(avro.parse(schema), array.type).encode(array).to_pylist() == bodies


def test_edge_values_are_encoded_byte_exact_and_decoded_back():
    """Where a codec can change a value: 38-digit decimals (Python's default context rounds to 28
    digits), decimals as fixed (as Spark and Java tools write them), and millisecond timestamps
    before 1970 (rounded down, as fastavro and Java's Instant round, not toward 1970)."""
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0}},
        {"name": "h", "type": {"type": "fixed", "name": "F", "size": 16, "logicalType": "decimal", "precision": 38,
                               "scale": 37}},
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "lms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}}]}
    utc = datetime.timezone.utc
    rows = [{"d": decimal.Decimal("-" + "9" * 38), "h": decimal.Decimal("-9." + "9" * 37),
             "ms": datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
             "lms": datetime.datetime(1, 1, 1, 0, 0, 0, 1)},
            {"d": decimal.Decimal("9" * 38), "h": decimal.Decimal("1E-37"),
             "ms": datetime.datetime(1, 1, 1, 0, 0, 0, 1001, tzinfo=utc), "lms": datetime.datetime(9999, 12, 31)}]
    spark_types = pa.struct([("d", pa.decimal128(38, 0)), ("h", pa.decimal128(38, 37)),
                             ("ms", pa.timestamp("us", "UTC")), ("lms", pa.timestamp("us"))])
    encoded = avro.Encoder(avro.parse(schema), spark_types).encode(pa.array(rows, spark_types)).to_pylist()
    assert encoded == fastavro_bodies(schema, rows)
    decoder = avro.Decoder(json.dumps(schema), avro.parse(schema), avro.arrow_type(avro.parse(schema)))
    decoded = decoder._columnar(pa.array(encoded, pa.binary())).to_pylist()
    assert [(r["d"], r["h"]) for r in decoded] == [(r["d"], r["h"]) for r in rows]
    assert [r["ms"] for r in decoded] == [datetime.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=utc),
                                          datetime.datetime(1, 1, 1, 0, 0, 0, 1000, tzinfo=utc)]
    assert [r["lms"] for r in decoded] == [datetime.datetime(1, 1, 1), datetime.datetime(9999, 12, 31)]


def test_a_named_type_used_twice_times_and_uuids_are_decoded():
    """A registered schema that defines an enum once and then uses it by name (as Java tools write
    it), with a time-millis and a uuid: the per-record path (an enum in a union) decodes them."""
    schema = {"type": "record", "name": "R", "namespace": "x", "fields": [
        {"name": "k", "type": ["null", {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}]},
        {"name": "ks", "type": {"type": "array", "items": "x.Kind"}},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}}]}
    uuid = "6c5d1b6a-9b1c-4b16-8d1a-3b9f6f0b7a11"
    rows = [{"k": "B", "ks": ["A"], "t": datetime.time(1, 2, 3, 4000), "u": uuid},
            {"k": None, "ks": [], "t": datetime.time(0), "u": uuid}]
    decoder = avro.Decoder(json.dumps(schema), avro.parse(schema), avro.arrow_type(avro.parse(schema)))
    values, bad = decoder.decode(pa.array(fastavro_bodies(schema, rows), pa.binary()))
    assert bad == {} and values.to_pylist() == [{"k": "B", "ks": ["A"], "t": 3_723_004, "u": uuid},
                                                {"k": None, "ks": [], "t": 0, "u": uuid}]


RECORD_A = {"type": "record", "name": "A", "fields": [{"name": "a", "type": "int"}]}
RECORD_B = {"type": "record", "name": "B", "fields": [{"name": "a", "type": "int"}]}


@pytest.mark.parametrize("union, written, spark, decoded", [
    (["null", "int", "string"], [1, "s", None], "struct<member0:int,member1:string>",
     [{"member0": 1, "member1": None}, {"member0": None, "member1": "s"}, None]),
    (["int", "long"], [1, 1 << 40], "bigint", [1, 1 << 40]),
    (["float", "double"], [0.5, 0.1], "double", [0.5, 0.1]),
    # two records alike but for their names: told apart by the name fastavro reads
    ([RECORD_A, RECORD_B], [("x.B", {"a": 2}), ("x.A", {"a": 3})],
     "struct<member0:struct<a:int>,member1:struct<a:int>>",
     [{"member0": None, "member1": {"a": 2}}, {"member0": {"a": 3}, "member1": None}]),
    (["null", RECORD_A, "string"], [{"a": 1}, "s", None], "struct<member0:struct<a:int>,member1:string>",
     [{"member0": {"a": 1}, "member1": None}, {"member0": None, "member1": "s"}, None]),
    # int and long, float and double beside another type: the branch written, though the other holds the value
    ([{"type": "map", "values": "long"}, "long", "int"], [("int", -1), ("long", 7), {"k": 1}],
     "struct<member0:map<string,bigint>,member1:bigint,member2:int>",
     [{"member0": None, "member1": None, "member2": -1}, {"member0": None, "member1": 7, "member2": None},
      {"member0": [("k", 1)], "member1": None, "member2": None}]),
    (["null", "string", "float", "double"], [("double", 1.5), ("float", 2.5), None],
     "struct<member0:string,member1:float,member2:double>",
     [{"member0": None, "member1": None, "member2": 1.5}, {"member0": None, "member1": 2.5, "member2": None}, None]),
])
def test_unions_of_several_types_are_read_as_spark_avro_reads_them(union, written, spark, decoded):
    """int and long as bigint, float and double as double, any other union as a struct of one member
    per non-null branch (member0, member1, ... in branch order), only the branch written set."""
    schema = {"type": "record", "name": "R", "namespace": "x", "fields": [{"name": "u", "type": union}]}
    parsed = avro.parse(schema)
    data_type, nullable = avro.spark_type(parsed["fields"][0]["type"])
    assert (data_type.simpleString(), nullable) == (spark, "null" in union)
    assert avro.read_type(parsed).simpleString() == f"struct<u:{spark}>"
    decoder = avro.Decoder(json.dumps(schema), parsed, avro.arrow_type(parsed))
    values, bad = decoder.decode(pa.array(fastavro_bodies(schema, [{"u": v} for v in written]), pa.binary()))
    assert bad == {} and values.to_pylist() == [{"u": v} for v in decoded]


@pytest.mark.parametrize("written", ["string", "bytes"])
@pytest.mark.parametrize("columnar", [True, False])
def test_strings_that_are_not_utf8_keep_their_bytes(written, columnar):
    """A string that is not UTF-8, written as a string or as bytes read as a string, keeps its bytes, as
    spark-avro keeps them (Spark's rows show U+FFFD where Java decodes them so): no bad record."""
    texts = [b"ok", b"a\xffb", b"\xed\xa0\x80x", "é".encode()]
    fields = [{"name": "s", "type": written}] + ([] if columnar else [{"name": "m", "type": {"type": "map",
                                                                                              "values": "int"}}])
    writer = {"type": "record", "name": "R", "fields": fields}
    as_bytes = {**writer, "fields": [{"name": "s", "type": "bytes"}, *fields[1:]]}
    reader = avro.parse({**writer, "fields": [{"name": "s", "type": "string"}, *fields[1:]]})
    decoder = avro.Decoder(json.dumps(writer), reader, avro.arrow_type(reader))
    values, bad = decoder.decode(pa.array(fastavro_bodies(as_bytes, [{"s": t, "m": {}} for t in texts]), pa.binary()))
    strings = values.field("s")
    binary = {pa.string(): pa.binary(), pa.large_string(): pa.large_binary()}[strings.type]
    assert bad == {} and strings.view(binary).to_pylist() == texts


def _entries(name: str, values: str) -> dict:
    """A map's schema as the array of key (bytes) and value records its bytes on the wire also are."""
    return {"type": "array", "items": {"type": "record", "name": name,
                                       "fields": [{"name": "key", "type": "bytes"}, {"name": "value", "type": values}]}}


@pytest.mark.parametrize("block", [False, True])
def test_map_keys_that_are_not_utf8_keep_their_bytes(block):
    """A map key that is not UTF-8 (fastavro reads keys as text) keeps its bytes, as spark-avro keeps them,
    at any depth: no bad record, nor a failed block; a key written twice is its last value, as in Spark."""
    texts = {"type": "map", "values": "string"}
    writer = {"type": "record", "name": "R", "fields": [
        {"name": "m", "type": {"type": "map", "values": "long"}}, {"name": "n", "type": ["null", texts]},
        {"name": "u", "type": ["string", texts]}, {"name": "a", "type": {"type": "array", "items": texts}}]}
    as_entries = {**writer, "fields": [
        {"name": "m", "type": _entries("M", "long")}, {"name": "n", "type": ["null", _entries("N", "string")]},
        {"name": "u", "type": ["string", _entries("U", "string")]},
        {"name": "a", "type": {"type": "array", "items": _entries("A", "string")}}]}
    entries = [{"key": b"a\xffb", "value": 1}, {"key": b"ok", "value": 2}, {"key": b"a\xffb", "value": 3}]
    text = [{"key": b"\xed\xa0\x80", "value": "v"}]
    rows = [{"m": entries, "n": text, "u": text, "a": [text, []]}, {"m": [], "n": None, "u": "s", "a": []}]
    parsed = avro.parse(writer)
    decoder = avro.Decoder(json.dumps(writer), parsed, avro.arrow_type(parsed))
    bodies = fastavro_bodies(as_entries, rows)
    values, bad = (decoder.decode_block(2, b"".join(bodies)), {}) if block else decoder.decode(pa.array(bodies,
                                                                                                         pa.binary()))
    key = [(b"\xed\xa0\x80", b"v")]
    assert bad == {} and values.type == avro.arrow_type(parsed)
    assert values.view(avro._as_binary(values.type)).to_pylist() == [
        {"m": [(b"a\xffb", 3), (b"ok", 2)], "n": key, "u": {"member0": None, "member1": key}, "a": [key, []]},
        {"m": [], "n": None, "u": {"member0": b"s", "member1": None}, "a": []}]


def test_unions_are_resolved_branch_by_branch():
    """An evolved union: each branch written is read as the reader's branch of its type (or the
    first it promotes to), wherever that branch now is; a plain type read into a union too."""
    writer = {"type": "record", "name": "R", "namespace": "x", "fields": [
        {"name": "u", "type": ["null", "int", RECORD_A, "string"]}, {"name": "p", "type": "int"}]}
    reader = {**writer, "fields": [{"name": "u", "type": ["null", "string", RECORD_A, "long"]},
                                   {"name": "p", "type": [RECORD_B, "long"]}]}
    parsed = avro.parse(reader)
    decoder = avro.Decoder(json.dumps(writer), parsed, avro.arrow_type(parsed))
    rows = [{"u": 7, "p": 1}, {"u": {"a": 1}, "p": 2}, {"u": "s", "p": 3}, {"u": None, "p": 4}]
    values, bad = decoder.decode(pa.array(fastavro_bodies(writer, rows), pa.binary()))
    unions = [{"member0": None, "member1": None, "member2": 7}, {"member0": None, "member1": {"a": 1}, "member2": None},
              {"member0": "s", "member1": None, "member2": None}, None]
    assert bad == {} and values.to_pylist() == [{"u": u, "p": {"member0": None, "member1": p}}
                                                for u, p in zip(unions, range(1, 5))]


MEMBERS = pa.struct([("member0", pa.int32()), ("member1", pa.string())])
RECORDS = pa.struct([("member0", pa.struct([("a", pa.int32())])), ("member1", pa.struct([("a", pa.int32())]))])


@pytest.mark.parametrize("union, column, values, branches, read_back", [
    # the struct a union is read as: the first member set picks the branch; none set is null
    (["null", "int", "string"], MEMBERS, [{"member0": 1, "member1": None}, {"member0": None, "member1": "s"}, None,
                                          {"member0": None, "member1": None}, {"member0": 2, "member1": "x"}],
     [1, 2, 0, 0, 1], [{"member0": 1, "member1": None}, {"member0": None, "member1": "s"}, None, None,
                       {"member0": 2, "member1": None}]),
    ([RECORD_A, RECORD_B], RECORDS, [{"member0": None, "member1": {"a": 2}}, {"member0": {"a": 3}, "member1": None}],
     [1, 0], None),
    # a plain column: the branch read as its type (a long in int and long is a long), else the first holding it
    (["int", "long"], pa.int64(), [1, 1 << 40], [1, 1], None),
    (["null", "float", "double"], pa.float64(), [0.5, None], [2, 0], None),
    (["int", "string"], pa.string(), ["a"], [1], [{"member0": None, "member1": "a"}]),
    (["string"], pa.string(), ["a"], [0], None),
])
def test_unions_are_written_as_spark_avro_writes_them(union, column, values, branches, read_back):
    """What the source reads a union as is written back to the branch it came from, so a topic of
    such records can be read and written again with its subject's schema; Spark's to_avro does alike."""
    schema = {"type": "record", "name": "R", "namespace": "x", "fields": [{"name": "u", "type": union}]}
    parsed, arrow = avro.parse(schema), pa.struct([("u", column)])
    bodies = avro.Encoder(parsed, arrow).encode(pa.array([{"u": v} for v in values], arrow)).to_pylist()
    assert [body[0] // 2 for body in bodies] == branches  # the branch index (zig-zag), first in the record
    decoder = avro.Decoder(json.dumps(schema), parsed, avro.arrow_type(parsed))
    decoded, bad = decoder.decode(pa.array(bodies, pa.binary()))
    assert bad == {} and decoded.to_pylist() == [{"u": v} for v in (values if read_back is None else read_back)]


@pytest.mark.parametrize("union, column, message", [
    (["int", "string"], MEMBERS, "u is null \\(no member set\\) in a record, but its Avro union has no null branch"),
    (["int", "string"], pa.float64(), "u is double, which no branch of its Avro union \\[\"int\", \"string\"\\] holds"),
])
def test_a_union_refuses_what_it_cannot_hold(union, column, message):
    schema = {"type": "record", "name": "R", "fields": [{"name": "u", "type": union}]}
    arrow = pa.struct([("u", column)])
    with pytest.raises(avro.AvroError, match=message):
        avro.Encoder(avro.parse(schema), arrow).encode(pa.array([{"u": {"member0": None, "member1": None}
                                                                       if pa.types.is_struct(column) else 1.5}], arrow))


def test_a_missing_column_is_written_as_its_default_in_avros_terms():
    """A schema field the data lacks is written as its default, given in the underlying type: byte
    code points for bytes, fixed and decimals (not UTF-8), the first branch for a union."""
    fields = [{"name": "id", "type": "long"},
              {"name": "b", "type": "bytes", "default": "\u00ff"},
              {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}, "default": "\u00ff\u0001"},
              {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
               "default": "\u0001\u0000"},
              {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 1500},
              {"name": "u", "type": ["int", "string"], "default": 7},
              {"name": "n", "type": ["null", "string"], "default": None}]
    schema = {"type": "record", "name": "R", "fields": fields}
    arrow = pa.struct([("id", pa.int64())])
    bodies = avro.Encoder(avro.parse(schema), arrow).encode(pa.array([{"id": 1}], arrow)).to_pylist()
    assert bodies == fastavro_bodies(schema, [{"id": 1, "b": b"\xff", "f": b"\xff\x01", "d": decimal.Decimal("2.56"),
                                               "ms": 1500, "u": 7, "n": None}])


@pytest.mark.parametrize("kind, value", [
    (["null", {"type": "enum", "name": "E", "symbols": ["A", "B"]}], "B"),
    ({"type": "array", "items": {"type": "enum", "name": "E", "symbols": ["A", "B"]}}, ["A", "B"]),
    ({"type": "record", "name": "I", "fields": [{"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}}]},
     {"e": "A"}),
])
def test_enums_polars_cannot_read_take_the_other_path_without_a_panic(kind, value, capfd):
    """polars' Avro reader panics (a Rust backtrace per batch) on enums anywhere but a plain field."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "k", "type": kind}]}
    decoder = avro.Decoder(json.dumps(schema), avro.parse(schema), avro.arrow_type(avro.parse(schema)))
    values, bad = decoder.decode(pa.array(fastavro_bodies(schema, [{"k": value}]), pa.binary()))
    assert bad == {} and values.to_pylist() == [{"k": value}]
    assert "panicked" not in capfd.readouterr().err


@pytest.mark.parametrize("columnar", [True, False])
def test_a_default_means_what_avro_says_on_both_paths(columnar):
    """A reader field the writer lacks gets its default, which Avro gives in the underlying type:
    milliseconds for timestamp-millis, byte code points for bytes, fixed and decimals (fastavro
    alone would give microseconds, UTF-8 bytes and fail on a decimal)."""
    writer = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    added = [("ms", {"type": "long", "logicalType": "timestamp-millis"}, 1000), ("b", "bytes", "\u00ff"),
             ("f", {"type": "fixed", "name": "F", "size": 2}, "\u00ff\u0000"),
             ("d", {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}, "\u0001\u0000")]
    reader = {**writer, "fields": [*writer["fields"], *({"name": n, "type": t, "default": d} for n, t, d in added)]}
    decoder = avro.Decoder(json.dumps(writer), avro.parse(reader), avro.arrow_type(avro.parse(reader)))
    bodies = fastavro_bodies(writer, [{"id": 1}])
    values = decoder._columnar(pa.array(bodies, pa.binary())) if columnar else decoder._per_record(bodies)[0]
    assert values.to_pylist() == [{"id": 1, "ms": datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.timezone.utc),
                                   "b": b"\xff", "f": b"\xff\x00", "d": decimal.Decimal("2.56")}]


def _defaults_read(path: str, added: list[tuple]) -> list[dict]:
    """A record of one field ``id`` read, on one decoding path, with a reader schema that adds ``added``'s
    ``(name, type, default)`` fields."""
    writer = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    reader = avro.parse({**writer, "fields": [*writer["fields"], *({"name": n, "type": t, "default": d}
                                                                   for n, t, d in added)]})
    decoder = avro.Decoder(json.dumps(writer), reader, avro.arrow_type(reader))
    bodies = fastavro_bodies(writer, [{"id": 1}])
    return {"columnar": lambda: decoder._columnar(pa.array(bodies, pa.binary())),
            "per_record": lambda: decoder._per_record(bodies)[0],
            "block": lambda: decoder.decode_block(1, bodies[0])}[path]().to_pylist()


@pytest.mark.parametrize("path", ["columnar", "per_record", "block"])
def test_float_defaults_given_as_strings_are_read_as_java_reads_them(path):
    """A float or double field's default given as a JSON string ("NaN", "Infinity", ...) is the number Java's
    Double.parseDouble makes of it, as spark-avro reads it (checked against Spark 4.2), also in a nested record."""
    values = _defaults_read(path, [
        ("nan", "double", "NaN"), ("ninf", "float", "-Infinity"), ("pinf", "double", "+Infinity"),
        ("d", "double", " 1.5d "), ("hex", "double", "0x1p3"), ("big", "float", "1e40"),
        ("r", {"type": "record", "name": "I", "fields": [{"name": "f", "type": "double", "default": "Infinity"}]}, {})])
    assert math.isnan(values[0].pop("nan")) and values == [
        {"id": 1, "ninf": -math.inf, "pinf": math.inf, "d": 1.5, "hex": 8.0, "big": math.inf, "r": {"f": math.inf}}]


@pytest.mark.parametrize("path", ["columnar", "per_record", "block"])
def test_union_defaults_are_of_the_first_branch_their_json_fits(path):
    """A union's default is of the first branch its JSON fits, as Avro's Java reader (so Spark) encodes it:
    ``["null", "double"]`` with 1.5 is 1.5, not null (checked against spark-avro 4.2 in test_file_avro)."""
    values = _defaults_read(path, [
        ("a", ["null", "double"], 1.5), ("b", ["null", "string"], "x"), ("c", ["int", "null"], None),
        ("e", ["null", "string", "long"], 5), ("g", ["null", "boolean"], True),
        ("h", ["null", {"type": "array", "items": "int"}], [1, 2])])
    assert values == [{"id": 1, "a": 1.5, "b": "x", "c": None, "e": {"member0": None, "member1": 5}, "g": True,
                       "h": [1, 2]}]


@pytest.mark.parametrize("kind, default, message", [
    ("double", "nan", "the default of the field 'x', 'nan', is not a double"),
    ("float", "inf", "the default of the field 'x', 'inf', is not a float"),
    (["null", "double"], "NaN", "the default of the field 'x', 'NaN', is not one of its union"),
    (["float", "null"], "Infinity", "the default of the field 'x', 'Infinity', is not one of its union"),
    ({"type": "array", "items": "double"}, ["NaN"], "the default of the field 'x', [\"NaN\"], holds a string"),
    ({"type": "map", "values": "float"}, {"k": "1"}, "the default of the field 'x', {\"k\": \"1\"}, holds a string"),
    ({"type": "record", "name": "I", "fields": [{"name": "f", "type": "double"}]}, {"f": "NaN"},
     "the default of the field 'x', {\"f\": \"NaN\"}, holds a string"),
])
def test_float_defaults_java_refuses_fail_naming_the_field(kind, default, message):
    """Where Spark fails on such a default (Java's NumberFormatException, or Avro's "Invalid default for
    field x" in a union or for a string inside an array, map or record default; checked on spark-avro 4.2),
    whether or not the writer has the field: an error that names the field, not pyarrow's when it is used."""
    writer = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    reader = avro.parse({**writer, "fields": [*writer["fields"], {"name": "x", "type": kind, "default": default}]})
    with pytest.raises(avro.AvroTypeError, match=re.escape(message)):
        avro.Decoder(json.dumps(writer), reader, avro.arrow_type(reader))


@pytest.mark.parametrize("avro_type, column, message", [
    ("int", pa.float64(), "x is double, which its Avro type \"int\" cannot hold exactly"),
    ("int", pa.int64(), "x is int64, which its Avro type \"int\" cannot hold exactly"),
    ("float", pa.float64(), "x is double, which"),
    ("string", pa.int64(), "x is int64, which"),
    ("long", pa.string(), "x is string, which"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, pa.decimal128(10, 4),
     "x is decimal128\\(10, 4\\), which"),
    ({"type": "map", "values": "int"}, pa.map_(pa.int32(), pa.int32()), "x has int32 keys, but Avro maps need string"),
])
def test_a_column_its_schema_cannot_hold_exactly_is_refused(avro_type, column, message):
    """A given schema must hold every value of the column: a double is not truncated into an int,
    a long does not overflow an int, a scale is not cut (as spark-avro's to_avro refuses them)."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": avro_type}]}
    with pytest.raises(avro.AvroError, match=message):
        avro.Encoder(avro.parse(schema), pa.struct([("x", column)]))


def test_misaligned_bodies_are_found_record_by_record():
    """A block has no record boundaries: a body with a byte too many would shift the next one."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string"}]}
    bodies = fastavro_bodies(schema, [{"a": i, "b": f"s{i}"} for i in range(4)])
    bodies[1] += b"\x01"
    decoder = avro.Decoder(json.dumps(schema), avro.parse(schema), avro.arrow_type(avro.parse(schema)))
    values, bad = decoder.decode(pa.array(bodies, pa.binary()))
    assert list(bad) == [1] and "left after the record" in bad[1]
    assert values.to_pylist() == [{"a": 0, "b": "s0"}, None, {"a": 2, "b": "s2"}, {"a": 3, "b": "s3"}]


# -- sink -----------------------------------------------------------------------------------


def consume_all(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    messages, deadline = [], time.monotonic() + timeout
    while len(messages) < count and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            messages.append(message)
    consumer.close()
    assert len(messages) == count
    return messages


def write(df, bootstrap: str, topic: str, url: str, **options) -> None:
    (df.write.format(FORMAT).option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .option("valueFormat", "avro-confluent").option("schema.registry.url", url).options(**options)
     .mode("append").save())


ORDERS_DDL = ("value struct<id:bigint not null,customer:string,amount:double,tags:array<string>,"
              "at:timestamp,day:date,price:decimal(10,2)>")


def orders_df(spark, ids, with_channel: bool = False):
    ddl = ORDERS_DDL[:-1] + ",channel:string>" if with_channel else ORDERS_DDL
    rows = []
    for i in ids:
        value = {"id": i, "customer": None if i % 4 == 0 else f"c{i}", "amount": i / 2, "tags": ["a"] * (i % 3),
                 "at": AT, "day": datetime.date(2026, 1, i % 28 + 1), "price": decimal.Decimal(i) / 100}
        if with_channel:
            value["channel"] = "app"
        rows.append((value,))
    return spark.createDataFrame(rows, ddl)


def test_sink_records_are_read_by_confluents_deserializer_across_an_evolution(
        spark, kafka_bootstrap, schema_registry_url, registry, topic):
    """Our sink writes v1 (derived from the Spark type, registered), then v2 with a nullable field
    added; confluent-kafka's AvroDeserializer reads every record, with each writer schema and
    resolved to v2."""
    write(orders_df(spark, range(6)), kafka_bootstrap, topic, schema_registry_url)
    write(orders_df(spark, range(6, 9), with_channel=True), kafka_bootstrap, topic, schema_registry_url)
    versions = registry.get_versions(f"{topic}-value")
    assert len(versions) == 2
    v2 = registry.get_version(f"{topic}-value", versions[-1]).schema.schema_str

    messages = consume_all(kafka_bootstrap, topic, 9)
    plain, resolved = AvroDeserializer(registry), AvroDeserializer(registry, v2)
    context = SerializationContext(topic, MessageField.VALUE)
    values = sorted((plain(m.value(), context) for m in messages), key=lambda v: v["id"])
    assert [v["id"] for v in values] == list(range(9))
    assert values[1] == {"id": 1, "customer": "c1", "amount": 0.5, "tags": ["a"], "at": AT,
                         "day": datetime.date(2026, 1, 2), "price": decimal.Decimal("0.01")}
    assert values[4]["customer"] is None and values[7]["channel"] == "app"
    assert "channel" not in values[0]
    assert {resolved(m.value(), context).get("channel", "absent") for m in messages} == {None, "app"}

    # and our own source reads it back through the registry
    back = read(spark, kafka_bootstrap, topic, schema_registry_url).select("value.*").orderBy("id").collect()
    assert [(r.id, r.channel) for r in back] == [(i, None) for i in range(6)] + [(i, "app") for i in range(6, 9)]


def test_sink_key_and_value_exactly_once(spark, kafka_bootstrap, schema_registry_url, registry, topic, unique):
    df = spark.createDataFrame([((i,), (i, f"v{i}")) for i in range(5)], "key struct<k:int>, value struct<n:int,s:string>")
    write(df, kafka_bootstrap, topic, schema_registry_url, keyFormat="avro-confluent",
          deliveryGuarantee="exactly-once", transactionalIdPrefix=unique)
    context = SerializationContext(topic, MessageField.KEY)
    keys = AvroDeserializer(registry)
    got = sorted((keys(m.key(), context)["k"], AvroDeserializer(registry)(m.value(), SerializationContext(
        topic, MessageField.VALUE))["s"]) for m in consume_all(kafka_bootstrap, topic, 5))
    assert got == [(i, f"v{i}") for i in range(5)]


def test_sink_compatibility_refusal_fails_at_query_start(spark, kafka_bootstrap, schema_registry_url, registry,
                                                         topic):
    from confluent_kafka.schema_registry import ConfigCompatibilityLevel, ServerConfig  # noqa: PLC0415

    subject = f"{topic}-value"
    registry.register_schema(subject, Schema(json.dumps(ORDER_V1), "AVRO"))
    registry.set_config(subject, ServerConfig(compatibility=ConfigCompatibilityLevel.BACKWARD))
    # a new field without a default: readers of the new schema cannot read the old records
    df = spark.createDataFrame([((1, "x"),)], "value struct<id:bigint not null,extra:string not null>")
    with pytest.raises(Exception, match=f"subject '{subject}': registering the schema failed: HTTP 409"):
        write(df, kafka_bootstrap, topic, schema_registry_url)
    with pytest.raises(Exception, match="looking the schema up \\(autoRegisterSchemas=false\\) failed"):
        write(df, kafka_bootstrap, topic, schema_registry_url, autoRegisterSchemas="false")
    assert len(registry.get_versions(subject)) == 1


def test_sink_rejects_values_its_schema_cannot_hold(spark, kafka_bootstrap, schema_registry_url, topic):
    raw = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="needs a struct column 'value'"):
        write(raw, kafka_bootstrap, topic, schema_registry_url)
    schema = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}
    nulls = spark.createDataFrame([(("a",),), ((None,),)], "value struct<s:string>")
    with pytest.raises(Exception, match="cannot encode the value with schema id \\d+: s is null in a record"):
        write(nulls, kafka_bootstrap, topic, schema_registry_url, valueSchema=json.dumps(schema))
    doubles = spark.createDataFrame([((1.5,),)], "value struct<s:double>")
    with pytest.raises(Exception, match="column .value.: s is double, which its Avro type \"string\" cannot hold"):
        write(doubles, kafka_bootstrap, topic, schema_registry_url, valueSchema=json.dumps(schema))


def test_stream_decodes_in_every_micro_batch(spark, kafka_bootstrap, schema_registry_url, registry, topic, tmp_path):
    """The stream reader is pickled to the tasks with its decoder; AvailableNow in 2 micro-batches."""
    produce_with_confluent(kafka_bootstrap, topic, serializer(registry, ORDER_V1), [order(i) for i in range(6)])
    stream = (spark.readStream.format(FORMAT).option("kafka.bootstrap.servers", kafka_bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 3)
              .option("valueFormat", "avro-confluent").option("schema.registry.url", schema_registry_url).load())
    query = (stream.select("value.id", "value.customer").writeStream.format("memory").queryName(f"avro_{topic}")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == 2
    assert sorted(tuple(r) for r in spark.table(f"avro_{topic}").collect()) == [(i, f"c{i % 7}") for i in range(6)]


def test_sink_writes_with_the_subjects_registered_version(spark, kafka_bootstrap, schema_registry_url, registry,
                                                          topic):
    """valueSchemaVersion: the subject's schema (its names, union order, namespace) is used as it
    is; the struct's fields are matched by name, in any order, and nothing is registered."""
    subject = f"{topic}-value"
    schema_id = registry.register_schema(subject, Schema(json.dumps(ORDER_V2), "AVRO"))
    df = spark.createDataFrame([(("n1", 2.5, AT, 7, None),)],
                               "value struct<customer:string,amount:double,at:timestamp,id:bigint,note:string>")
    write(df, kafka_bootstrap, topic, schema_registry_url, valueSchemaVersion="latest")
    [message] = consume_all(kafka_bootstrap, topic, 1)
    assert message.value()[:5] == b"\x00" + schema_id.to_bytes(4, "big")
    got = AvroDeserializer(registry)(message.value(), SerializationContext(topic, MessageField.VALUE))
    assert got == {"id": 7, "customer": "n1", "amount": 2.5, "note": None, "at": AT, "channel": "web"}
    assert len(registry.get_versions(subject)) == 1


def test_a_topic_with_unions_is_read_and_written_again_with_its_schema(spark, kafka_bootstrap, schema_registry_url,
                                                                       registry, admin, topic):
    """Kafka -> Kafka with the subject's own schema: unions of several types (read as structs of
    members) go back to the branches they came from, as confluent-kafka's deserializer reads them."""
    schema = {"type": "record", "name": "Event", "namespace": "x", "fields": [
        {"name": "id", "type": "long"},
        {"name": "u", "type": ["null", "int", "string", RECORD_A]},
        {"name": "n", "type": ["int", "long"]}]}
    rows = [{"id": 1, "u": 5, "n": 1 << 40}, {"id": 2, "u": "s", "n": 3}, {"id": 3, "u": {"a": 9}, "n": -1},
            {"id": 4, "u": None, "n": 0}]
    produce_with_confluent(kafka_bootstrap, topic, serializer(registry, schema), rows)
    out = f"{topic}-out"
    admin.create_topics([NewTopic(out, 1, 1)])[out].result(30)
    registry.register_schema(f"{out}-value", Schema(json.dumps(schema), "AVRO"))
    read(spark, kafka_bootstrap, topic, schema_registry_url).select("value").write.format(FORMAT) \
        .option("kafka.bootstrap.servers", kafka_bootstrap).option("topic", out) \
        .option("valueFormat", "avro-confluent").option("schema.registry.url", schema_registry_url) \
        .option("valueSchemaVersion", "latest").mode("append").save()
    deserialize = AvroDeserializer(registry)
    got = [deserialize(m.value(), SerializationContext(out, MessageField.VALUE))
           for m in consume_all(kafka_bootstrap, out, len(rows))]
    assert sorted(got, key=lambda r: r["id"]) == rows


UNION_VALUE = {"type": "record", "name": "U", "fields": [
    {"name": "id", "type": "long"},
    {"name": "u", "type": ["null", "int", "string", {"type": "record", "name": "Rec", "namespace": "a",
                                                      "fields": [{"name": "x", "type": "int"}]}]}]}


def test_source_names_union_members_as_from_avro_with_stable_identifiers(spark, kafka_bootstrap, schema_registry_url,
                                                                          registry, topic):
    """enableStableIdentifiersForUnionType / stableIdentifierPrefixForUnionType name the members as
    spark-avro does (the naming test_file_avro checks against spark-avro itself), and a conflict of
    type names fails at query start with Spark's reason."""
    produce_with_confluent(kafka_bootstrap, topic, serializer(registry, UNION_VALUE),
                           [{"id": 1, "u": 7}, {"id": 2, "u": "s"}, {"id": 3, "u": {"x": 9}}, {"id": 4, "u": None}])
    df = read(spark, kafka_bootstrap, topic, schema_registry_url, enableStableIdentifiersForUnionType="true",
              datetimeRebaseMode="CORRECTED").select("value.*")
    assert df.schema.simpleString() == ("struct<id:bigint,u:struct<member_int:int,member_string:string,"
                                        "member_Rec:struct<x:int>>>")
    assert sorted(map(tuple, df.selectExpr("id", "u.member_int", "u.member_string", "u.member_Rec.x").collect())) == [
        (1, 7, None, None), (2, None, "s", None), (3, None, None, 9), (4, None, None, None)]
    prefixed = read(spark, kafka_bootstrap, topic, schema_registry_url, enableStableIdentifiersForUnionType="true",
                    stableIdentifierPrefixForUnionType="as_")
    assert prefixed.select("value.u.*").columns == ["as_int", "as_string", "as_Rec"]
    conflict = {**UNION_VALUE, "fields": [{"name": "u", "type": ["int", {"type": "record", "name": "Int", "fields": []}]}]}
    with pytest.raises(Exception, match="name conflict of type name Int"):
        read(spark, kafka_bootstrap, topic, schema_registry_url, valueSchema=json.dumps(conflict),
             enableStableIdentifiersForUnionType="true").schema
    with pytest.raises(Exception, match="'datetimeRebaseMode' = 'LEGACY': only CORRECTED"):
        read(spark, kafka_bootstrap, topic, schema_registry_url, datetimeRebaseMode="LEGACY").schema
