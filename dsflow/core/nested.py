"""Column types as a tree (STRUCT, ARRAY, MAP of scalars), parsed from the type text dsflow records, and decoded
values shaped to it.

    parse_type("ARRAY<STRUCT<sku VARCHAR, qty INT>>")   a Shape: array of a struct of two scalars
    type_text(shape)                                    the text back, as dsflow spells column types
    conform(value, shape)                               a decoded value with the declared struct fields (matched
                                                        by name, case-insensitively; missing ones NULL) and maps
                                                        as dicts (pairs too, as Arrow lists them)
    conform_row(row, nested_columns(columns))           the same for a row's nested columns

Pure: the Avro mapping (core/formats.py) and the codecs (dsflow/formats/) use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

STRING_TYPES = ("VARCHAR", "STRING", "TEXT", "CHAR")
"""Scalar types that are strings: the only MAP keys avro and protobuf values carry (DSF-E774)."""


@dataclass(frozen=True)
class Shape:
    """A column type: a scalar (its SQL text in `type`), or a STRUCT, ARRAY or MAP of shapes."""

    kind: str
    """"scalar", "struct", "array" or "map"."""
    type: str = ""
    """A scalar's SQL type, e.g. BIGINT or DECIMAL(10, 2)."""
    fields: tuple[tuple[str, Shape], ...] = ()
    """A struct's fields, in order."""
    element: Shape | None = None
    """An array's element, a map's value."""
    key: Shape | None = None
    """A map's key."""

    @property
    def nested(self) -> bool:
        return self.kind != "scalar"

    @property
    def element_shape(self) -> Shape:
        """`element` of an array or a map, which has one."""
        assert self.element is not None, self
        return self.element

    @property
    def key_shape(self) -> Shape:
        """`key` of a map, which has one."""
        assert self.key is not None, self
        return self.key


_TOKEN = re.compile(r'\s*(?:"((?:[^"]|"")*)"|`((?:[^`]|``)*)`|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))')


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text): kind q (a quoted name), w (a word), n (a number) or p (punctuation)."""
    out, pos, text = [], 0, text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"cannot read type {text!r} at {text[pos:pos + 10]!r}")
        quoted, ticked, word, number, punct = match.groups()
        if quoted is not None or ticked is not None:
            out.append(("q", (quoted or "").replace('""', '"') if ticked is None else ticked.replace("``", "`")))
        else:
            out.append(("w", word) if word else ("n", number) if number else ("p", punct))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.tokens, self.pos = text, _tokens(text), 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("", "")

    def take(self, expected: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if not token[0] or (expected is not None and token[1] != expected):
            raise ValueError(f"cannot read type {self.text!r}: expected {expected or 'more'}")
        self.pos += 1
        return token

    def shape(self) -> Shape:
        kind, word = self.take()
        name = word.upper()
        if kind != "w":
            raise ValueError(f"cannot read type {self.text!r}: {word!r} is not a type")
        if name in ("STRUCT", "ROW") and self.peek()[1] == "<":
            return Shape("struct", fields=self._fields())
        if name == "ARRAY":
            self.take("<")
            element = self.shape()
            self.take(">")
            return Shape("array", element=element)
        if name == "MAP":
            self.take("<")
            key = self.shape()
            self.take(",")
            value = self.shape()
            self.take(">")
            return Shape("map", key=key, element=value)
        return Shape("scalar", type=name + self._parameters())

    def _fields(self) -> tuple[tuple[str, Shape], ...]:
        self.take("<")
        fields: list[tuple[str, Shape]] = []
        while self.peek()[1] != ">":
            if fields:
                self.take(",")
            kind, name = self.take()
            if kind not in ("w", "q"):
                raise ValueError(f"cannot read type {self.text!r}: {name!r} is not a field name")
            if self.peek()[1] == ":":
                self.take(":")
            fields.append((name, self.shape()))
        self.take(">")
        return tuple(fields)

    def _parameters(self) -> str:
        if self.peek()[1] != "(":
            return ""
        self.take("(")
        numbers: list[str] = []
        while self.peek()[1] != ")":
            if numbers:
                self.take(",")
            numbers.append(self.take()[1])
        self.take(")")
        return f"({', '.join(numbers)})"


def parse_type(text: str) -> Shape:
    """The shape of a column type text. Raises ValueError if it cannot be read."""
    parser = _Parser(text)
    shape = parser.shape()
    if parser.peek()[0]:
        raise ValueError(f"cannot read type {text!r}: unexpected {parser.peek()[1]!r}")
    return shape


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = frozenset({"select", "from", "where", "group", "order", "by", "as", "and", "or", "not", "null", "true",
                       "false", "case", "when", "then", "else", "end", "join", "on", "union", "with", "table"})


def field_name(name: str) -> str:
    """A struct field's name as a type text spells it: quoted when it is not a plain identifier."""
    if _PLAIN.fullmatch(name) and name.lower() not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'


def type_text(shape: Shape) -> str:
    """The type text of a shape (`STRUCT<a INT, tags ARRAY<VARCHAR>>`)."""
    if shape.kind == "struct":
        return "STRUCT<" + ", ".join(f"{field_name(n)} {type_text(s)}" for n, s in shape.fields) + ">"
    if shape.kind == "array":
        return f"ARRAY<{type_text(shape.element_shape)}>"
    if shape.kind == "map":
        return f"MAP<{type_text(shape.key_shape)}, {type_text(shape.element_shape)}>"
    return shape.type


def is_string(shape: Shape) -> bool:
    return shape.kind == "scalar" and re.split(r"[\s(]", shape.type, maxsplit=1)[0] in STRING_TYPES


def conform(value: Any, shape: Shape) -> Any:
    """A decoded value shaped to its type: struct fields picked by name (case-insensitively), maps as dicts.
    Raises ValueError when a struct, array or map is not one."""
    if value is None or shape.kind == "scalar":
        return value
    if shape.kind == "struct":
        if not isinstance(value, dict):
            raise ValueError(f"expected a record, got {type(value).__name__}")
        lowered = {str(k).lower(): v for k, v in value.items()}
        return {name: conform(value[name] if name in value else lowered.get(name.lower()), sub)
                for name, sub in shape.fields}
    if shape.kind == "array":
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"expected an array, got {type(value).__name__}")
        element = shape.element_shape
        return [conform(v, element) for v in value]
    element = shape.element_shape
    pairs = value.items() if isinstance(value, dict) else value
    try:
        return {k: conform(v, element) for k, v in pairs}
    except (TypeError, ValueError) as err:
        raise ValueError(f"expected a map: {err}") from err


def nested_columns(columns: Any) -> list[tuple[str, Shape]]:
    """(name, shape) of the (name, type) columns that are STRUCT, ARRAY or MAP."""
    out = []
    for name, sql_type in columns:
        try:
            shape = parse_type(sql_type)
        except ValueError:
            continue
        if shape.nested:
            out.append((name, shape))
    return out


def conform_row(row: dict, nested: list[tuple[str, Shape]]) -> dict:
    """The row (changed in place) with its `nested` columns conformed. Raises ValueError naming the column."""
    for name, shape in nested:
        try:
            row[name] = conform(row.get(name), shape)
        except ValueError as err:
            raise ValueError(f"column '{name}': {err}") from err
    return row
