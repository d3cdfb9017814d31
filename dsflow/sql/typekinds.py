"""The kinds of types the type checker (sql/typecheck.py) tells apart, and what a string converts to."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlglot import exp

from dsflow.sql.dialect import SPARK
T = exp.DataType.Type

NUM, STR, BOOL, TIME, DATE, ARRAY, MAP, STRUCT, NULL, BINARY, INTERVAL, UNKNOWN = (
    "number", "string", "boolean", "timestamp", "date", "array", "map", "struct", "null", "binary", "interval",
    "unknown")
COMPLEX = (ARRAY, MAP, STRUCT)
RUNTIME_CODES = ("DSF-E402", "DSF-E403")
"""The codes of a query Spark's analyzer accepts but whose rows fail (an implicit cast of a string, under ANSI)."""

NUMBER_TEXT = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*")
DATE_TEXT = re.compile(r"\s*\d{4}-\d{1,2}(-\d{1,2})?\s*")
TIMESTAMP_TEXT = re.compile(r"\s*\d{4}-\d{1,2}-\d{1,2}([ T]\d{1,2}(:\d{1,2}(:\d{1,2}(\.\d{1,9})?)?)?)?"
                            r"(Z|[+-]\d{2}:?\d{2})?\s*")
BOOLEAN_TEXT = {"t", "true", "y", "yes", "1", "f", "false", "n", "no", "0"}


@dataclass(frozen=True)
class Typed:
    """An expression's type: its kind, sqlglot's DataType when known, and the text of a string literal."""

    kind: str
    data_type: exp.DataType | None = None
    literal: str | None = None

    def show(self) -> str:
        if self.literal is not None:
            return f"the string '{self.literal}'"
        if self.data_type is not None and not self.data_type.is_type(T.UNKNOWN):
            return self.data_type.sql(dialect=SPARK).upper()
        return self.kind.upper()


UNTYPED = Typed(UNKNOWN)


def kind_of(data_type: exp.DataType | None) -> str:
    """The kind of a sqlglot DataType."""
    if data_type is None:
        return UNKNOWN
    this = data_type.this
    if this in exp.DataType.NUMERIC_TYPES:
        return NUM
    if this in exp.DataType.TEXT_TYPES:
        return STR
    if this in (T.DATE, T.DATE32):
        return DATE
    if this in exp.DataType.TEMPORAL_TYPES:
        return TIME
    simple = {T.BOOLEAN: BOOL, T.ARRAY: ARRAY, T.MAP: MAP, T.STRUCT: STRUCT, T.NULL: NULL, T.BINARY: BINARY,
              T.VARBINARY: BINARY, T.INTERVAL: INTERVAL}
    return simple.get(this, UNKNOWN)


def typed(data_type: exp.DataType | None) -> Typed:
    kind = kind_of(data_type)
    return Typed(kind, data_type if kind != UNKNOWN else None)


def number_literal(node: exp.Literal) -> Typed:
    """A number literal as Spark types it (literal_type; sqlglot types every integer INT, a fraction DOUBLE, and
    leaves a literal inside a CAST untyped)."""
    return Typed(NUM, literal_type(node.name))


@cache
def _parsed_type(written: str) -> exp.DataType:
    return exp.DataType.build(written)


def built(written: str) -> exp.DataType:
    """`exp.DataType.build(written)`, parsed once per text (a build parses SQL: a tenth of a cold plan's time when
    done for every node typed); a copy, the caller's to change."""
    return _parsed_type(written).copy()


def literal_type(written: str) -> exp.DataType:
    """A number literal's type in Spark: INT, BIGINT past 32 bits, a DECIMAL of its digits (an integer past 64
    bits, or one with a fraction: 2.5 is DECIMAL(2, 1)), DOUBLE with an exponent."""
    digits = written.lstrip("+-")
    if "e" in digits.lower():
        return built("DOUBLE")
    if digits.isdigit():
        value = abs(int(digits))
        return built("INT" if value < 2**31 else "BIGINT" if value < 2**63 else
                                  f"DECIMAL({min(len(str(value)), 38)}, 0)")
    whole, _, fraction = digits.partition(".")
    unscaled = (whole + fraction).lstrip("0")
    return built(f"DECIMAL({min(max(len(unscaled), len(fraction), 1), 38)}, {min(len(fraction), 38)})")


def converts(text: str, kind: str) -> bool:
    """Whether Spark's ANSI cast of the string `text` to `kind` succeeds."""
    if kind == NUM:
        return NUMBER_TEXT.fullmatch(text) is not None
    if kind == DATE:
        return DATE_TEXT.fullmatch(text) is not None or TIMESTAMP_TEXT.fullmatch(text) is not None
    if kind == TIME:
        return TIMESTAMP_TEXT.fullmatch(text) is not None or DATE_TEXT.fullmatch(text) is not None
    if kind == BOOL:
        return text.strip().lower() in BOOLEAN_TEXT
    return True


class Problem(Exception):
    """A type error found while typing one expression."""

    def __init__(self, code: str, node: exp.Expr, message: str, hint: str) -> None:
        super().__init__(message)
        self.code, self.node, self.message, self.hint = code, node, message, hint


class Later:
    """Message text made only when a message is: `text()` writes SQL, too slow to run for every node typed."""

    __slots__ = ("make", "args")

    def __init__(self, make: Callable[..., str], *args: Any) -> None:
        self.make, self.args = make, args

    def __str__(self) -> str:
        return self.make(*self.args)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def text(node: exp.Expr) -> str:
    """An expression as the user wrote it, more or less: without the quotes qualification added."""
    from dsflow.sql.parse import DIALECT

    bare = node.copy()
    for identifier in bare.find_all(exp.Identifier):
        if identifier.name.isidentifier():
            identifier.set("quoted", False)
    written = bare.sql(dialect=DIALECT)
    return written if len(written) <= 60 else written[:57] + "..."
