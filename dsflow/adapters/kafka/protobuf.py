"""Protobuf values in the Confluent wire format: byte 0, the 4-byte schema id, the message indexes
(zigzag varints), then the message.

Schemas travel as a base64 FileDescriptorProto (what confluent-kafka's ProtobufSerializer registers and
what the registry returns with `format=serialized`). A sink's schema is one proto3 message named after the
relation, one `optional` field per column (so null stays null), numbered in column order.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Mapping
from typing import Any

from dsflow.core.formats import base_type

_TO_PROTO = {"BIGINT": "INT64", "INT": "INT32", "INTEGER": "INT32", "SMALLINT": "INT32", "TINYINT": "INT32",
             "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "BOOLEAN": "BOOL", "VARCHAR": "STRING", "STRING": "STRING",
             "TEXT": "STRING", "CHAR": "STRING", "BINARY": "BYTES", "VARBINARY": "BYTES", "BYTES": "BYTES"}
_FROM_PROTO = {"INT64": "BIGINT", "SINT64": "BIGINT", "SFIXED64": "BIGINT", "UINT32": "BIGINT", "FIXED32": "BIGINT",
               "INT32": "INT", "SINT32": "INT", "SFIXED32": "INT", "DOUBLE": "DOUBLE", "FLOAT": "FLOAT",
               "BOOL": "BOOLEAN", "STRING": "VARCHAR", "BYTES": "BINARY", "ENUM": "VARCHAR"}


def proto_type_name(sql_type: str) -> str | None:
    return _TO_PROTO.get(base_type(sql_type))


def schema_text(record: str, package: str, columns: list[tuple[str, str]]) -> str:
    """The base64 FileDescriptorProto of a proto3 message with an optional field per column."""
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto(name=f"{package}.{record}.proto", package=package, syntax="proto3")
    message = fdp.message_type.add(name=record)
    for number, (name, sql_type) in enumerate(columns):
        kind = proto_type_name(sql_type)
        if kind is None:
            raise ValueError(f"column '{name}' has type {sql_type}, which has no protobuf mapping")
        message.field.add(name=name, number=number + 1, type=getattr(descriptor_pb2.FieldDescriptorProto,
                                                                      f"TYPE_{kind}"),
                          label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, proto3_optional=True,
                          oneof_index=number)
        message.oneof_decl.add(name=f"_{name}")
    return base64.standard_b64encode(fdp.SerializeToString()).decode("ascii")


def _file(text: str) -> Any:
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.ParseFromString(base64.standard_b64decode(text.encode("ascii")))
    return fdp


def columns_from_proto(text: str) -> list[tuple[str, str]]:
    """The (name, SQL type) columns of the first message of a base64 FileDescriptorProto."""
    from google.protobuf import descriptor_pb2

    try:
        fdp = _file(text)
    except Exception as err:  # noqa: BLE001 - .proto source text is not parsed here
        raise ValueError(f"not a serialized protobuf schema: {err}") from err
    if not fdp.message_type:
        raise ValueError("the protobuf schema has no message")
    columns = []
    for f in fdp.message_type[0].field:
        kind = descriptor_pb2.FieldDescriptorProto.Type.Name(f.type)[len("TYPE_"):]
        if f.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED or kind not in _FROM_PROTO:
            raise ValueError(f"field '{f.name}' ({kind.lower()}) cannot be read into a column")
        columns.append((f.name, _FROM_PROTO[kind]))
    return columns


_CLASSES: dict[tuple[str, int], Any] = {}


def _message_class(text: str, index: list[int]) -> Any:
    from google.protobuf import descriptor_pool, message_factory

    key = (text, tuple(index))
    if key not in _CLASSES:
        fdp = _file(text)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fdp)
        descriptor = pool.FindFileByName(fdp.name).message_types_by_name[fdp.message_type[index[0]].name]
        for i in index[1:]:
            descriptor = descriptor.nested_types[i]
        _CLASSES[key] = message_factory.GetMessageClass(descriptor)
    return _CLASSES[key]


def _varint(buf: io.BytesIO) -> int:
    shift = result = 0
    while True:
        byte = buf.read(1)
        if not byte:
            raise ValueError("truncated message indexes")
        result |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return (result >> 1) ^ -(result & 1)  # zigzag
        shift += 7


def decode(value: bytes, registry: Mapping[str, str], names: list[str]) -> tuple[dict | None, str | None]:
    """(row, None) or (None, error) for one record."""
    from dsflow.adapters.kafka.registry import schema_text_by_id

    if len(value) < 6 or value[0] != 0:
        return None, "not in the Confluent wire format (no magic byte 0 and schema id)"
    schema_id = int.from_bytes(value[1:5], "big")
    buf = io.BytesIO(value[5:])
    try:
        count = _varint(buf)
        index = [_varint(buf) for _ in range(count)] or [0]
    except ValueError as err:
        return None, str(err)
    text = schema_text_by_id(registry, schema_id, "PROTOBUF")
    if text is None:
        return None, f"unknown schema id {schema_id}"
    try:
        message = _message_class(text, index)()
        message.ParseFromString(buf.read())
    except Exception as err:  # noqa: BLE001 - any decoding failure makes a dead letter
        return None, f"cannot decode protobuf with schema id {schema_id}: {err!r}"
    fields = {f.name.lower(): f for f in message.DESCRIPTOR.fields}
    row = {}
    for name in names:
        field = fields.get(name.lower())
        present = field is not None and (not field.has_presence or message.HasField(field.name))
        row[name] = getattr(message, field.name) if present else None
    return row, None


def serializer(topic: str, registry: Mapping[str, str], schema: str, subject: str | None) -> Callable[[list], list]:
    """Rows (dicts) to Confluent protobuf values, through confluent-kafka's ProtobufSerializer."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from dsflow.adapters.kafka.registry import client

    cls = _message_class(schema, [0])
    conf = {"use.deprecated.format": False, "auto.register.schemas": True,
            "subject.name.strategy": lambda ctx, name: subject or f"{topic}-value"}
    serialize = ProtobufSerializer(cls, client(registry), conf)
    context = SerializationContext(topic, MessageField.VALUE)

    def one(row: dict | None) -> bytes | None:
        if row is None:
            return None
        return serialize(cls(**{k: v for k, v in row.items() if v is not None}), context)

    return lambda rows: [one(r) for r in rows]
