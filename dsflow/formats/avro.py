"""Avro values and keys in the Confluent wire format: magic byte 0, 4-byte schema id, Avro binary. The writer
schema is fetched by id once per process (cached) from the registry, and records are decoded with fastavro.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

from dsflow.errors import DsflowError
from dsflow.formats.registry import URL, schema_by_id


def avro_record(value: bytes, registry: Mapping[str, str], records_only: bool = True) -> tuple[Any, str | None]:
    """(the decoded datum, None) or (None, error) for one Confluent wire-format Avro value or key;
    `records_only`: a datum that is not a record is an error."""
    import fastavro

    if len(value) < 5 or value[0] != 0:
        return None, "not in the Confluent wire format (no magic byte 0 and schema id)"
    schema_id = int.from_bytes(value[1:5], "big")
    schema = writer_schema(registry, schema_id)
    if schema is None:
        return None, f"unknown schema id {schema_id}"
    try:
        record = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None)
    except Exception as err:  # noqa: BLE001 - any decoding failure makes a dead letter
        return None, f"cannot decode Avro with schema id {schema_id}: {err!r}"
    if records_only and not isinstance(record, dict):
        return None, f"schema id {schema_id} is not a record schema"
    return record, None


_SCHEMAS: dict[tuple[str, int], Any] = {}


def writer_schema(registry: Mapping[str, str], schema_id: int) -> Any:
    """The parsed Avro schema of an id, cached per process; None if the registry does not know the id.
    A registry that cannot be reached stops the query (DSF-E770): that is not the record's fault."""
    import fastavro

    key = (registry.get(URL, ""), schema_id)
    if key not in _SCHEMAS:
        try:
            text, schema_type = schema_by_id(registry, schema_id)
        except DsflowError as err:
            if err.code != "DSF-E123":
                raise
            _SCHEMAS[key] = None
            return None
        _SCHEMAS[key] = fastavro.parse_schema(json.loads(text)) if schema_type.upper() == "AVRO" else None
    return _SCHEMAS[key]
