"""STRUCT, ARRAY and MAP columns in avro and protobuf values: the schemas dsflow makes for them, the codecs (a
hypothesis property over generated nested types and values, no Spark), and a round trip through queries against a
real broker, real Spark and the test schema registry, producers and readers using confluent-kafka's own serializers
and deserializers (dsflow sits in between), compared with plain-Python references."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsflow.adapters.schemas import register_sink_schemas
from dsflow.core.formats import avro_schema, carry_problem, columns_from_avro
from dsflow.core.nested import Shape, conform_row, nested_columns, parse_type, type_text
from dsflow.errors import DsflowError
from dsflow.formats.arrow import value_struct
from dsflow.formats.proto_schemas import columns_from_proto, message_class, schema_text
from support.registry_projects import avro_values, new_prefix, produce_raw, raw_records, registry_conf, registry_project
from support.streaming import run

integration = pytest.mark.integration

COLUMNS = [("id", "BIGINT"), ("payload", "STRUCT<a INT, tags ARRAY<VARCHAR>>"), ("attrs", "MAP<VARCHAR, BIGINT>"),
           ("items", "ARRAY<STRUCT<sku VARCHAR, qty INT>>")]


def _structure(avro):
    """An Avro type without names, namespaces and defaults: what a reader's structure is."""
    if isinstance(avro, list):
        return [_structure(t) for t in avro]
    if isinstance(avro, dict):
        out = {k: _structure(v) for k, v in avro.items() if k not in ("name", "namespace", "default", "fields")}
        if "fields" in avro:
            out["fields"] = {f["name"]: _structure(f["type"]) for f in avro["fields"]}
        return out
    return avro


NATURAL_AVRO = {
    "type": "record", "fields": {
        "id": ["null", "long"],
        "payload": ["null", {"type": "record", "fields": {
            "a": ["null", "int"], "tags": ["null", {"type": "array", "items": ["null", "string"]}]}}],
        "attrs": ["null", {"type": "map", "values": ["null", "long"]}],
        "items": ["null", {"type": "array", "items": ["null", {"type": "record", "fields": {
            "sku": ["null", "string"], "qty": ["null", "int"]}}]}]}}
"""The Avro schema of COLUMNS: nested record, array, map with string keys; everything nullable as flat columns."""


# --- pure ------------------------------------------------------------------------------------------


def test_nested_avro_schema_is_the_natural_one_and_reads_back() -> None:
    import fastavro

    text = avro_schema("orders", "analytics.public", COLUMNS)
    assert _structure(json.loads(text)) == NATURAL_AVRO
    fastavro.parse_schema(json.loads(text))  # nested record names are unique and valid
    assert columns_from_avro(text) == COLUMNS
    producer = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "p", "type": {"type": "record", "name": "P", "fields": [
            {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED"]}},
            {"name": "f", "type": {"type": "fixed", "name": "Four", "size": 4}}]}},
        {"name": "again", "type": ["null", "shop.P"]}, {"name": "m", "type": {"type": "map", "values": "double"}}]}
    assert columns_from_avro(json.dumps(producer)) == [
        ("p", "STRUCT<e VARCHAR, f BINARY>"), ("again", "STRUCT<e VARCHAR, f BINARY>"), ("m", "MAP<VARCHAR, DOUBLE>")]
    recursive = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(ValueError, match="recursive record"):
        columns_from_avro(json.dumps(recursive))


def test_nested_protobuf_schema_is_the_natural_one_and_reads_back() -> None:
    from google.protobuf import descriptor_pb2

    kinds = descriptor_pb2.FieldDescriptorProto
    text = schema_text("orders", "analytics.public", COLUMNS)
    descriptor = message_class(text, [0]).DESCRIPTOR
    fields = descriptor.fields_by_name
    assert fields["payload"].message_type.full_name == "analytics.public.orders.Payload"
    assert not fields["payload"].is_repeated and fields["payload"].has_presence
    payload = fields["payload"].message_type.fields_by_name
    assert payload["a"].type == kinds.TYPE_INT32 and payload["a"].has_presence  # optional, as flat columns
    assert payload["tags"].is_repeated and payload["tags"].type == kinds.TYPE_STRING
    attrs = fields["attrs"].message_type
    assert attrs.GetOptions().map_entry and attrs.name == "AttrsEntry"  # map<string, int64>
    assert (attrs.fields_by_name["key"].type, attrs.fields_by_name["value"].type) == (kinds.TYPE_STRING,
                                                                                      kinds.TYPE_INT64)
    assert fields["items"].is_repeated and fields["items"].message_type.name == "Items"
    assert columns_from_proto(text) == COLUMNS


