"""pgoutput's text values as JSON fragments, by the column's type OID.

The change events are JSON (read back on the JVM with from_json and the relation's declared columns),
so each value becomes the JSON text Spark parses into the declared type:

    bool                      true / false
    int2, int4, int8, oid     the number as PostgreSQL prints it
    numeric                   the exact decimal as a JSON number (NaN and infinities: null)
    float4, float8            a JSON number (NaN and infinities: null)
    json, jsonb               embedded as JSON (a VARCHAR column receives the JSON text)
    timestamptz               '2024-05-01T10:00:00.123456+00:00' (sessions run with TimeZone=UTC)
    timestamp, date, time     ISO text
    arrays of the above       JSON arrays (nested for multi-dimensional arrays)
    anything else (text, varchar, uuid, bytea, ...)   a JSON string
    NULL                      null; an unchanged TOASTed value (not sent by pgoutput) is null too
"""

from __future__ import annotations

import json

from dsflow.adapters.postgres.pgoutput import UNCHANGED

SESSION_OPTIONS = "-c TimeZone=UTC -c DateStyle=ISO,YMD -c IntervalStyle=iso_8601 -c extra_float_digits=3"
"""Settings of every dsflow connection, so values print the same in the snapshot and in the stream."""

BOOL, NUMBERS, FLOATS, NUMERIC, JSONS = {16}, {20, 21, 23, 26}, {700, 701}, {1700}, {114, 3802}
TIMESTAMPTZ, TIMESTAMP = {1184}, {1114}
ARRAYS = {1000: 16, 1005: 21, 1007: 23, 1016: 20, 1028: 26, 1021: 700, 1022: 701, 1231: 1700, 199: 114,
          3807: 3802, 1185: 1184, 1115: 1114, 1182: 1082, 1183: 1083, 1009: 25, 1015: 1043, 1014: 1042, 2951: 2950}
"""Array type OID -> element type OID."""

_NOT_NUMBERS = {"NaN", "Infinity", "-Infinity", "infinity", "-infinity"}


def fragment(text, type_oid: int) -> str:
    """The JSON text of one value (`text` is pgoutput's text, None for NULL, or UNCHANGED)."""
    if text is None or text is UNCHANGED:
        return "null"
    if isinstance(text, bytes):
        return json.dumps(text.hex())
    if type_oid in NUMBERS:
        return text
    if type_oid in NUMERIC or type_oid in FLOATS:
        return "null" if text in _NOT_NUMBERS else text
    if type_oid in BOOL:
        return "true" if text in ("t", "true") else "false"  # pgoutput prints t/f, bool::text true/false
    if type_oid in JSONS:  # json keeps its input's whitespace; outside strings it is only whitespace
        return text.replace("\n", " ").replace("\r", " ").replace("\t", " ")
    if type_oid in TIMESTAMPTZ or type_oid in TIMESTAMP:
        return "null" if text.endswith("infinity") else json.dumps(iso_timestamp(text))
    if type_oid in ARRAYS:
        return array_fragment(text, ARRAYS[type_oid])
    return json.dumps(text)


def iso_timestamp(text: str) -> str:
    """'2024-05-01 10:00:00.5+00' -> '2024-05-01T10:00:00.5+00:00' (a timestamp without zone keeps none)."""
    text = text.replace(" ", "T", 1)
    sign = max(text.rfind("+"), text.rfind("-", 11))
    if sign > 10 and len(text) - sign == 3:  # +HH
        text += ":00"
    return text


def array_fragment(text: str, element_oid: int) -> str:
    """A PostgreSQL array literal ('{1,2,NULL}', '{{a,b},{c,d}}', '{"x y",z}') as a JSON array."""
    value, _ = _parse_array(text, text.index("{") + 1)
    return _array_json(value, element_oid)


def _array_json(value, element_oid: int) -> str:
    if isinstance(value, list):
        return "[" + ",".join(_array_json(v, element_oid) for v in value) + "]"
    return fragment(value, element_oid)


