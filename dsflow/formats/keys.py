"""Avro and protobuf record keys (Confluent wire format) to and from the text keys travel as in a query.

Inside a query a key is text: a sink's one key column as its text, several as a JSON object of the columns
(adapters/spark/frames.py). Registry keys map onto that form both ways:

    read    a record with one field -> that field's text; several fields -> the JSON object text
            (`{"a":1,"b":"x"}`); an Avro primitive key (e.g. "string", "long") -> its text
    write   the sink's key columns are a record of those columns (avro: fields nullable like values';
            protobuf: a message like a value's); a carried key (no key columns) is an Avro "string"
            or a protobuf message with one string field `key`

Texts of values: integers and decimals as digits, booleans true/false, DATE as yyyy-mm-dd, TIMESTAMP as
ISO 8601 in UTC with a Z. The schema is registered under <topic>-key (TopicNameStrategy).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from dsflow.core.formats import avro_schema, base_type, columns_from_avro
from dsflow.errors import DsflowError
from dsflow.formats.avro import avro_record
from dsflow.formats.proto_schemas import columns_from_proto, schema_text
from dsflow.formats.protobuf import decode, serializer
from dsflow.formats.registry import record_serializer

CARRIED_AVRO = '"string"'
"""The Avro schema of a carried key (a sink without key columns)."""
CARRIED_FIELD = "key"

Bad = list[tuple[int, str]]


def key_schema_text(key_format: str, record: str, namespace: str, columns: list[tuple[str, str]]) -> str:
    """The schema of a sink's key: a record of its key columns, or the carried-key schema when there are none."""
    if key_format == "protobuf":
        return schema_text(f"{record}_key", namespace, columns or [(CARRIED_FIELD, "VARCHAR")])
    return avro_schema(f"{record}_key", namespace, columns) if columns else CARRIED_AVRO


# --- reading ----------------------------------------------------------------------------------------


def key_texts(keys: list, key_format: str, registry: Mapping[str, str]) -> tuple[list, Bad]:
    """(text of each key or None for a key that did not decode or is null, the keys that did not decode)."""
    texts: list = []
    bad: Bad = []
    for i, raw in enumerate(keys):
        if raw is None:
            texts.append(None)
            continue
        record, error = _decode(raw, key_format, registry)
        if error is None:
            try:
                texts.append(record_text(record))
                continue
            except (TypeError, ValueError) as err:
                error = f"cannot render the key as text: {err}"
        texts.append(None)
        bad.append((i, f"key: {error}"))
    return texts, bad


def _decode(raw: bytes, key_format: str, registry: Mapping[str, str]) -> tuple[Any, str | None]:
    if key_format == "protobuf":
        return decode(raw, registry, None)
    return avro_record(raw, registry, records_only=False)


def null_key_text(column: str) -> str:
    """The record key of a row whose one key column is NULL: the JSON object of that column, '{"col":null}'.
    A null record key would be spread over the partitions at random (and refused by compaction), so the updates
    and the tombstone of a NULL group would lose their order; no other value of the column has this text unless a
    VARCHAR holds exactly it."""
    return json.dumps({column: None}, separators=(",", ":"))


def record_text(record: Any) -> str | None:
    """A decoded key as text: one field -> its text (null_key_text when NULL), several -> a JSON object; a
    primitive -> its text."""
    if isinstance(record, dict):
        if len(record) == 1:
            name, value = next(iter(record.items()))
            return null_key_text(name) if value is None else scalar_text(value)
        return json.dumps({k: _json_value(v) for k, v in record.items()}, separators=(",", ":"))
    return scalar_text(record)


def scalar_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return _timestamp_text(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (dict, list)):
        raise ValueError("a nested record or array in a key has no text form")
    return str(value)


def _timestamp_text(value: dt.datetime) -> str:
    moment = value.astimezone(dt.timezone.utc) if value.tzinfo else value
    spec = "milliseconds" if moment.microsecond % 1000 == 0 else "microseconds"
    return moment.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Decimal):
        exponent = value.as_tuple().exponent  # 'F', 'n' or 'N' for an infinity or a NaN
        return int(value) if value == value.to_integral_value() and isinstance(exponent, int) and exponent >= 0 \
            else float(value)
    return scalar_text(value)


