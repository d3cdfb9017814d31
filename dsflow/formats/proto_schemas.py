"""Protobuf schemas: a relation's columns to and from a proto3 message (a base64 FileDescriptorProto), and the
message classes that decode and encode records of a schema (protobuf.py: the wire format).

Schemas travel as a base64 FileDescriptorProto (what confluent-kafka's ProtobufSerializer registers and
what the registry returns with `format=serialized`). A sink's schema is one proto3 message named after the
relation, one field per column numbered in column order: scalars are `optional` (so null stays null), and
three column types are the well-known messages Confluent's converters use:

    TIMESTAMP   google.protobuf.Timestamp   seconds + nanos since the epoch (UTC)
    DATE        google.type.Date            year, month, day
    DECIMAL     confluent.type.Decimal      unscaled big-endian two's complement bytes, precision, scale; the
                                            column's precision and scale are also in the field's
                                            (confluent.field_meta).params, which columns_from_proto reads back
                                            (DECIMAL(38, 18) when a schema does not say)

These files are known here (no schema references are needed for them, as confluent-kafka's
`skip.known.types` does not register them either). Keys use the same schemas (a message of the key columns).
"""

from __future__ import annotations

import base64
from typing import Any

from dsflow.core.formats import base_type

_TO_PROTO = {"BIGINT": "INT64", "INT": "INT32", "INTEGER": "INT32", "SMALLINT": "INT32", "TINYINT": "INT32",
             "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "BOOLEAN": "BOOL", "VARCHAR": "STRING", "STRING": "STRING",
             "TEXT": "STRING", "CHAR": "STRING", "BINARY": "BYTES", "VARBINARY": "BYTES", "BYTES": "BYTES"}


_FROM_PROTO = {"INT64": "BIGINT", "SINT64": "BIGINT", "SFIXED64": "BIGINT", "UINT32": "BIGINT", "FIXED32": "BIGINT",
               "INT32": "INT", "SINT32": "INT", "SFIXED32": "INT", "DOUBLE": "DOUBLE", "FLOAT": "FLOAT",
               "BOOL": "BOOLEAN", "STRING": "VARCHAR", "BYTES": "BINARY", "ENUM": "VARCHAR"}


TIMESTAMP, DATE, DECIMAL = "google.protobuf.Timestamp", "google.type.Date", "confluent.type.Decimal"


_MESSAGES = {"TIMESTAMP": TIMESTAMP, "TIMESTAMPTZ": TIMESTAMP, "DATE": DATE, "DECIMAL": DECIMAL}


_FILES = {TIMESTAMP: "google/protobuf/timestamp.proto", DATE: "google/type/date.proto",
          DECIMAL: "confluent/type/decimal.proto"}


META_FILE = "confluent/meta.proto"


DEFAULT_DECIMAL = (38, 18)
"""Precision and scale of a confluent.type.Decimal field whose schema does not give them."""


def proto_type_name(sql_type: str) -> str | None:
    return _TO_PROTO.get(base_type(sql_type))


def _decimal_digits(sql_type: str) -> tuple[int, int]:
    import re

    digits = [int(d) for d in re.findall(r"\d+", sql_type)]
    return (digits[0], digits[1] if len(digits) > 1 else 0) if digits else (10, 0)


def schema_text(record: str, package: str, columns: list[tuple[str, str]]) -> str:
    """The base64 FileDescriptorProto of a proto3 message with a field per column."""
    from google.protobuf import descriptor_pb2

    from confluent_kafka.schema_registry.confluent import meta_pb2

    kinds = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{package}.{record}.proto", package=package, syntax="proto3")
    message = fdp.message_type.add(name=record)
    for number, (name, sql_type) in enumerate(columns, start=1):
        well_known = _MESSAGES.get(base_type(sql_type))
        if well_known is not None:
            for needed in (_FILES[well_known], META_FILE if well_known == DECIMAL else None):
                if needed and needed not in fdp.dependency:
                    fdp.dependency.append(needed)
            field = message.field.add(name=name, number=number, type=kinds.TYPE_MESSAGE,
                                      type_name=f".{well_known}", label=kinds.LABEL_OPTIONAL)
            if well_known == DECIMAL:
                precision, scale = _decimal_digits(sql_type)
                params = field.options.Extensions[meta_pb2.field_meta].params
                params["precision"], params["scale"] = str(precision), str(scale)
            continue
        kind = proto_type_name(sql_type)
        if kind is None:
            raise ValueError(f"column '{name}' has type {sql_type}, which has no protobuf mapping")
        message.field.add(name=name, number=number, type=getattr(kinds, f"TYPE_{kind}"),
                          label=kinds.LABEL_OPTIONAL, proto3_optional=True, oneof_index=len(message.oneof_decl))
        message.oneof_decl.add(name=f"_{name}")
    return base64.standard_b64encode(fdp.SerializeToString()).decode("ascii")


def _file(text: str) -> Any:
    from google.protobuf import descriptor_pb2

    from confluent_kafka.schema_registry.confluent import meta_pb2  # noqa: F401 - registers field_meta

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
    return [_column(f, descriptor_pb2.FieldDescriptorProto) for f in fdp.message_type[0].field]


def _column(f: Any, kinds: Any) -> tuple[str, str]:
    kind = kinds.Type.Name(f.type)[len("TYPE_"):]
    well_known = f.type_name.lstrip(".") if kind == "MESSAGE" else ""
    if f.label == kinds.LABEL_REPEATED or (kind not in _FROM_PROTO and well_known not in _FILES):
        shown = well_known or kind.lower()
        raise ValueError(f"field '{f.name}' ({shown}) cannot be read into a column")
    if well_known == DECIMAL:
        from confluent_kafka.schema_registry.confluent import meta_pb2

        params = f.options.Extensions[meta_pb2.field_meta].params
        precision = int(params.get("precision") or DEFAULT_DECIMAL[0])
        scale = int(params.get("scale") or (0 if "precision" in params else DEFAULT_DECIMAL[1]))
        return f.name, f"DECIMAL({precision}, {scale})"
    if well_known:
        return f.name, "TIMESTAMP" if well_known == TIMESTAMP else "DATE"
    return f.name, _FROM_PROTO[kind]


_CLASSES: dict[tuple[str, tuple[int, ...]], Any] = {}


def _pool() -> Any:
    """A descriptor pool holding the well-known files a dsflow schema may import."""
    from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
    from google.type import date_pb2

    from confluent_kafka.schema_registry.confluent import meta_pb2
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2

    pool = descriptor_pool.DescriptorPool()
    for module in (descriptor_pb2, timestamp_pb2, date_pb2, meta_pb2, decimal_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    return pool


def message_class(text: str, index: list[int]) -> Any:
    from google.protobuf import message_factory

    key = (text, tuple(index))
    if key not in _CLASSES:
        fdp = _file(text)
        pool = _pool()
        pool.Add(fdp)
        descriptor = pool.FindFileByName(fdp.name).message_types_by_name[fdp.message_type[index[0]].name]
        for i in index[1:]:
            descriptor = descriptor.nested_types[i]
        _CLASSES[key] = message_factory.GetMessageClass(descriptor)
    return _CLASSES[key]