def _parse_array(text: str, pos: int) -> tuple[list, int]:
    """Elements from just after '{' up to the matching '}'; returns them and the position after it."""
    items: list = []
    while pos < len(text):
        char = text[pos]
        if char == "}":
            return items, pos + 1
        if char == ",":
            pos += 1
        elif char == "{":
            nested, pos = _parse_array(text, pos + 1)
            items.append(nested)
        elif char == '"':
            pos += 1
            chars = []
            while text[pos] != '"':
                if text[pos] == "\\":
                    pos += 1
                chars.append(text[pos])
                pos += 1
            items.append("".join(chars))
            pos += 1
        else:
            end = pos
            while text[end] not in ",}":
                end += 1
            word = text[pos:end]
            items.append(None if word == "NULL" else word)
            pos = end
    return items, pos


def row_json(names: list[str], values: tuple, type_oids: list[int]) -> str:
    """A row as a JSON object of its columns."""
    return "{" + ",".join(f"{json.dumps(n)}:{fragment(v, t)}"
                          for n, v, t in zip(names, values, type_oids, strict=False)) + "}"


TEXTS = {25, 1043, 1042, 2950, 17, 1082, 1083, 1186, 18, 19}
"""text, varchar, bpchar, uuid, bytea, date, time, interval, char, name: read as a JSON string."""
TYPE_NAMES = {16: "boolean", 20: "bigint", 21: "smallint", 23: "integer", 26: "oid", 700: "real",
              701: "double precision", 1700: "numeric", 114: "json", 3802: "jsonb", 1184: "timestamptz",
              1114: "timestamp", 25: "text", 1043: "varchar", 1042: "char", 2950: "uuid", 17: "bytea", 1082: "date",
              1083: "time", 1186: "interval", 18: "char", 19: "name"}
KNOWN = BOOL | NUMBERS | FLOATS | NUMERIC | JSONS | TIMESTAMPTZ | TIMESTAMP | TEXTS | set(ARRAYS)
_FITS = {  # declared Spark type (its first word) -> the PostgreSQL types whose JSON it reads
    "BIGINT": NUMBERS, "INT": NUMBERS, "INTEGER": NUMBERS, "SMALLINT": NUMBERS, "TINYINT": NUMBERS,
    "DECIMAL": NUMBERS | NUMERIC | FLOATS, "DOUBLE": NUMBERS | NUMERIC | FLOATS, "FLOAT": NUMBERS | NUMERIC | FLOATS,
    "BOOLEAN": BOOL, "TIMESTAMP": TIMESTAMPTZ | TIMESTAMP | {1082}, "DATE": {1082}, "STRUCT": JSONS, "MAP": JSONS,
}


def type_name(type_oid: int) -> str:
    """A PostgreSQL type's name for messages: 'numeric', 'text[]', or 'type OID 12345'."""
    if type_oid in ARRAYS:
        return type_name(ARRAYS[type_oid]) + "[]"
    return TYPE_NAMES.get(type_oid, f"type OID {type_oid}")


def fits(type_oid: int, declared: str) -> bool:
    """Whether a column of this PostgreSQL type can be read as the declared Spark type (a STRUCT field's type,
    e.g. 'DECIMAL(10, 2)', 'ARRAY<STRING>'). VARCHAR/STRING reads anything; a type dsflow does not know
    (an enum, a domain, an extension's type) is given the benefit of the doubt."""
    word = declared.strip().upper().split("(")[0].split("<")[0].strip()
    if word in ("VARCHAR", "STRING", "TEXT", "CHAR") or type_oid not in KNOWN:
        return True
    if word == "ARRAY":
        inner = declared.strip()[declared.index("<") + 1:declared.rindex(">")]
        return type_oid in ARRAYS and fits(ARRAYS[type_oid], inner)
    allowed = _FITS.get(word)
    return allowed is None or type_oid in allowed
