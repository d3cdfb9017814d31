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

from dsflow.core.nested import Shape, is_string, parse_type, type_text

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


def avro_field_type(sql_type: str, namespace: str = "", name: str = "value") -> Any:
    """The Avro type of a column type; None if it has none here. A STRUCT is a record named after its field
    (in `namespace`, the path of the fields around it), an ARRAY an array and a MAP (string keys) a map, their
    fields, elements and values nullable as columns are."""
    try:
        shape = parse_type(sql_type)
    except ValueError:
        return None
    return _avro_of(shape, namespace, name)


def _avro_of(shape: Shape, namespace: str, name: str) -> Any:
    if shape.kind == "struct":
        inner = f"{namespace}.{_avro_name(name)}" if namespace else _avro_name(name)
        fields = [(f, _avro_of(s, inner, f)) for f, s in shape.fields]
        if any(t is None for _, t in fields):
            return None
        record = {"type": "record", "name": _avro_name(name),
                  "fields": [{"name": f, "type": ["null", t], "default": None} for f, t in fields]}
        return record | ({"namespace": namespace} if namespace else {})
    if shape.kind in ("array", "map"):
        inner = _avro_of(shape.element_shape, namespace, name)
        if inner is None or (shape.kind == "map" and not is_string(shape.key_shape)):
            return None
        return {"type": "array", "items": ["null", inner]} if shape.kind == "array" else \
            {"type": "map", "values": ["null", inner]}
    base = base_type(shape.type)
    if base == "DECIMAL":
        digits = re.findall(r"\d+", shape.type)
        precision, scale = (int(digits[0]), int(digits[1]) if len(digits) > 1 else 0) if digits else (10, 0)
        return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    return _TO_AVRO.get(base)


def avro_schema(record: str, namespace: str, columns: list[tuple[str, str]]) -> str:
    """An Avro record schema for the columns, each field nullable with default null; a STRUCT column is a record
    in the namespace `<namespace>.<record>`.

    Raises ValueError naming the first column whose type has no Avro mapping."""
    fields = []
    space = _avro_name(namespace, dots=True)
    for name, sql_type in columns:
        avro = avro_field_type(sql_type, f"{space}.{_avro_name(record)}", name)
        if avro is None:
            raise ValueError(f"column '{name}' has type {sql_type}, which has no Avro mapping")
        fields.append({"name": name, "type": ["null", avro], "default": None})
    return json.dumps({"type": "record", "name": _avro_name(record), "namespace": space,
                       "fields": fields}, separators=(",", ":"))


def columns_from_avro(schema_text: str) -> list[tuple[str, str]]:
    """The (name, SQL type) columns of an Avro record schema: records are STRUCTs, arrays ARRAYs, maps
    MAP<VARCHAR, ...>. Raises ValueError for what no column can hold (a recursive record, a union of types)."""
    schema = json.loads(schema_text)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("the schema is not an Avro record")
    named: dict[str, Any] = {}
    _name_type(schema, schema.get("namespace", ""), named)
    return [(f["name"], type_text(_shape(f["name"], f["type"], named, schema.get("namespace", ""), ())))
            for f in schema.get("fields", [])]


def _name_type(avro: dict, namespace: str, named: dict[str, Any]) -> str:
    """Record a named type (record, enum, fixed) under its full and short names; its namespace."""
    name = avro.get("name", "")
    space = avro.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
    short = name.rsplit(".", 1)[-1]
    named[short] = named[f"{space}.{short}" if space else short] = avro
    return space


def _shape(field: str, avro: Any, named: dict[str, Any], namespace: str, seen: tuple[str, ...]) -> Shape:
    if isinstance(avro, list):
        kept = [t for t in avro if t != "null"]
        if len(kept) != 1:
            raise ValueError(f"field '{field}' is a union of several types")
        return _shape(field, kept[0], named, namespace, seen)
    if isinstance(avro, str) and avro in named:
        if avro in seen or named[avro].get("name") in seen:
            raise ValueError(f"field '{field}' is a recursive record, which no column can hold")
        return _shape(field, named[avro], named, namespace, seen)
    if not isinstance(avro, dict):
        if avro in _FROM_AVRO:
            return Shape("scalar", type=_FROM_AVRO[avro])
        raise ValueError(f"field '{field}' has Avro type {json.dumps(avro)}, which dsflow cannot read into a column")
    kind, logical = avro.get("type"), avro.get("logicalType")
    if logical == "decimal":
        return Shape("scalar", type=f"DECIMAL({avro.get('precision', 10)}, {avro.get('scale', 0)})")
    if logical in _LOGICAL:
        return Shape("scalar", type=_LOGICAL[logical])
    if kind in ("record", "enum", "fixed"):
        space = _name_type(avro, namespace, named)
        if kind != "record":
            return Shape("scalar", type="VARCHAR" if kind == "enum" else "BINARY")
        inner = (*seen, avro.get("name", ""))
        return Shape("struct", fields=tuple((f["name"], _shape(f["name"], f["type"], named, space, inner))
                                            for f in avro.get("fields", [])))
    if kind == "array":
        return Shape("array", element=_shape(field, avro.get("items"), named, namespace, seen))
    if kind == "map":
        return Shape("map", key=Shape("scalar", type="VARCHAR"),
                     element=_shape(field, avro.get("values"), named, namespace, seen))
    return _shape(field, kind, named, namespace, seen)


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
    return carry_problem(value_format, sql_type) is None


def carry_problem(value_format: str, sql_type: str) -> tuple[str, str] | None:
    """None if an avro or protobuf value carries a column of this type (scalars, STRUCT, ARRAY, MAP of them);
    else (code, what does not fit): DSF-E124 a type inside it has no mapping, DSF-E774 a MAP key that is not a
    string, DSF-E777 an ARRAY or MAP directly inside an ARRAY or a MAP's value (protobuf has no repeated
    repeated field)."""
    try:
        shape = parse_type(sql_type)
    except ValueError:
        return "DSF-E124", f"{sql_type} is not a type dsflow reads"
    return _shape_problem(value_format, shape)


def _shape_problem(value_format: str, shape: Shape) -> tuple[str, str] | None:
    if shape.kind == "struct":
        return next(filter(None, (_shape_problem(value_format, s) for _, s in shape.fields)), None)
    if shape.kind == "map" and not is_string(shape.key_shape):
        return "DSF-E774", f"a MAP key is {type_text(shape.key_shape)}, not a string"
    if shape.kind in ("array", "map"):
        if value_format == "protobuf" and shape.element_shape.kind in ("array", "map"):
            what = "an ARRAY's element" if shape.kind == "array" else "a MAP's value"
            return "DSF-E777", f"{what} is {type_text(shape.element_shape)}: protobuf has no repeated repeated field"
        return _shape_problem(value_format, shape.element_shape)
    if value_format == "protobuf":
        return None if base_type(shape.type) in PROTOBUF_TYPES else ("DSF-E124", f"{shape.type} has no mapping")
    return None if _avro_of(shape, "", "value") is not None else ("DSF-E124", f"{shape.type} has no mapping")


def primitive_fits(value_format: str, sql_type: str) -> bool:
    return base_type(sql_type) in PRIMITIVE_TYPES.get(value_format, ())
