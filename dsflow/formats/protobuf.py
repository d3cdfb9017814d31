"""Protobuf records in the Confluent wire format: byte 0, the 4-byte schema id, the message indexes
(zigzag varints), then the message. Schemas and message classes are in proto_schemas.py; a schema is
fetched by id from the registry (registry.py) and cached per process.

Well-known messages (Timestamp, Date, Decimal) are read as datetime, date and Decimal, and written from them.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

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
        return serialize(cls(**{k: _to_message(v) for k, v in row.items() if v is not None}))

    return lambda rows: [one(r) for r in rows]