def test_types_avro_and_protobuf_cannot_carry_have_their_codes() -> None:
    assert carry_problem("avro", "MAP<BIGINT, VARCHAR>")[0] == "DSF-E774"
    assert carry_problem("protobuf", "STRUCT<m MAP<INT, VARCHAR>>")[0] == "DSF-E774"
    assert carry_problem("protobuf", "ARRAY<ARRAY<INT>>")[0] == "DSF-E777"
    assert carry_problem("protobuf", "MAP<VARCHAR, ARRAY<INT>>")[0] == "DSF-E777"
    assert carry_problem("avro", "ARRAY<ARRAY<INT>>") is None and carry_problem("avro", "ARRAY<TIME>")[0] == "DSF-E124"
    assert carry_problem("protobuf", "ARRAY<STRUCT<v ARRAY<INT>>>") is None


def test_a_null_inside_a_protobuf_array_or_map_stops_the_write_with_e775() -> None:
    from dsflow.formats.protobuf import _fields

    cls = message_class(schema_text("orders", "db.s", COLUMNS), [0])
    for row, where in [({"payload": {"tags": ["a", None]}}, "payload.tags[2]"), ({"attrs": {"k": None}}, "attrs['k']"),
                       ({"items": [None]}, "items[1]")]:
        with pytest.raises(DsflowError) as err:
            _fields(row, cls.DESCRIPTOR, "")
        assert err.value.code == "DSF-E775" and where in err.value.message


# --- the codecs, on generated nested types and values -----------------------------------------------

_SCALARS = {"BIGINT": st.integers(-2**63, 2**63 - 1), "INT": st.integers(-2**31, 2**31 - 1),
            "DOUBLE": st.floats(allow_nan=False), "BOOLEAN": st.booleans(), "VARCHAR": st.text(max_size=5),
            "BINARY": st.binary(max_size=5), "DATE": st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1)),
            "DECIMAL(10, 2)": st.decimals(-10**7, 10**7, places=2, allow_nan=False, allow_infinity=False),
            "TIMESTAMP": st.datetimes(dt.datetime(1971, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(
                dt.timezone.utc)).map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))}
_NAMES = st.sampled_from(["a", "b", "sku", "Qty", "tags", "x_y"])


def _shapes(protobuf: bool):
    scalars = st.sampled_from(sorted(_SCALARS)).map(lambda t: Shape("scalar", type=t))

    def grow(inner):
        single = inner.filter(lambda s: not protobuf or s.kind not in ("array", "map"))
        structs = st.lists(st.tuples(_NAMES, inner), min_size=1, max_size=3, unique_by=lambda f: f[0].lower())
        return st.one_of(structs.map(lambda fields: Shape("struct", fields=tuple(fields))),
                         single.map(lambda e: Shape("array", element=e)),
                         single.map(lambda e: Shape("map", key=Shape("scalar", type="VARCHAR"), element=e)))

    return st.recursive(scalars, grow, max_leaves=6)


def _values(shape: Shape, protobuf: bool, top: bool = True):
    """Values of a shape; protobuf: no NULL element or map value, and (as it reads back) no NULL ARRAY or MAP."""
    nullable = not (protobuf and (not top or shape.kind in ("array", "map")))
    if shape.kind == "scalar":
        inner = _SCALARS[shape.type]
    elif shape.kind == "struct":
        inner = st.fixed_dictionaries({n: _values(s, protobuf, True) for n, s in shape.fields})
    elif shape.kind == "array":
        inner = st.lists(_values(shape.element, protobuf, False), max_size=3)
    else:
        inner = st.dictionaries(st.text(max_size=3), _values(shape.element, protobuf, False), max_size=3)
    return st.one_of(st.none(), inner) if nullable else inner


