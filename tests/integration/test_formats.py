"""Value formats against a real broker, real Spark and the test schema registry (tests/support/registry_server.py):
avro in and out of a CSAS, columns taken from the registry, primitive formats, the sink's schema registered."""

from __future__ import annotations

import json
import struct
from datetime import datetime, timezone

import pytest

from dsflow.core.formats import avro_schema, columns_from_avro
from dsflow.errors import ProjectError
from dsflow.adapters.schemas import register_sink_schemas
from dsflow.load.project import check_project
from support.registry_projects import (
    ENVIRON, avro_decode, avro_values, new_prefix, produce_raw, raw_records, registry_conf, registry_project,
    write_project,
)
from support.streaming import run

integration = pytest.mark.integration

ORDER_SCHEMA = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "amount", "type": "double"}, {"name": "item", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]})

ORDERS = [{"id": i, "amount": float(i * 7 % 50), "item": f"item-{i % 4}",
           "ts": datetime(2026, 1, 1, 0, 0, i % 60, tzinfo=timezone.utc)} for i in range(40)]


# --- pure ------------------------------------------------------------------------------------------


def test_avro_schema_and_columns_round_trip() -> None:
    columns = [("id", "BIGINT"), ("n", "INT"), ("x", "DOUBLE"), ("ok", "BOOLEAN"), ("s", "VARCHAR"),
               ("t", "TIMESTAMP"), ("d", "DATE"), ("m", "DECIMAL(10, 2)"), ("b", "BINARY")]
    schema = avro_schema("orders", "analytics.public", columns)
    assert json.loads(schema)["namespace"] == "analytics.public"
    assert columns_from_avro(schema) == columns
    with pytest.raises(ValueError, match="no Avro mapping"):
        avro_schema("r", "ns", [("a", "ARRAY<TIME>")])
    with pytest.raises(ValueError, match="union of several types"):
        columns_from_avro(json.dumps({"type": "record", "name": "r", "fields": [{"name": "a", "type": {
            "type": "array", "items": ["int", "string"]}}]}))


# --- integration -----------------------------------------------------------------------------------


@integration
def test_avro_round_trip_through_a_csas(tmp_path, broker, spark, schema_registry) -> None:
    project = registry_project(tmp_path, broker, schema_registry, """
        CREATE STREAM orders (id BIGINT, amount DOUBLE, item VARCHAR, ts TIMESTAMP) WITH ('value.format' = 'avro');
        CREATE STREAM big_orders AS SELECT id, amount * 2 AS doubled, item, ts FROM orders WHERE amount > 10;
    """)
    source = project.relation("analytics.public.orders")
    sink = project.relation("analytics.public.big_orders")
    assert sink.value_format == "avro" and sink.value_subject == f"{sink.topic}-value"
    registered = register_sink_schemas(project, sink)  # what apply does when it creates the sink's topic
    produce_raw(broker, source.topic, avro_values(schema_registry, source.topic, ORDER_SCHEMA, ORDERS))

    run(spark, project, "big_orders", tmp_path)

    messages = raw_records(broker, sink.topic)
    got = sorted(avro_decode(schema_registry, sink.topic, messages), key=lambda r: r["id"])
    expected = [{"id": o["id"], "doubled": o["amount"] * 2, "item": o["item"], "ts": o["ts"]}
                for o in ORDERS if o["amount"] > 10]
    assert got == expected
    assert {int.from_bytes(m.value()[1:5], "big") for m in messages} == {registered["schema_id"]}
    from confluent_kafka.schema_registry import SchemaRegistryClient

    latest = SchemaRegistryClient(registry_conf(schema_registry)).get_latest_version(f"{sink.topic}-value")
    assert latest.schema_id == registered["schema_id"]
    assert columns_from_avro(latest.schema.schema_str) == [("id", "BIGINT"), ("doubled", "DOUBLE"),
                                                           ("item", "VARCHAR"), ("ts", "TIMESTAMP")]


