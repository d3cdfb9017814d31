"""Protobuf records in the Confluent wire format: byte 0, the 4-byte schema id, the message indexes
(zigzag varints), then the message.

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
import datetime as dt
import io
from collections.abc import Callable, Mapping
from decimal import Decimal
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
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


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


def _message_class(text: str, index: list[int]) -> Any:
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


def decode(value: bytes, registry: Mapping[str, str], names: list[str] | None) -> tuple[dict | None, str | None]:
    """(row, None) or (None, error) for one record; `names` None: every field of the message, in order."""
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
        return _row(message, names), None
    except Exception as err:  # noqa: BLE001 - any decoding failure makes a dead letter
        return None, f"cannot decode protobuf with schema id {schema_id}: {err!r}"


def _row(message: Any, names: list[str] | None) -> dict:
    fields = {f.name.lower(): f for f in message.DESCRIPTOR.fields}
    row = {}
    for name in names if names is not None else [f.name for f in message.DESCRIPTOR.fields]:
        field = fields.get(name.lower())
        present = field is not None and (not field.has_presence or message.HasField(field.name))
        row[name] = _from_message(getattr(message, field.name)) if present else None
    return row


def _from_message(value: Any) -> Any:
    """A well-known message as its Python value (datetime, date, Decimal); scalars as they are."""
    descriptor = getattr(value, "DESCRIPTOR", None)
    if descriptor is None:
        return value
    if descriptor.full_name == TIMESTAMP:
        return _EPOCH + dt.timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)
    if descriptor.full_name == DATE:
        return dt.date(value.year, value.month, value.day)
    if descriptor.full_name == DECIMAL:
        return Decimal(int.from_bytes(value.value, "big", signed=True)).scaleb(-value.scale)
    raise ValueError(f"a {descriptor.full_name} field cannot be read into a column")


def _to_message(value: Any) -> Any:
    """A datetime, date or Decimal as the dict of its well-known message; other values as they are."""
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        delta = moment - _EPOCH
        micros = delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
        return {"seconds": micros // 1_000_000, "nanos": micros % 1_000_000 * 1000}
    if isinstance(value, dt.date):
        return {"year": value.year, "month": value.month, "day": value.day}
    if isinstance(value, Decimal):
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return {"value": unscaled.to_bytes(size, "big", signed=True), "precision": max(1, len(digits)),
                "scale": -int(exponent)}
    return value


def serializer(topic: str, registry: Mapping[str, str], schema: str, subject: str | None,
               key: bool = False) -> Callable[[list], list]:
    """Rows (dicts) to Confluent protobuf values (or keys), through confluent-kafka's ProtobufSerializer;
    the schema is registered under `subject` (default <topic>-value, or <topic>-key for keys)."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from dsflow.adapters.kafka.registry import client

    cls = _message_class(schema, [0])
    name = subject or f"{topic}-{'key' if key else 'value'}"
    conf = {"use.deprecated.format": False, "auto.register.schemas": True,
            "subject.name.strategy": lambda ctx, record: name}
    serialize = ProtobufSerializer(cls, client(registry), conf)
    context = SerializationContext(topic, MessageField.KEY if key else MessageField.VALUE)

    def one(row: dict | None) -> bytes | None:
        if row is None:
            return None
        return serialize(cls(**{k: _to_message(v) for k, v in row.items() if v is not None}), context)

    return lambda rows: [one(r) for r in rows]