@st.composite
def _tables(draw, protobuf: bool):
    shapes = draw(st.lists(_shapes(protobuf), min_size=1, max_size=3))
    columns = [(f"c{i}", type_text(s)) for i, s in enumerate(shapes)]
    rows = draw(st.lists(st.fixed_dictionaries({c: _values(s, protobuf)
                                                for (c, _), s in zip(columns, shapes, strict=True)}),
                         min_size=1, max_size=4))
    return columns, rows


def _arrow_rows(rows: list, columns: list) -> list:
    """The rows as Spark gets them: one Arrow struct array of the relation's columns, back to Python."""
    import pyarrow as pa

    return pa.array(rows, type=value_struct(tuple(columns))).to_pylist()


def _unordered_maps(value):
    """Arrow's Python values with each map's (key, value) pairs sorted: protobuf keeps no map order."""
    if isinstance(value, dict):
        return {k: _unordered_maps(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [_unordered_maps(v) for v in value]
        return sorted(items, key=lambda kv: kv[0]) if items and isinstance(value[0], tuple) else items
    if isinstance(value, tuple):
        return tuple(_unordered_maps(v) for v in value)
    return value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tables(protobuf=False))
def test_nested_avro_values_round_trip_through_the_codec(table) -> None:
    """Rows as a sink writes them (Arrow's Python values: maps as pairs) -> dsflow's Avro schema -> fastavro bytes
    -> read back and shaped by dsflow as its reader does -> the Arrow struct Spark gets: the same rows."""
    import fastavro

    columns, rows = table
    written = _arrow_rows(rows, columns)
    schema = fastavro.parse_schema(json.loads(avro_schema("r", "ns", columns)))
    nested = nested_columns(columns)
    back = []
    for row in written:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, conform_row(dict(row), nested))
        back.append(conform_row(fastavro.schemaless_reader(io.BytesIO(buffer.getvalue()), schema, None), nested))
    assert _arrow_rows(back, columns) == written


# filter_too_much: protobuf has no repeated field of repeated fields or maps, so _shapes filters out arrays and maps of
# them; with some seeds most drawn shapes are such (hypothesis 6.170's health check failed 2 seeds of 6 here)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(_tables(protobuf=True))
def test_nested_protobuf_values_round_trip_through_the_codec(table) -> None:
    from dsflow.formats.protobuf import _fields, _row

    columns, rows = table
    written = _arrow_rows(rows, columns)
    cls = message_class(schema_text("r", "ns", columns), [0])
    nested = nested_columns(columns)
    back = []
    for row in written:
        message = cls.FromString(cls(**_fields(row, cls.DESCRIPTOR, "")).SerializeToString())
        back.append(conform_row(_row(message, [n for n, _ in columns]), nested))
    expected = [{n: [] if v is None and parse_type(t).kind == "array" else {} if v is None and
                 parse_type(t).kind == "map" else v for (n, t), v in zip(columns, r.values(), strict=False)}
                for r in written]
    assert _unordered_maps(_arrow_rows(back, columns)) == _unordered_maps(_arrow_rows(expected, columns))


# --- integration -----------------------------------------------------------------------------------

PRODUCER_AVRO = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "payload", "type": ["null", {"type": "record", "name": "Payload", "fields": [
        {"name": "a", "type": ["null", "int"]}, {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}}
    ]}]},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}}]})
"""The producer's own Avro schema, written independently of dsflow."""


def _order(i: int, nulls_inside: bool) -> dict:
    payload = None if i % 5 == 0 else {"a": None if i % 3 == 0 else i * 10,
                                       "tags": [f"t{j}" for j in range(i % 3)] + ([None] if nulls_inside and i % 7 == 1
                                                                                  else [])}
    return {"id": i, "payload": payload, "attrs": {f"k{j}": i * j for j in range(i % 4)},
            "items": [{"sku": f"s{i}-{j}", "qty": j} for j in range(i % 3)]}


def _expected(order: dict) -> dict:
    """What the query selects, in plain Python: 1-based subscripts, NULL out of range or through a NULL struct."""
    payload, items = order["payload"], order["items"]
    return {**order, "a": payload["a"] if payload else None, "first_sku": items[0]["sku"] if items else None,
            "k1": order["attrs"].get("k1")}


