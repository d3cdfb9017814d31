"""Which result types an INSERT writes into a declared column: Spark's ANSI store assignment
(`Cast.canANSIStoreAssign`, what its TableOutputResolver applies under `spark.sql.storeAssignmentPolicy=ANSI`, the
default). A number into a number, any scalar into a string, a DATE into a TIMESTAMP and back, NULL into anything,
ARRAYs, MAPs and STRUCTs (by position) element by element; nothing else (a VARCHAR into an INT, a TIMESTAMP or a
BOOLEAN into a number, an ARRAY into a VARCHAR). A type sqlglot cannot tell is let through."""

from __future__ import annotations

from sqlglot import exp

from dsflow.errors import Diagnostic, Location
from dsflow.sql.typekinds import (
    ARRAY, BINARY, BOOL, COMPLEX, DATE, MAP, NULL, NUM, STR, STRUCT, TIME, UNKNOWN, kind_of,
)

SCALARS = frozenset({NUM, STR, BOOL, TIME, DATE, BINARY, "interval"})


def storable(got: exp.DataType, wanted: exp.DataType) -> bool:
    """Whether Spark's ANSI store assignment writes a value of `got` into a column of `wanted`."""
    g, w = kind_of(got), kind_of(wanted)
    if UNKNOWN in (g, w) or g == NULL or got == wanted:
        return True
    if g == w and g in SCALARS:
        return g != BINARY or got.this == wanted.this
    if w == STR:
        return g in SCALARS
    if {g, w} == {DATE, TIME}:
        return True
    if g != w or g not in COMPLEX:
        return False
    inner_got, inner_wanted = _inner(got), _inner(wanted)
    return len(inner_got) == len(inner_wanted) and all(storable(a, b) for a, b in zip(inner_got, inner_wanted,
                                                                                        strict=True))


def cast_on_store(got: str, wanted: str) -> bool:
    """Whether an INSERT's column of `got` is written cast to the declared `wanted`, as Spark's store assignment
    writes it: a number into another number type, a non-string scalar into a VARCHAR (`7` is written "7"), a DATE
    into a TIMESTAMP and back, an untyped NULL into anything. Other storable pairs are written as they are."""
    g, w = _built(got), _built(wanted)
    kinds = (kind_of(g), kind_of(w))
    if UNKNOWN in kinds or kinds[1] == NULL or g == w:
        return False
    return kinds[0] == NULL or kinds == (NUM, NUM) or (kinds[1] == STR and kinds[0] in SCALARS - {STR}) \
        or set(kinds) == {DATE, TIME}


def _inner(data_type: exp.DataType) -> list[exp.DataType]:
    """An ARRAY's element, a MAP's key and value, a STRUCT's field types in order."""
    kind = kind_of(data_type)
    if kind in (ARRAY, MAP):
        return [e for e in data_type.expressions if isinstance(e, exp.DataType)]
    if kind == STRUCT:
        fields = [e.args.get("kind") if isinstance(e, exp.ColumnDef) else e for e in data_type.expressions]
        return [f if isinstance(f, exp.DataType) else exp.DataType.build("UNKNOWN") for f in fields]
    return []


def check_stored(target: str, pairs: list[tuple[str, str, str, Location]]) -> list[Diagnostic]:
    """DSF-E411 for each (column, its type, the target column's declared type, where) Spark would not write."""
    problems = []
    for name, got, wanted, where in pairs:
        if not storable(_built(got), _built(wanted)):
            problems.append(Diagnostic(
                "DSF-E411", f"INSERT INTO '{target}': column '{name}' is {got}, which Spark does not store into "
                f"the declared {wanted} (ANSI store assignment)", where,
                hint=f"CAST it: CAST(... AS {wanted}) AS {name}, or write it into a column of its type"))
    return problems


def _built(sql_type: str) -> exp.DataType:
    try:
        return exp.DataType.build(sql_type)
    except Exception:  # noqa: BLE001 - a type sqlglot cannot parse is let through (UNKNOWN)
        return exp.DataType.build("UNKNOWN")