@integration
def test_stream_without_columns_takes_them_from_the_registry(tmp_path, broker, spark, schema_registry) -> None:
    prefix = new_prefix()
    values = avro_values(schema_registry, f"{prefix}orders", ORDER_SCHEMA, ORDERS[:10])  # registers orders-value
    project = registry_project(tmp_path, broker, schema_registry, """
        CREATE STREAM orders WITH ('value.format' = 'avro');
        CREATE STREAM order_items WITH ('value.format' = 'json') AS SELECT id, item FROM orders;
    """, prefix=prefix)
    columns = [(c.name, c.type) for c in project.relation("analytics.public.orders").columns]
    assert columns == [("id", "BIGINT"), ("amount", "DOUBLE"), ("item", "VARCHAR"), ("ts", "TIMESTAMP")]
    produce_raw(broker, f"{prefix}orders", values)

    run(spark, project, "order_items", tmp_path)

    got = sorted((json.loads(m.value()) for m in raw_records(broker, f"{prefix}order_items")), key=lambda r: r["id"])
    assert got == [{"id": o["id"], "item": o["item"]} for o in ORDERS[:10]]


@integration
def test_missing_subject_is_a_load_error_with_its_location(tmp_path, schema_registry) -> None:
    root = write_project(tmp_path, "\n\nCREATE STREAM nowhere WITH ('value.format' = 'avro');\n", new_prefix())
    result = check_project(root, variables={"bootstrap": "127.0.0.1:1", "registry": schema_registry},
                           environ=ENVIRON)
    found = [d for d in result.errors if d.code == "DSF-E123"]
    assert len(found) == 1
    assert (found[0].location.file, found[0].location.line) == ("sql/all.sql", 3)
    assert "nowhere-value" in found[0].message and "is not in the registry" in found[0].message
    # a registry that does not answer is reported the same way, with the registry's address
    result = check_project(root, variables={"bootstrap": "127.0.0.1:1", "registry": "http://127.0.0.1:9"},
                           environ=ENVIRON)
    assert [d.code for d in result.errors] == ["DSF-E123"]
    assert "127.0.0.1:9" in result.errors[0].message


def test_formats_are_checked_when_loading(tmp_path) -> None:
    root = write_project(tmp_path, """
        CREATE STREAM a (id BIGINT, name VARCHAR) WITH ('value.format' = 'long');
        CREATE STREAM b (v ARRAY<TIME>) WITH ('value.format' = 'avro');
        CREATE STREAM c (v BIGINT) WITH ('value.format' = 'json', 'key.format' = 'xml');
    """, new_prefix())
    (root / "stores" / "kafka.yml").write_text((root / "stores" / "kafka.yml").read_text()
                                               .replace("schema_registry: sr", "schema_registry: nope"))
    with pytest.raises(ProjectError) as err:
        from dsflow.load.project import load_project

        load_project(root, variables={"bootstrap": "127.0.0.1:1", "registry": "http://127.0.0.1:9"}, environ=ENVIRON)
    codes = sorted(d.code for d in err.value.diagnostics)
    assert codes == ["DSF-E032", "DSF-E120", "DSF-E124", "DSF-E124"]
    (root / "stores" / "kafka.yml").write_text((root / "stores" / "kafka.yml").read_text()
                                               .replace("schema_registry: nope", ""))
    result = check_project(root, variables={"bootstrap": "127.0.0.1:1", "registry": "http://127.0.0.1:9"},
                           environ=ENVIRON)
    e122 = [d for d in result.errors if d.code == "DSF-E122"]
    assert len(e122) == 1 and "store 'kafka_main' has no schema registry" in e122[0].message
    assert (e122[0].location.file, e122[0].location.line) == ("sql/all.sql", 3)


@integration
def test_primitive_value_formats(tmp_path, broker, spark, schema_registry) -> None:
    project = registry_project(tmp_path, broker, schema_registry, """
        CREATE STREAM readings (n BIGINT) WITH ('value.format' = 'long', 'key.format' = 'long');
        CREATE STREAM labels WITH ('value.format' = 'string') AS SELECT CONCAT('n=', CAST(n * 10 AS VARCHAR)) AS s
          FROM readings WHERE n % 2 = 0;
        CREATE STREAM halves WITH ('value.format' = 'double') AS SELECT n / 2 AS h FROM readings;
    """)
    numbers = [-3, 0, 1, 2, 2**40, 77, 1000]
    source = project.relation("analytics.public.readings").topic
    produce_raw(broker, source, [struct.pack(">q", n) for n in numbers] + [struct.pack(">q", 5), b"\x01\x02"],
                keys=[struct.pack(">q", n * 100) for n in numbers] + [b"short", struct.pack(">q", 1)])

    run(spark, project, "labels", tmp_path)
    run(spark, project, "halves", tmp_path)

    labels = {struct.unpack(">q", m.key())[0]: m.value().decode()
              for m in raw_records(broker, project.relation("analytics.public.labels").topic)}
    assert labels == {n * 100: f"n={n * 10}" for n in numbers if n % 2 == 0}
    halves = {struct.unpack(">q", m.key())[0]: struct.unpack(">d", m.value())[0]
              for m in raw_records(broker, project.relation("analytics.public.halves").topic)}
    assert halves == {n * 100: n / 2 for n in numbers}
    # a key of the wrong length and a value of the wrong length: dead letters, one for each query
    for query in ("labels", "halves"):
        dlq = next(q for q in project.queries if q.fqn.endswith(query))
        errors = sorted(dict(m.headers())["dsflow.error"].decode()
                        for m in raw_records(broker, project.dlq_topic(dlq)))
        assert errors == ["a long value has 8 bytes, this one has 2", "key: a long key has 8 bytes, this one has 5"]


