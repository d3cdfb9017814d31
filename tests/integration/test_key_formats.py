"""avro and protobuf KEYS, and protobuf TIMESTAMP/DATE/DECIMAL values, against the real broker, real Spark
and the test schema registry (tests/support/registry_server.py). Producers and readers use confluent-kafka's own
serializers and deserializers; dsflow sits in between."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import pytest

from dsflow.formats.keys import key_schema_text, record_text, typed
from dsflow.core.formats import columns_from_avro
from dsflow.adapters.schemas import register_sink_schemas
from dsflow.load.project import check_project
from support.registry_projects import (
    ENVIRON, new_prefix, produce_raw, raw_records, registry_conf, registry_project, write_project,
)
from support.streaming import run

integration = pytest.mark.integration

KEY_SCHEMA = json.dumps({"type": "record", "name": "OrderKey", "fields": [{"name": "id", "type": "long"}]})
ORDERS = [{"id": i, "amount": float(i % 5), "item": f"item-{i % 3}"} for i in range(15)]


# --- pure ------------------------------------------------------------------------------------------


def test_key_texts_and_schemas() -> None:
    assert record_text({"id": 42}) == "42"
    assert record_text({"item": "a", "id": 7, "ok": True}) == '{"item":"a","id":7,"ok":true}'
    assert record_text("plain") == "plain"
    assert record_text({"ts": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)}) == "2026-01-02T03:04:05.000Z"
    assert typed("2026-01-02 03:04:05", "TIMESTAMP") == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert typed("12.5", "DECIMAL(10, 2)") == Decimal("12.50") and typed("7", "BIGINT") == 7
    assert key_schema_text("avro", "orders", "db.s", []) == '"string"'
    record = key_schema_text("avro", "orders", "db.s", [("item", "VARCHAR"), ("id", "BIGINT")])
    assert columns_from_avro(record) == [("item", "VARCHAR"), ("id", "BIGINT")]
    assert json.loads(record)["name"] == "orders_key"
    from dsflow.formats.proto_schemas import columns_from_proto

    assert columns_from_proto(key_schema_text("protobuf", "orders", "db.s", [])) == [("key", "VARCHAR")]


def test_protobuf_schema_carries_timestamp_date_decimal() -> None:
    from dsflow.formats.proto_schemas import columns_from_proto, schema_text

    columns = [("id", "BIGINT"), ("ts", "TIMESTAMP"), ("day", "DATE"), ("price", "DECIMAL(12, 3)"), ("s", "VARCHAR")]
    assert columns_from_proto(schema_text("r", "db.s", columns)) == columns
    with pytest.raises(ValueError, match="no protobuf mapping"):
        schema_text("r", "db.s", [("a", "ARRAY<TIME>")])


def test_registry_key_format_needs_a_registry(tmp_path) -> None:
    sql = "\nCREATE STREAM s (v BIGINT) WITH ('value.format' = 'json', 'key.format' = 'avro');\n"
    root = write_project(tmp_path, sql, new_prefix())
    stores = root / "stores" / "kafka.yml"
    stores.write_text(stores.read_text().replace("schema_registry: sr", ""))
    result = check_project(root, variables={"bootstrap": "127.0.0.1:1", "registry": "http://127.0.0.1:9"},
                           environ=ENVIRON)
    found = [d for d in result.errors if d.code == "DSF-E122"]
    assert len(found) == 1 and "key.format 'avro'" in found[0].message
    assert (found[0].location.file, found[0].location.line) == ("sql/all.sql", 2)


# --- integration -----------------------------------------------------------------------------------


def _serializer(kind: str, registry: str, schema_or_class, field: str):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient(registry_conf(registry))
    if kind == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        serialize = AvroSerializer(client, schema_or_class)
    else:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        serialize = ProtobufSerializer(schema_or_class, client, {"use.deprecated.format": False})
    where = MessageField.KEY if field == "key" else MessageField.VALUE
    return lambda topic, datum: serialize(datum, SerializationContext(topic, where))


def _avro_keys(registry: str, topic: str, messages: list) -> list:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserialize = AvroDeserializer(SchemaRegistryClient(registry_conf(registry)))
    return [deserialize(m.key(), SerializationContext(topic, MessageField.KEY)) for m in messages]


@integration
def test_avro_keys_in_and_out(tmp_path, broker, spark, schema_registry) -> None:
    prefix = new_prefix()
    project = registry_project(tmp_path, broker, schema_registry, """
        CREATE STREAM orders (id BIGINT, amount DOUBLE, item VARCHAR)
          WITH ('value.format' = 'json', 'key.format' = 'avro');
        CREATE STREAM copied AS SELECT id, item FROM orders WHERE amount > 0;
        CREATE STREAM by_pair AS SELECT item, id, amount FROM orders PARTITION BY item, id;
        CREATE CHANGELOG item_counts AS SELECT item, COUNT(*) AS n FROM orders GROUP BY item;
    """, prefix=prefix)
    source = project.relation("analytics.public.orders").topic
    key = _serializer("avro", schema_registry, KEY_SCHEMA, "key")
    keys = [key(source, {"id": o["id"] * 10}) for o in ORDERS] + [b"not-avro"]
    produce_raw(broker, source, [json.dumps(o).encode() for o in ORDERS] + [b'{"id": 99}'], keys=keys)
    sinks = {name: project.relation(f"analytics.public.{name}") for name in ("copied", "by_pair", "item_counts")}
    registered = {name: register_sink_schemas(project, sink) for name, sink in sinks.items()}
    assert all(r["key_subject"] == f"{sinks[n].topic}-key" for n, r in registered.items())

    for name in sinks:
        run(spark, project, name, tmp_path)

    copied = raw_records(broker, sinks["copied"].topic)  # a carried key: the source key's text as an Avro string
    assert sorted(zip(_avro_keys(schema_registry, sinks["copied"].topic, copied), (json.loads(m.value()) for m in
                  copied), strict=False), key=lambda kv: kv[1]["id"]) == \
        [(str(o["id"] * 10), {"id": o["id"], "item": o["item"]}) for o in ORDERS if o["amount"] > 0]
    pairs = raw_records(broker, sinks["by_pair"].topic)
    assert sorted(_avro_keys(schema_registry, sinks["by_pair"].topic, pairs), key=lambda k: k["id"]) == [
        {"item": o["item"], "id": o["id"]} for o in ORDERS]
    assert {int.from_bytes(m.key()[1:5], "big") for m in pairs} == {registered["by_pair"]["key_schema_id"]}
    counts = raw_records(broker, sinks["item_counts"].topic)
    latest = {}
    for k, m in zip(_avro_keys(schema_registry, sinks["item_counts"].topic, counts), counts, strict=False):
        latest[k["item"]] = json.loads(m.value())["n"]
    assert latest == {f"item-{i}": 5 for i in range(3)}
    # the key that is not Avro is a dead letter of each query, with its key and value as they were
    for name in sinks:
        query = next(q for q in project.queries if q.fqn.endswith(f".{name}"))
        dead = raw_records(broker, project.dlq_topic(query))
        assert [(m.key(), m.value()) for m in dead] == [(b"not-avro", b'{"id": 99}')]
        assert dict(dead[0].headers())["dsflow.error"].decode().startswith("key: not in the Confluent wire format")


def _known_pool():
    from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
    from google.type import date_pb2

    from confluent_kafka.schema_registry.confluent import meta_pb2
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2

    pool = descriptor_pool.DescriptorPool()
    for module in (descriptor_pb2, timestamp_pb2, date_pb2, meta_pb2, decimal_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    return pool


def _payment_classes():
    """The producer's own schemas, written independently of dsflow: a key message and a value message using
    google.protobuf.Timestamp, google.type.Date and confluent.type.Decimal (its precision and scale in
    (confluent.field_meta).params, as Confluent's converters write them)."""
    from google.protobuf import descriptor_pb2, message_factory

    from confluent_kafka.schema_registry.confluent import meta_pb2

    kinds = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="shop/payment.proto", package="shop", syntax="proto3",
                                             dependency=["google/protobuf/timestamp.proto", "google/type/date.proto",
                                                         "confluent/type/decimal.proto", "confluent/meta.proto"])
    payment = fdp.message_type.add(name="Payment")
    payment.field.add(name="id", number=1, type=kinds.TYPE_INT64, label=kinds.LABEL_OPTIONAL)
    for number, (name, kind) in enumerate([("ts", ".google.protobuf.Timestamp"), ("day", ".google.type.Date"),
                                           ("price", ".confluent.type.Decimal")], start=2):
        payment.field.add(name=name, number=number, type=kinds.TYPE_MESSAGE, type_name=kind,
                          label=kinds.LABEL_OPTIONAL)
    params = payment.field[3].options.Extensions[meta_pb2.field_meta].params
    params["precision"], params["scale"] = "10", "2"
    fdp.message_type.add(name="PaymentKey").field.add(name="id", number=1, type=kinds.TYPE_INT64,
                                                      label=kinds.LABEL_OPTIONAL)
    pool = _known_pool()
    pool.Add(fdp)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{n}"))
                 for n in ("Payment", "PaymentKey"))