# --- writing ----------------------------------------------------------------------------------------


def key_serializer(key_format: str, topic: str, registry: Mapping[str, str], schema: str | None,
                   subject: str | None) -> Callable[[list], list]:
    """Text keys (as a query makes them) to Confluent avro/protobuf keys; the schema is registered under
    `subject` (default <topic>-key). A key that does not fit the key schema stops the write (DSF-E776)."""
    fmt = key_format
    text = schema or (CARRIED_AVRO if fmt == "avro" else key_schema_text(fmt, "carried", "dsflow", []))
    columns = _schema_columns(fmt, text)
    if fmt == "protobuf":
        encode = serializer(topic, registry, text, subject or f"{topic}-key", key=True)
    else:
        encode = _avro_serializer(topic, registry, text, subject or f"{topic}-key")

    def rows(keys: list) -> list:
        return [None if k is None else _key_value(k if isinstance(k, str) else k.decode("utf-8", "replace"),
                                                   columns, topic) for k in keys]

    return lambda keys: encode(rows(keys))


def _schema_columns(key_format: str, text: str) -> list[tuple[str, str]] | None:
    """The key schema's (name, SQL type) fields; None for an Avro primitive (the key is one bare value)."""
    try:
        if key_format == "protobuf":
            return columns_from_proto(text)
        parsed = json.loads(text)
        if isinstance(parsed, dict) and parsed.get("type") == "record":
            return columns_from_avro(text)
        return None
    except ValueError as err:
        raise DsflowError("DSF-E776", f"the key schema cannot be written: {err}") from err


def _avro_serializer(topic: str, registry: Mapping[str, str], schema: str, subject: str) -> Callable[[list], list]:
    serialize = record_serializer("avro", registry, schema, subject, topic, key=True)
    return lambda rows: [None if r is None else serialize(r) for r in rows]


def _key_value(text: str, columns: list[tuple[str, str]] | None, topic: str) -> Any:
    """A text key as the value the key schema wants: a dict of the fields, or the bare text (Avro string)."""
    try:
        if columns is None:
            return text
        if len(columns) == 1:
            name, sql_type = columns[0]
            return {name: None if text == null_key_text(name) else typed(text, sql_type)}
        found = json.loads(text)
        if not isinstance(found, dict):
            raise ValueError("not a JSON object")
        lowered = {k.lower(): v for k, v in found.items()}
        return {name: typed(lowered.get(name.lower()), sql_type) for name, sql_type in columns}
    except (ValueError, TypeError, ArithmeticError) as err:
        raise DsflowError("DSF-E776", f"key {text[:200]!r} of a record for topic '{topic}' does not fit the key "
                          f"schema ({', '.join(n for n, _ in columns or [])}): {err}",
                          hint="the key columns of the query must match the sink's key schema") from err


def typed(value: Any, sql_type: str) -> Any:
    """A key field from its text (or JSON value) to the Python value of its column type."""
    if value is None:
        return None
    name = base_type(sql_type)
    if name in ("BIGINT", "INT", "INTEGER", "SMALLINT", "TINYINT"):
        return value if isinstance(value, int) and not isinstance(value, bool) else int(str(value))
    if name in ("DOUBLE", "FLOAT"):
        return float(value)
    if name == "BOOLEAN":
        return value if isinstance(value, bool) else {"true": True, "false": False}[str(value).strip().lower()]
    if name == "DECIMAL":
        import re

        digits = [int(d) for d in re.findall(r"\d+", sql_type)]
        scale = digits[1] if len(digits) > 1 else 0
        return Decimal(str(value)).quantize(Decimal(1).scaleb(-scale))
    if name == "DATE":
        return dt.date.fromisoformat(str(value)[:10])
    if name in ("TIMESTAMP", "TIMESTAMPTZ"):
        moment = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)
    if name in ("BINARY", "VARBINARY", "BYTES"):
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return value if isinstance(value, str) else json.dumps(value)
