"""Writing: `value_serializer` turns a sink's `value` structs into bytes (avro and protobuf through the Confluent
serializers, which register the schema under the subject: registry.record_serializer; primitives by struct.pack);
`key_encoder` turns text keys into binary numbers or Confluent avro/protobuf keys (registered under <topic>-key).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

from dsflow.core.formats import PRIMITIVE_FORMATS, REGISTRY_FORMATS, columns_from_avro
from dsflow.core.nested import conform_row, nested_columns
from dsflow.errors import DsflowError
from dsflow.formats import protobuf
from dsflow.formats.keys import key_serializer
from dsflow.formats.primitives import UNPACK, primitive_serializer
from dsflow.formats.registry import record_serializer


def value_serializer(value_format: str, topic: str, registry: Mapping[str, str], schema: str | None,
                     subject: str | None) -> Callable[[list], list] | None:
    """A function from a batch's `value` structs (dicts) to record values; None for json (text as it is)."""
    if value_format == "json":
        return None
    if value_format in PRIMITIVE_FORMATS:
        return primitive_serializer(value_format)
    if value_format == "protobuf":
        return protobuf.serializer(topic, registry, schema or "", subject)
    if value_format != "avro":
        raise DsflowError("DSF-E771", f"value.format '{value_format}' cannot be written yet")
    serialize = record_serializer("avro", registry, schema, subject or f"{topic}-value", topic)
    nested = _nested_avro_columns(schema)
    if not nested:
        return lambda rows: [None if r is None else serialize(r) for r in rows]
    return lambda rows: [None if r is None else serialize(conform_row(r, nested)) for r in rows]


def _nested_avro_columns(schema: str | None) -> list:
    """The STRUCT, ARRAY and MAP columns of an Avro schema (their rows hold maps as pairs, Avro wants dicts)."""
    try:
        return nested_columns(columns_from_avro(schema)) if schema else []
    except ValueError:
        return []


def key_encoder(key_format: str | None, topic: str = "", registry: Mapping[str, str] | None = None,
                schema: str | None = None, subject: str | None = None) -> Callable[[list], list] | None:
    """Keys (text inside the query) back to binary numbers for a long/int/double key format, or to Confluent
    avro/protobuf keys (`schema`, registered under `subject`, default <topic>-key); None otherwise."""
    if key_format in REGISTRY_FORMATS:
        return key_serializer(key_format, topic, registry or {}, schema, subject)
    if key_format not in UNPACK:
        return None
    fmt = UNPACK[key_format][1]
    parse = float if key_format == "double" else lambda t: int(float(t)) if "." in t or "e" in t.lower() else int(t)
    return lambda keys: [None if k is None else struct.pack(fmt, parse(k if isinstance(k, str) else k.decode()))
                         for k in keys]
