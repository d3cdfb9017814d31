"""What Spark's analyzer takes in each argument of a function, past the first (sql/typerules.py checks the first).

Each entry names an argument (sqlglot's arg key, or its position for a function sqlglot parses as an anonymous call)
and what it takes, as Spark's ANSI analyzer types it (tests/integration/test_typecheck.py holds Spark's verdict on
each):

- NUMBER: any number (Spark casts one number type to another); a string is cast when the query runs (E402/E403);
- SMALL_INT: an INT, SMALLINT or TINYINT only (DATE_ADD's days: a BIGINT or a DOUBLE is refused), or a string;
- INTEGRAL: an integer type, no string (TO_TIMESTAMP_LTZ's epoch milliseconds, Spark's TIMESTAMP_MILLIS);
- NUMERIC: a number, no string (TO_TIMESTAMP_LTZ's epoch seconds, Spark's TIMESTAMP_SECONDS);
- TEXT_OR_TIME: a string, a TIMESTAMP or a DATE (UNIX_TIMESTAMP's first argument);
- TEMPORAL: a TIMESTAMP or a DATE, or a string (cast when the query runs);
- TEXT: anything but an ARRAY, a MAP or a STRUCT (Spark casts the other types to a string);
- STRICT_TEXT: a string only (JSON_VALUE, Spark's GET_JSON_OBJECT, casts nothing).

Everything else, and a type the checker cannot tell, is let through.
"""

from __future__ import annotations

from typing import Protocol

from sqlglot import exp

from dsflow.sql.typekinds import (
    ARRAY, COMPLEX, DATE, MAP, NULL, NUM, STR, TIME, UNKNOWN, Later, Problem, Typed, text, typed,
)

T = exp.DataType.Type

NUMBER, SMALL_INT, INTEGRAL, NUMERIC, TEMPORAL, TEXT, STRICT_TEXT, TEXT_OR_TIME = (
    "a number", "an INT", "an integer", "a number (no string)", "a TIMESTAMP or DATE", "a string", "a VARCHAR",
    "a string, TIMESTAMP or DATE")
SMALL_INTS = (T.INT, T.SMALLINT, T.TINYINT)
INTEGERS = (T.BIGINT, T.INT, T.SMALLINT, T.TINYINT)

Place = str | int
ARGUMENTS: dict[type | str, tuple[tuple[Place, str], ...]] = {
    exp.Substring: (("start", NUMBER), ("length", NUMBER)),
    exp.Repeat: (("times", NUMBER),),
    exp.Left: (("expression", NUMBER),),
    exp.Right: (("expression", NUMBER),),
    exp.Pad: (("expression", NUMBER), ("fill_pattern", TEXT)),
    exp.Pow: (("expression", NUMBER),),
    exp.Log: (("expression", NUMBER),),
    exp.TsOrDsAdd: (("this", TEMPORAL), ("expression", SMALL_INT)),
    exp.DateDiff: (("this", TEMPORAL), ("expression", TEMPORAL)),
    exp.TimestampDiff: (("this", TEMPORAL), ("expression", TEMPORAL)),
    exp.UnixToStr: (("this", NUMBER), ("format", TEXT)),
    exp.TimeToStr: (("this", TEMPORAL), ("format", TEXT)),
    exp.TimestampTrunc: (("this", TEMPORAL),),
    exp.StrToUnix: (("this", TEXT_OR_TIME), ("format", TEXT)),
    exp.StrToTime: (("this", TEXT), ("format", TEXT)),
    exp.Replace: (("expression", TEXT), ("replacement", TEXT)),
    exp.RegexpReplace: (("expression", TEXT), ("replacement", TEXT)),
    exp.RegexpExtract: (("expression", TEXT), ("group", NUMBER)),
    exp.RegexpLike: (("expression", TEXT),),
    exp.RegexpSplit: (("this", TEXT), ("expression", TEXT)),
    exp.StrPosition: (("this", TEXT), ("substr", TEXT)),
    exp.Ascii: (("this", TEXT),),
    exp.Chr: ((0, NUMBER),),
    "SPLIT_INDEX": ((0, TEXT), (1, TEXT), (2, NUMBER)),
    "JSON_VALUE": ((0, STRICT_TEXT), (1, STRICT_TEXT)),
}
"""Function (sqlglot class, or the name of an anonymous call) -> (argument, what it takes)."""
DECLARED = (exp.Column, exp.Literal, exp.Cast, exp.Dot, exp.Bracket)
"""The values whose number type is declared or written (a column, a field, a literal, a CAST; TRY_CAST is a Cast).
A computed number's width is Spark's (sql/typewidths.py: `DATE_ADD(ts, id + 1)` is a BIGINT of days, refused;
`DATE_ADD(ts, COALESCE(n, 0))` an INT); where that is not known, an INT or an integer is not required."""
LOOKED_THROUGH = (exp.TsOrDsToDate, exp.TimeStrToTime)
"""The conversions sqlglot wraps an argument in when parsing (DATEDIFF(x, ...) is DATEDIFF(TO_DATE(x), ...)): the
argument Spark sees is the one inside."""


