"""Record formats: which exist, and the pure mapping between relation columns and Avro schemas.

    json                       text, parsed on the JVM side (from_json) and written with to_json
    avro, protobuf             Confluent wire format (magic byte 0, 4-byte schema id, payload) with a schema registry
                               (values and keys; a key's schema is under <topic>-key)
    string, long, int, double, bytes
                               a single-column value as the broker clients' primitive serializers write it
                               (UTF-8, 8/4-byte big-endian integers, 8-byte IEEE 754 double, raw bytes)

Pure: no registry, no broker. dsflow/formats/ (registry.py, decoding.py) does the I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

REGISTRY_FORMATS = ("avro", "protobuf")
PRIMITIVE_FORMATS = ("string", "long", "int", "double", "bytes")
VALUE_FORMATS = ("json", *REGISTRY_FORMATS, *PRIMITIVE_FORMATS)

PRIMITIVE_TYPES = {"string": ("VARCHAR", "STRING", "TEXT", "CHAR"), "long": ("BIGINT",), "int": ("INT", "INTEGER"),
                   "double": ("DOUBLE",), "bytes": ("BINARY", "VARBINARY", "BYTES")}
"""The column types a primitive format can carry (the relation has exactly one column)."""

_TO_AVRO: dict[str, Any] = {
    "BIGINT": "long", "INT": "int", "INTEGER": "int", "SMALLINT": "int", "TINYINT": "int", "DOUBLE": "double",
    "FLOAT": "float", "BOOLEAN": "boolean", "VARCHAR": "string", "STRING": "string", "TEXT": "string",
    "CHAR": "string", "BINARY": "bytes", "VARBINARY": "bytes", "BYTES": "bytes",
    "TIMESTAMP": {"type": "long", "logicalType": "timestamp-millis"},
    "TIMESTAMPTZ": {"type": "long", "logicalType": "timestamp-millis"},
    "DATE": {"type": "int", "logicalType": "date"},
}
_FROM_AVRO = {"long": "BIGINT", "int": "INT", "double": "DOUBLE", "float": "FLOAT", "boolean": "BOOLEAN",
              "string": "VARCHAR", "bytes": "BINARY", "enum": "VARCHAR"}
_LOGICAL = {"timestamp-millis": "TIMESTAMP", "timestamp-micros": "TIMESTAMP", "date": "DATE"}


def base_type(sql_type: str) -> str:
    """`DECIMAL(10, 2)` -> `DECIMAL`; `varchar` -> `VARCHAR`."""
    return re.split(r"[\s(<]", sql_type.strip(), maxsplit=1)[0].upper()


def avro_field_type(sql_type: str) -> Any:
    """The Avro type of a column type; None if it has none here (structs, arrays, maps)."""
    name = base_type(sql_type)
    if name == "DECIMAL":
        digits = re.findall(r"\d+", sql_type)
        precision, scale = (int(digits[0]), int(digits[1]) if len(digits) > 1 else 0) if digits else (10, 0)
        return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    return _TO_AVRO.get(name)


def avro_schema(record: str, namespace: str, columns: list[tuple[str, str]]) -> str:
    """An Avro record schema for the columns, each field nullable with default null.

    Raises ValueError naming the first column whose type has no Avro mapping."""
    fields = []
    for name, sql_type in columns:
        avro = avro_field_type(sql_type)
        if avro is None:
            raise ValueError(f"column '{name}' has type {sql_type}, which has no Avro mapping")
        fields.append({"name": name, "type": ["null", avro], "default": None})
    return json.dumps({"type": "record", "name": _avro_name(record), "namespace": _avro_name(namespace, dots=True),
                       "fields": fields}, separators=(",", ":"))


def columns_from_avro(schema_text: str) -> list[tuple[str, str]]:
    """The (name, SQL type) columns of an Avro record schema. Raises ValueError if it is not a flat record."""
    schema = json.loads(schema_text)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("the schema is not an Avro record")
    return [(f["name"], _sql_type(f["name"], f["type"])) for f in schema.get("fields", [])]


def _sql_type(field: str, avro: Any) -> str:
    if isinstance(avro, list):
        kept = [t for t in avro if t != "null"]
        if len(kept) != 1:
            raise ValueError(f"field '{field}' is a union of several types")
        return _sql_type(field, kept[0])
    if isinstance(avro, dict):
        logical = avro.get("logicalType")
        if logical == "decimal":
            return f"DECIMAL({avro.get('precision', 10)}, {avro.get('scale', 0)})"
        if logical in _LOGICAL:
            return _LOGICAL[logical]
        return _sql_type(field, avro.get("type"))
    if avro in _FROM_AVRO:
        return _FROM_AVRO[avro]
    raise ValueError(f"field '{field}' has Avro type {json.dumps(avro)}, which dsflow cannot read into a column")


def _avro_name(text: str, dots: bool = False) -> str:
    allowed = r"[^A-Za-z0-9_.]" if dots else r"[^A-Za-z0-9_]"
    cleaned = re.sub(allowed, "_", text) or "record"
    return cleaned if not cleaned[0].isdigit() else f"_{cleaned}"


PROTOBUF_TYPES = ("BIGINT", "INT", "INTEGER", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT", "BOOLEAN", "VARCHAR",
                  "STRING", "TEXT", "CHAR", "BINARY", "VARBINARY", "BYTES", "TIMESTAMP", "TIMESTAMPTZ", "DATE",
                  "DECIMAL")
"""Column types a protobuf value carries: one proto3 scalar field each, or google.protobuf.Timestamp
(TIMESTAMP), google.type.Date (DATE) and confluent.type.Decimal (DECIMAL) messages (formats/protobuf.py)."""

KEY_FORMATS = ("json", *REGISTRY_FORMATS, *PRIMITIVE_FORMATS)
"""Key formats. avro and protobuf keys are Confluent wire-format records whose schema lives under
`<topic>-key`; inside a query a key is text (one field: its text, several: a JSON object)."""


def key_subject(key_format: str | None, topic: str) -> str | None:
    """The registry subject of an avro/protobuf key: <topic>-key (TopicNameStrategy); None for other formats."""
    return f"{topic}-key" if key_format in REGISTRY_FORMATS else None


def format_carries(value_format: str, sql_type: str) -> bool:
    """True if an avro or protobuf value can carry a column of this type."""
    if value_format == "protobuf":
        return base_type(sql_type) in PROTOBUF_TYPES
    return avro_field_type(sql_type) is not None


def primitive_fits(value_format: str, sql_type: str) -> bool:
    return base_type(sql_type) in PRIMITIVE_TYPES.get(value_format, ())
