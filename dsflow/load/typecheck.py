"""The type checker of a continuous query: every expression of a resolved SELECT typed, and what Spark would refuse
for its types refused here, at its file:line:col (DSF-E400..E409).

It reads the tree load/select.py resolved and annotated (sqlglot's annotate_types, the same typed tree the Spark
translator rewrites subscripts with): columns, struct fields, casts and the results of functions keep the types
sqlglot gives them; operators, comparisons, subscripts, CASE branches and aggregates are typed here, as Spark's
analyzer types them under ANSI mode (its default). Two kinds of problem:

- refused by Spark's analyzer (a subscript on a VARCHAR, a TIMESTAMP compared with a number, `NOT id`, a CASE whose
  branches are an ARRAY and a number, ...): the query would not start;
- accepted by the analyzer but failing when a row arrives (DSF-E402, DSF-E403): a string Spark must cast to
  another type implicitly, under ANSI a cast that fails on any value that does not convert, such as
  `id > 'x'` (BIGINT against a non-numeric literal) or `userid + 1` (a VARCHAR column in arithmetic).

A type it cannot tell (UNKNOWN from sqlglot, a function it has no rule for) is let through: refusing a valid query
is worse than letting Spark say it. What is not checked yet is listed in docs/validate.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from dsflow.errors import Diagnostic

Report = Callable[[Diagnostic], None]
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
            return self.data_type.sql(dialect="spark").upper()
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


def text(node: exp.Expr) -> str:
    """An expression as the user wrote it, more or less: without the quotes qualification added."""
    from dsflow.load.sql import DIALECT

    bare = node.copy()
    for identifier in bare.find_all(exp.Identifier):
        if identifier.name.isidentifier():
            identifier.set("quoted", False)
    written = bare.sql(dialect=DIALECT)
    return written if len(written) <= 60 else written[:57] + "..."


def check_types(select: exp.Select, columns: dict[tuple[str, str], exp.DataType], where, report: Report) -> bool:
    """Type every expression of the resolved SELECT, whose sources have `columns` ({(alias, name) in lower case:
    type}); report each problem (DSF-E400..E409); True if there is none."""
    from dsflow.load.typerules import Checker

    checker = Checker(columns)
    for projection in select.selects:
        checker.infer(projection)
    for key in ("where", "having"):
        clause = select.args.get(key)
        if clause is not None:
            checker.condition(clause.this, key.upper())
    for join in select.args.get("joins") or []:
        if join.args.get("on") is not None:
            checker.condition(join.args["on"], "ON")
    group = select.args.get("group")
    for item in group.expressions if group is not None else []:
        checker.infer(item)
    for problem in checker.problems:
        report(Diagnostic(problem.code, problem.message, where(problem.node), hint=problem.hint))
    return not checker.problems