def _payment(cls, i: int):
    ts = dt.datetime(2026, 3, 1, 12, 0, i, 250_000, tzinfo=dt.timezone.utc)
    unscaled = i * 1234 - 5000  # scale 2: -50.00 .. 122.74
    return cls(id=i, ts={"seconds": int(ts.timestamp()), "nanos": 250_000_000},
               day={"year": 2026, "month": 3, "day": 1 + i}, price={
                   "value": unscaled.to_bytes(4, "big", signed=True), "precision": 10, "scale": 2})


def _decoder(registry: str, subject: str, message: str, field: str):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2, message_factory

    client = SchemaRegistryClient(registry_conf(registry))
    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.ParseFromString(base64.standard_b64decode(client.get_latest_version(subject, fmt="serialized")
                                                  .schema.schema_str))
    pool = _known_pool()
    pool.Add(fdp)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fdp.package}.{message}"))
    deserialize = ProtobufDeserializer(cls, {"use.deprecated.format": False}, client)
    where = MessageField.KEY if field == "key" else MessageField.VALUE
    return lambda topic, data: deserialize(data, SerializationContext(topic, where))


@integration
def test_protobuf_keys_and_timestamp_date_decimal(tmp_path, broker, spark, schema_registry) -> None:
    from dsflow.engine.topics import records, resolve

    prefix = new_prefix()
    payment, payment_key = _payment_classes()
    topic = f"{prefix}payments"
    value = _serializer("protobuf", schema_registry, payment, "value")
    key = _serializer("protobuf", schema_registry, payment_key, "key")
    values = [value(topic, _payment(payment, i)) for i in range(8)]  # registers the subjects
    keys = [key(topic, payment_key(id=i * 100)) for i in range(8)]
    project = registry_project(tmp_path, broker, schema_registry, """
        CREATE STREAM payments WITH ('value.format' = 'protobuf', 'key.format' = 'protobuf');
        CREATE STREAM big_payments AS SELECT id, ts, day, price FROM payments WHERE price > 0 PARTITION BY id;
    """, prefix=prefix)
    produce_raw(broker, topic, values, keys=keys)
    columns = [(c.name, c.type) for c in project.relation("analytics.public.payments").columns]
    assert columns == [("id", "BIGINT"), ("ts", "TIMESTAMP"), ("day", "DATE"), ("price", "DECIMAL(10, 2)")]
    sink = project.relation("analytics.public.big_payments")
    registered = register_sink_schemas(project, sink)

    run(spark, project, "big_payments", tmp_path)

    messages = raw_records(broker, sink.topic)
    read_value = _decoder(schema_registry, f"{sink.topic}-value", "big_payments", "value")
    read_key = _decoder(schema_registry, f"{sink.topic}-key", "big_payments_key", "key")
    got = sorted(((read_key(sink.topic, m.key()), read_value(sink.topic, m.value())) for m in messages),
                 key=lambda kv: kv[0].id)
    expected = [_payment(payment, i) for i in range(8) if i * 1234 - 5000 > 0]
    assert [k.id for k, _ in got] == [e.id for e in expected]
    for (_, v), e in zip(got, expected, strict=False):
        assert (v.ts.seconds, v.ts.nanos) == (e.ts.seconds, e.ts.nanos)
        assert (v.day.year, v.day.month, v.day.day) == (e.day.year, e.day.month, e.day.day)
        unscaled = int.from_bytes(v.price.value, "big", signed=True)
        assert Decimal(unscaled).scaleb(-v.price.scale) == Decimal(int.from_bytes(e.price.value, "big",
                                                                                  signed=True)).scaleb(-2)
    assert {int.from_bytes(m.key()[1:5], "big") for m in messages} == {registered["key_schema_id"]}
    # dsflow topic print decodes the key and the value the same way
    printed = sorted(records(resolve(project, "big_payments"), True, None, 2.0), key=lambda r: int(r["key"]))
    assert [r["key"] for r in printed] == [str(e.id) for e in expected]
    first = printed[0]["value"]
    assert first["ts"] == dt.datetime(2026, 3, 1, 12, 0, expected[0].id, 250_000, tzinfo=dt.timezone.utc)
    assert first["day"] == dt.date(2026, 3, 1 + expected[0].id) and "error" not in printed[0]
    source_printed = list(records(resolve(project, "payments"), True, 1, 2.0))
    assert source_printed[0]["key"] == "0" and source_printed[0]["value"]["price"] == Decimal("-50.00")