SELECT = "SELECT id, payload, attrs, items, payload->a AS a, items[1]->sku AS first_sku, attrs['k1'] AS k1 FROM"


def _proto_producer():
    """The producer's own protobuf schema, written independently of dsflow: Payload a top-level message, Item
    nested in Order, a map<string, int64>."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    kinds = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    order = fdp.message_type.add(name="Order")
    payload = fdp.message_type.add(name="Payload")
    payload.field.add(name="a", number=1, type=kinds.TYPE_INT32, label=kinds.LABEL_OPTIONAL, proto3_optional=True,
                      oneof_index=0)
    payload.oneof_decl.add(name="_a")
    payload.field.add(name="tags", number=2, type=kinds.TYPE_STRING, label=kinds.LABEL_REPEATED)
    item = order.nested_type.add(name="Item")
    item.field.add(name="sku", number=1, type=kinds.TYPE_STRING, label=kinds.LABEL_OPTIONAL)
    item.field.add(name="qty", number=2, type=kinds.TYPE_INT32, label=kinds.LABEL_OPTIONAL)
    entry = order.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=kinds.TYPE_STRING, label=kinds.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=kinds.TYPE_INT64, label=kinds.LABEL_OPTIONAL)
    order.field.add(name="id", number=1, type=kinds.TYPE_INT64, label=kinds.LABEL_OPTIONAL)
    order.field.add(name="payload", number=2, type=kinds.TYPE_MESSAGE, type_name=".shop.Payload",
                    label=kinds.LABEL_OPTIONAL)
    order.field.add(name="attrs", number=3, type=kinds.TYPE_MESSAGE, type_name=".shop.Order.AttrsEntry",
                    label=kinds.LABEL_REPEATED)
    order.field.add(name="items", number=4, type=kinds.TYPE_MESSAGE, type_name=".shop.Order.Item",
                    label=kinds.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def _proto_values(registry: str, topic: str, orders: list[dict]) -> list[bytes]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    cls = _proto_producer()
    serialize = ProtobufSerializer(cls, SchemaRegistryClient(registry_conf(registry)), {"use.deprecated.format": False})
    def message(order: dict):
        payload = order["payload"] and {k: v for k, v in order["payload"].items() if v is not None}
        return cls(**{**order, "payload": payload} if payload is not None else
                   {k: v for k, v in order.items() if k != "payload"})

    return [serialize(message(o), SerializationContext(topic, MessageField.VALUE)) for o in orders]


def _proto_reader(registry: str, subject: str):
    """confluent-kafka's ProtobufDeserializer with the message class of the subject's latest schema."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    client = SchemaRegistryClient(registry_conf(registry))
    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.ParseFromString(base64.standard_b64decode(client.get_latest_version(subject, fmt="serialized")
                                                  .schema.schema_str))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fdp.package}.{fdp.message_type[0].name}"))
    return fdp, ProtobufDeserializer(cls, {"use.deprecated.format": False}, client)


def _proto_dict(m) -> dict:
    """A decoded sink message as plain Python, field by field (presence says NULL)."""
    payload = {"a": m.payload.a if m.payload.HasField("a") else None, "tags": list(m.payload.tags)} \
        if m.HasField("payload") else None
    return {"id": m.id, "payload": payload, "attrs": dict(m.attrs),
            "items": [{"sku": i.sku, "qty": i.qty} for i in m.items], "a": m.a if m.HasField("a") else None,
            "first_sku": m.first_sku if m.HasField("first_sku") else None, "k1": m.k1 if m.HasField("k1") else None}