def _proto_class(fdp, name: str):
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def _producer_proto_class():
    """The producer's own schema, written independently of dsflow: proto3, plain (non-optional) fields."""
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto(name="shop/item.proto", package="shop", syntax="proto3")
    message = fdp.message_type.add(name="Item")
    kinds = descriptor_pb2.FieldDescriptorProto
    for number, (name, kind) in enumerate([("id", kinds.TYPE_INT64), ("item", kinds.TYPE_STRING),
                                           ("price", kinds.TYPE_DOUBLE), ("in_stock", kinds.TYPE_BOOL)], start=1):
        message.field.add(name=name, number=number, type=kind, label=kinds.LABEL_OPTIONAL)
    return _proto_class(fdp, "shop.Item")


@integration
def test_protobuf_round_trip_with_columns_from_the_registry(tmp_path, broker, spark, schema_registry) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2

    prefix = new_prefix()
    registry = SchemaRegistryClient(registry_conf(schema_registry))
    item = _producer_proto_class()
    serialize = ProtobufSerializer(item, registry, {"use.deprecated.format": False})
    items = [{"id": i, "item": f"thing-{i}", "price": i * 1.5, "in_stock": i % 3 == 0} for i in range(12)]
    values = [serialize(item(**r), SerializationContext(f"{prefix}items", MessageField.VALUE)) for r in items]
    project = registry_project(tmp_path, broker, schema_registry, """
        CREATE STREAM items WITH ('value.format' = 'protobuf');
        CREATE STREAM cheap_items AS SELECT id, item, price, in_stock FROM items WHERE price < 10;
    """, prefix=prefix)
    columns = [(c.name, c.type) for c in project.relation("analytics.public.items").columns]
    assert columns == [("id", "BIGINT"), ("item", "VARCHAR"), ("price", "DOUBLE"), ("in_stock", "BOOLEAN")]
    sink = project.relation("analytics.public.cheap_items")
    registered = register_sink_schemas(project, sink)
    produce_raw(broker, f"{prefix}items", values)

    run(spark, project, "cheap_items", tmp_path)

    latest = registry.get_latest_version(f"{sink.topic}-value", fmt="serialized")
    assert (latest.schema_id, latest.schema.schema_type) == (registered["schema_id"], "PROTOBUF")
    fdp = descriptor_pb2.FileDescriptorProto()
    import base64

    fdp.ParseFromString(base64.standard_b64decode(latest.schema.schema_str))
    reader = ProtobufDeserializer(_proto_class(fdp, f"{fdp.package}.{fdp.message_type[0].name}"),
                                  {"use.deprecated.format": False}, registry)
    context = SerializationContext(sink.topic, MessageField.VALUE)
    got = [reader(m.value(), context) for m in raw_records(broker, sink.topic)]
    rows = sorted(({"id": g.id, "item": g.item, "price": g.price, "in_stock": g.in_stock} for g in got),
                  key=lambda r: r["id"])
    assert rows == [r for r in items if r["price"] < 10]


def test_registry_password_must_come_from_env_var(tmp_path) -> None:
    root = write_project(tmp_path, "CREATE STREAM s (v BIGINT) WITH ('value.format' = 'long');", new_prefix())
    stores = root / "stores" / "kafka.yml"
    stores.write_text(stores.read_text().replace('"{{ env_var(\'SR_PASSWORD\') }}"', "hunter2"))
    result = check_project(root, variables={"bootstrap": "127.0.0.1:1", "registry": "http://127.0.0.1:9"},
                           environ=ENVIRON)
    assert [(d.code, d.location.file, d.location.line) for d in result.errors] == [
        ("DSF-E121", "stores/kafka.yml", 5)]
    assert "hunter2" not in str(result.errors[0])