class Typing(Protocol):
    def infer(self, node: exp.Expr) -> Typed: ...

    def _wanted(self, node: exp.Expr, found: Typed, kind: str, what: str | Later) -> None: ...

    def number(self, node: exp.Expr) -> exp.DataType | None: ...


def arguments(node: exp.Expr) -> list[tuple[exp.Expr, str]]:
    """The arguments of a call that ARGUMENTS names, with what each takes."""
    anonymous = isinstance(node, exp.Anonymous)
    places = ARGUMENTS.get(node.name.upper() if anonymous else type(node), ())
    values = list(node.expressions) if anonymous or isinstance(node, exp.Chr) else []  # by position
    found = []
    for place, wanted in places:
        value = (values[place] if place < len(values) else None) if isinstance(place, int) else node.args.get(place)
        if isinstance(value, LOOKED_THROUGH) and not value.args.get("format"):
            value = value.this
        if isinstance(value, exp.Expr):
            found.append((value, wanted))
    if anonymous and node.name.upper() == "TO_TIMESTAMP_LTZ" and values:
        precision = values[1].name if len(values) > 1 else "3"
        found.append((values[0], NUMERIC if precision == "0" else INTEGRAL))
    return found


def check_arguments(checker: Typing, node: exp.Expr, name: str | Later) -> None:
    """Each argument ARGUMENTS names against what it takes; a Problem (DSF-E409, or E402/E403 for a string cast
    when the query runs) for the first that does not fit."""
    for value, wanted in arguments(node):
        found = checker.infer(value)
        if found.kind in (UNKNOWN, NULL):
            continue
        what = Later(lambda name, value: f"{name}'s argument '{text(value)}'", name, value)
        if _fits(checker, found, wanted, value):
            continue
        if found.kind == STR and wanted in (NUMBER, SMALL_INT, TEMPORAL):
            checker._wanted(value, found, TIME if wanted == TEMPORAL else NUM, what)
            continue
        raise Problem("DSF-E409", node, f"{text(node)}: {what} is {found.show()}, not {wanted}",
                      f"pass {wanted}, or CAST it")


def _fits(checker: Typing, found: Typed, wanted: str, value: exp.Expr) -> bool:
    if wanted == TEXT:
        return found.kind not in COMPLEX
    if wanted == STRICT_TEXT:
        return found.kind == STR
    if wanted == TEMPORAL:
        return found.kind in (TIME, DATE)
    if wanted == TEXT_OR_TIME:
        return found.kind in (STR, TIME, DATE)
    if found.kind != NUM:
        return False
    if wanted in (NUMBER, NUMERIC):
        return True
    return of_width(checker, found, value, SMALL_INTS if wanted == SMALL_INT else INTEGERS)


def of_width(checker: Typing, found: Typed, value: exp.Expr, widths: tuple[object, ...]) -> bool:
    """Whether the number `value` (typed `found`) is of one of `widths` as Spark types it: its declared or written
    type, or the one sql/typewidths.py computes; True where that is not known (let through)."""
    width = found.data_type if isinstance(value, DECLARED) else checker.number(value)
    return width is None or width.this in widths


def concat_ws_part(found: Typed) -> bool:
    """Whether CONCAT_WS takes a value of this type after its separator: a string, or an ARRAY (of strings, or of
    what Spark casts to one), not a MAP or a STRUCT."""
    return found.kind == ARRAY or found.kind not in COMPLEX


def by_ordering(checker: Typing, node: exp.ArgMax | exp.ArgMin) -> Typed:
    """MAX_BY(value, ordering) and MIN_BY: the ordering is one Spark can order (RowOrdering.isOrderable: no MAP,
    nor an ARRAY or STRUCT that holds one; DSF-E408); the result is the value's type."""
    value, ordering = checker.infer(node.this), checker.infer(node.expression)
    if ordering.kind == MAP or (ordering.data_type is not None and
                               any(d.this == T.MAP for d in ordering.data_type.find_all(exp.DataType))):
        name = "MAX_BY" if isinstance(node, exp.ArgMax) else "MIN_BY"
        raise Problem("DSF-E408", node, f"{text(node)}: {name} ordered by {ordering.show()} (maps are not ordered)",
                      f"order by a value Spark compares, e.g. one of the map's values: {name}(x, m['key'])")
    return value if value.kind != UNKNOWN else typed(node.type)
