"""Protobuf records in the Confluent wire format: byte 0, the 4-byte schema id, the message indexes
(zigzag varints), then the message. Schemas and message classes are in proto_schemas.py; a schema is
fetched by id from the registry (registry.py) and cached per process.

Well-known messages (Timestamp, Date, Decimal) are read as datetime, date and Decimal, and written from them;
nested messages as dicts, repeated fields as lists, maps as dicts. A NULL element of an ARRAY or value of a MAP
cannot be written (protobuf has none): the write stops with DSF-E775 naming where it is.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from dsflow.errors import DsflowError
from dsflow.formats.proto_schemas import DATE, DECIMAL, TIMESTAMP, message_class
from dsflow.formats.registry import record_serializer, schema_text_by_id

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


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
        message = message_class(text, index)()
        message.ParseFromString(buf.read())
        return _row(message, names), None
    except Exception as err:  # noqa: BLE001 - any decoding failure makes a dead letter
        return None, f"cannot decode protobuf with schema id {schema_id}: {err!r}"


def _row(message: Any, names: list[str] | None) -> dict:
    fields = {f.name.lower(): f for f in message.DESCRIPTOR.fields}
    row = {}
    for name in names if names is not None else [f.name for f in message.DESCRIPTOR.fields]:
        field = fields.get(name.lower())
        row[name] = None if field is None else _field_value(message, field)
    return row


def _is_map(field: Any) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _field_value(message: Any, field: Any) -> Any:
    """A field as a Python value: a map as a dict, a repeated field as a list, a nested message as a dict of its
    fields, an absent field with presence as None."""
    value = getattr(message, field.name)
    if _is_map(field):
        inner = field.message_type.fields_by_name["value"]
        return {k: _from_single(v, inner) for k, v in value.items()}
    if field.is_repeated:
        return [_from_single(v, field) for v in value]
    if field.has_presence and not message.HasField(field.name):
        return None
    return _from_single(value, field)


def _from_single(value: Any, field: Any) -> Any:
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else str(value)
    if field.message_type is None or field.message_type.full_name in (TIMESTAMP, DATE, DECIMAL):
        return _from_message(value)
    return {f.name: _field_value(value, f) for f in field.message_type.fields}


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


def _fields(row: dict, descriptor: Any, path: str) -> dict:
    """A row (or a STRUCT's dict) as the keyword arguments of its message: fields matched by name
    (case-insensitively), NULL ones left out."""
    lowered = {str(k).lower(): v for k, v in row.items()}
    out = {}
    for field in descriptor.fields:
        value = row[field.name] if field.name in row else lowered.get(field.name.lower())
        if value is not None:
            out[field.name] = _to_field(value, field, f"{path}{field.name}")
    return out


def _to_field(value: Any, field: Any, path: str) -> Any:
    if _is_map(field):
        inner = field.message_type.fields_by_name["value"]
        pairs = value.items() if isinstance(value, dict) else value
        return {k: _element(v, inner, f"{path}['{k}']") for k, v in pairs}
    if field.is_repeated:
        return [_element(v, field, f"{path}[{i}]") for i, v in enumerate(value, start=1)]
    return _to_single(value, field, path)


def _element(value: Any, field: Any, path: str) -> Any:
    if value is None:
        raise DsflowError("DSF-E775", f"{path} is NULL: protobuf has no null element in a repeated field or map "
                          "value", hint="keep NULLs out of ARRAY and MAP values written as protobuf (e.g. COALESCE "
                                        "before building them), or write the relation as avro")
    return _to_single(value, field, path)


def _to_single(value: Any, field: Any, path: str) -> Any:
    if field.message_type is not None and field.message_type.full_name not in (TIMESTAMP, DATE, DECIMAL):
        return _fields(value, field.message_type, f"{path}.")
    return _to_message(value)


def _to_message(value: Any) -> Any:
    """A datetime, date or Decimal as the dict of its well-known message; other values as they are."""
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        since = moment - _EPOCH
        micros = since.days * 86_400_000_000 + since.seconds * 1_000_000 + since.microseconds
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
    """Rows (dicts) to Confluent protobuf values (or keys), through the Confluent ProtobufSerializer
    (registry.record_serializer); the schema is registered under `subject` (default <topic>-value, or <topic>-key
    for keys)."""
    cls = message_class(schema, [0])
    name = subject or f"{topic}-{'key' if key else 'value'}"
    serialize = record_serializer("protobuf", registry, cls, name, topic, key=key)

    def one(row: dict | None) -> bytes | None:
        if row is None:
            return None
        return serialize(cls(**_fields(row, cls.DESCRIPTOR, "")))

    return lambda rows: [one(r) for r in rows]
