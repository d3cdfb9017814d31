"""A `CREATE STREAM` statement inferred from records sampled from a topic (`dsflow infer`), as DeltaStream's
`PRINT ENTITY` followed by a hand-written `CREATE STREAM` would give.

Pure: the records come in as (key, value) pairs of text, the statement goes out as text with the notes that explain
what the sample could not settle. JSON objects only: a value that is not one is counted and left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

EPOCH_MS = (10**12, 10**13)
"""Epoch milliseconds between 2001-09 and 2286: a BIGINT column whose every value lies there, named like a time,
is taken as the event time."""
TIME_NAME = re.compile(r"(^|_)(ts|time|timestamp|eventtime|event_time)$|time$", re.IGNORECASE)
_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class _Shape:
    """What the sample showed of one value: its kinds, and an object's fields or an array's elements."""

    kinds: set[str] = field(default_factory=set)
    fields: dict[str, _Shape] = field(default_factory=dict)
    element: _Shape | None = None
    numbers: list[int] = field(default_factory=list)

    def see(self, value: Any) -> None:
        kind = _kind(value)
        self.kinds.add(kind)
        if kind == "object":
            for name, inner in value.items():
                self.fields.setdefault(name, _Shape()).see(inner)
        elif kind == "array":
            for inner in value:
                (self.element or self._new_element()).see(inner)
        elif kind == "integer" and len(self.numbers) < 1000:
            self.numbers.append(value)

    def _new_element(self) -> _Shape:
        self.element = _Shape()
        return self.element


@dataclass(frozen=True)
class Inferred:
    """The statement, and what the sample left open (each a `-- ` comment above it)."""

    statement: str
    notes: tuple[str, ...]
    records: int

    def text(self) -> str:
        return "".join(f"-- {note}\n" for note in self.notes) + self.statement + "\n"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def sql_type(shape: _Shape) -> str:
    """The DeltaStream type of what the sample showed: numbers widen (BIGINT, then DOUBLE), objects become
    STRUCTs of every field seen, and anything mixed or never seen but null is VARCHAR."""
    kinds = shape.kinds - {"null"}
    if kinds == {"boolean"}:
        return "BOOLEAN"
    if kinds == {"integer"}:
        return "BIGINT"
    if kinds and kinds <= {"integer", "double"}:
        return "DOUBLE"
    if kinds == {"object"} and shape.fields:
        return f"STRUCT<{', '.join(f'{_name(n)} {sql_type(s)}' for n, s in shape.fields.items())}>"
    if kinds == {"array"}:
        return f"ARRAY<{sql_type(shape.element) if shape.element else 'VARCHAR'}>"
    return "VARCHAR"


def _name(name: str) -> str:
    """The column name as written: quoted unless a plain identifier that is no SQL keyword (`from`, `select`)."""
    from sqlglot.tokens import Tokenizer

    plain = _SIMPLE.match(name) and name.upper() not in Tokenizer.KEYWORDS
    return name if plain else '"' + name.replace('"', '""') + '"'


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def infer_stream(relation: str, topic: str, records: Iterable[tuple[str | None, str | None]],
                 topic_property: str | None = None) -> Inferred:
    """The CREATE STREAM of `relation` over `topic` from its sampled (key, value) records; `topic_property` is what
    the statement's 'topic' must say (the name without the environment's prefix), `topic` by default."""
    shape, seen, skipped, keys = _Shape(), 0, 0, 0
    for key, value in records:
        seen += 1
        keys += key is not None
        try:
            parsed = json.loads(value) if value is not None else None
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            skipped += 1
            continue
        shape.see(parsed)
    notes = [f"inferred by dsflow infer from {seen} record(s) of topic '{topic}'"]
    if skipped:
        notes.append(f"{skipped} of them not a JSON object: left out of the columns")
    if not shape.fields:
        notes.append("no JSON object was read: declare the columns by hand")
    columns = [f"{_name(n)} {sql_type(s)}" for n, s in shape.fields.items()]
    notes += [f"column {n} was null in every record read: typed VARCHAR" for n, s in shape.fields.items()
              if s.kinds == {"null"}]
    notes += [f"column {n} held only empty objects: typed VARCHAR" for n, s in shape.fields.items()
              if s.kinds - {"null"} == {"object"} and not s.fields]
    properties = [("topic", topic_property or topic), ("value.format", "json")]
    if keys:
        properties.append(("key.format", "string"))
    if time := _event_time(shape):
        properties.append(("timestamp", time))
        notes.append(f"'timestamp' = '{time}': its values are epoch milliseconds")
    body = ",\n  ".join(columns) if columns else "-- columns"
    with_clause = ", ".join(f"{_quoted(k)} = {_quoted(v)}" for k, v in properties)
    return Inferred(f"CREATE STREAM {relation} (\n  {body}\n) WITH ({with_clause});", tuple(notes), seen)


def _event_time(shape: _Shape) -> str | None:
    for name, field_shape in shape.fields.items():
        if field_shape.kinds - {"null"} == {"integer"} and TIME_NAME.search(name) and field_shape.numbers \
                and all(EPOCH_MS[0] <= n < EPOCH_MS[1] for n in field_shape.numbers):
            return name
    return None


def infer_from_schema(relation: str, topic: str, columns: list[tuple[str, str]], value_format: str,
                      subject: str, version: int | None, key_format: str | None = None,
                      topic_property: str | None = None) -> Inferred:
    """The CREATE STREAM of `relation` over `topic` from the columns of a registry subject's latest schema (Avro or
    Protobuf): the value format is the schema's, the event time its first TIMESTAMP column, `key_format` as found
    (a '-key' subject's format, 'string' for keys without one, None without keys)."""
    notes = [f"inferred by dsflow infer from the schema registry: subject '{subject}'"
             + (f", version {version}" if version is not None else "") + f" ({value_format})"]
    body = ",\n  ".join(f"{_name(n)} {t}" for n, t in columns) if columns else "-- columns"
    properties = [("topic", topic_property or topic), ("value.format", value_format)]
    if key_format:
        properties.append(("key.format", key_format))
    time = next((n for n, t in columns if t.upper() == "TIMESTAMP"), None)
    if time is not None:
        properties.append(("timestamp", time))
        notes.append(f"'timestamp' = '{time}': the schema's first TIMESTAMP column")
    notes.append("the columns pin the schema as it is now; leave them out to take the subject's latest at each load")
    with_clause = ", ".join(f"{_quoted(k)} = {_quoted(v)}" for k, v in properties)
    return Inferred(f"CREATE STREAM {relation} (\n  {body}\n) WITH ({with_clause});", tuple(notes), 0)