@integration
def test_nested_avro_and_protobuf_round_trip_through_queries(tmp_path, broker, spark, schema_registry) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    from support.registry_projects import avro_decode

    prefix = new_prefix()
    avro_orders = [_order(i, nulls_inside=True) for i in range(30)]
    proto_orders = [_order(i, nulls_inside=False) for i in range(30)]
    proto_in = _proto_values(schema_registry, f"{prefix}orders_pb", proto_orders)  # registers orders_pb-value
    project = registry_project(tmp_path, broker, schema_registry, f"""
        CREATE STREAM orders (id BIGINT, payload STRUCT<a INTEGER, tags ARRAY<VARCHAR>>, attrs MAP<VARCHAR, BIGINT>,
          items ARRAY<STRUCT<sku VARCHAR, qty INTEGER>>) WITH ('value.format' = 'avro');
        CREATE STREAM orders_pb WITH ('value.format' = 'protobuf');
        CREATE STREAM nested_avro WITH ('value.format' = 'avro') AS {SELECT} orders;
        CREATE STREAM nested_pb WITH ('value.format' = 'protobuf') AS {SELECT} orders_pb;
    """, prefix=prefix)
    # (c) the protobuf stream takes its nested columns from the subject the producer registered
    assert [(c.name, c.type) for c in project.relation("analytics.public.orders_pb").columns] == COLUMNS
    sinks = {n: project.relation(f"analytics.public.{n}") for n in ("nested_avro", "nested_pb")}
    registered = {n: register_sink_schemas(project, sink) for n, sink in sinks.items()}
    produce_raw(broker, f"{prefix}orders", avro_values(schema_registry, f"{prefix}orders", PRODUCER_AVRO,
                                                       avro_orders))
    produce_raw(broker, f"{prefix}orders_pb", proto_in)

    run(spark, project, "nested_avro", tmp_path)
    run(spark, project, "nested_pb", tmp_path)

    # (a) the registered schemas are the natural nested ones
    client = SchemaRegistryClient(registry_conf(schema_registry))
    latest = client.get_latest_version(f"{sinks['nested_avro'].topic}-value")
    assert latest.schema_id == registered["nested_avro"]["schema_id"]
    natural = {**NATURAL_AVRO, "fields": {**NATURAL_AVRO["fields"], "a": ["null", "int"],
                                          "first_sku": ["null", "string"], "k1": ["null", "long"]}}
    assert _structure(json.loads(latest.schema.schema_str)) == natural
    fdp, reader = _proto_reader(schema_registry, f"{sinks['nested_pb'].topic}-value")
    assert columns_from_proto(base64.standard_b64encode(fdp.SerializeToString()).decode()) == [
        *COLUMNS, ("a", "INT"), ("first_sku", "VARCHAR"), ("k1", "BIGINT")]  # a map subscript: the value type
    # (b) + (d): what the queries wrote, decoded by confluent-kafka's deserializers, equals the reference
    got = sorted(avro_decode(schema_registry, sinks["nested_avro"].topic, raw_records(broker,
                                                                                      sinks["nested_avro"].topic)),
                 key=lambda r: r["id"])
    assert got == [_expected(o) for o in avro_orders]
    context = SerializationContext(sinks["nested_pb"].topic, MessageField.VALUE)
    got = sorted((_proto_dict(reader(m.value(), context)) for m in raw_records(broker, sinks["nested_pb"].topic)),
                 key=lambda r: r["id"])
    assert got == [_expected(o) for o in proto_orders]


def test_a_map_subscript_is_typed_as_the_maps_values(tmp_path) -> None:
    """`m['k']` has the MAP's value type (a sink's schema gets it), also inside expressions and nested maps."""
    from support.registry_projects import ENVIRON, write_project

    from dsflow.load.project import load_project

    root = write_project(tmp_path, """
        CREATE STREAM orders (attrs MAP<VARCHAR, BIGINT>, m2 MAP<VARCHAR, STRUCT<v DOUBLE>>,
          mm MAP<VARCHAR, MAP<VARCHAR, INT>>) WITH ('value.format' = 'avro');
        CREATE STREAM out WITH ('value.format' = 'avro') AS SELECT attrs['x'] AS x, attrs['y'] + 1 AS y,
          m2['k']->v AS v, mm['a']['b'] AS b, TO_TIMESTAMP_LTZ(attrs['t'], 3) AS ts FROM orders;
    """, new_prefix())
    project = load_project(root, variables={"bootstrap": "127.0.0.1:1", "registry": "http://127.0.0.1:9"},
                           environ=ENVIRON)
    assert [(c.name, c.type) for c in project.relation("analytics.public.out").columns] == [
        ("x", "BIGINT"), ("y", "BIGINT"), ("v", "DOUBLE"), ("b", "INT"), ("ts", "TIMESTAMP")]
