"""`FROM s CROSS JOIN UNNEST(s.arr) AS t(x)`: one row per element of a stream's ARRAY column (Flink/DeltaStream).

An empty or NULL array gives no row (as Flink's CROSS JOIN UNNEST; Spark's `explode`). While the SELECT is
resolved (sql/select.py) the UNNEST join is taken out and each reference to its column (`t.x`, or `x`) stands
as `arr[1]`, which types it as the array's element; once resolved, the references and the join are put back,
and Spark runs it as `LATERAL VIEW EXPLODE(arr) t AS x` (sqlglot's Spark generator).

Refused with DSF-E175: UNNEST of more than one array, WITH ORDINALITY, an alias without one column name, LEFT
JOIN UNNEST, more than one UNNEST, UNNEST together with another join, over a changelog, or of a non-array.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from dsflow.core.model import Relation
from dsflow.errors import Diagnostic

Report = Callable[[Diagnostic], None]
MARK = "dsflow_unnest"
HINT = "write FROM s CROSS JOIN UNNEST(s.array_column) AS t(x), and read the element as t.x"


@dataclass
class Unnested:
    """The UNNEST join taken out of a SELECT while it is resolved, to be put back by `restore_unnest`."""

    join: exp.Join
    alias: str
    column: str


def extract_unnest(select: exp.Expr, relations: dict[str, Relation], qualify_name, where,
                   report: Report) -> Unnested | None | Literal[False]:
    """Take the UNNEST join out of `select`, its column references replaced by `array[1]`; None if there is
    none, False on error (reported)."""
    joins = select.args.get("joins") or [] if isinstance(select, exp.Select) else []
    unnests = [j for j in joins if isinstance(j.this, exp.Unnest)]
    if not unnests:
        return None
    join = unnests[0]
    problem = _problem(unnests, joins, select, relations, qualify_name)
    if problem is not None:
        report(Diagnostic("DSF-E175", f"{problem}", where(join), hint=HINT))
        return False
    unnest: exp.Unnest = join.this
    alias, column = unnest.alias, unnest.args["alias"].columns[0].name
    array = unnest.expressions[0]
    relation = relations[qualify_name([p.name for p in select.args["from_"].this.parts])]
    if relation.column(column) is not None and any(
            not c.table and c.name.lower() == column.lower() for c in select.find_all(exp.Column)):
        report(Diagnostic("DSF-E041", f"column '{column}' is ambiguous: both '{relation.fqn}' and the UNNEST have it",
                          where(join), hint=f"qualify it: {alias}.{column}"))
        return False
    stray = [c for c in select.find_all(exp.Column) if c.table.lower() == alias.lower() and
             c.name.lower() != column.lower()]
    if stray:
        report(Diagnostic("DSF-E041", f"unknown column '{stray[0].name}' of the UNNEST '{alias}'", where(stray[0]),
                          hint=f"its one column is {alias}.{column}"))
        return False
    join.pop()
    for reference in [c for c in select.find_all(exp.Column) if _is_element(c, alias, column)]:
        element = exp.Bracket(this=array.copy(), expressions=[exp.Literal.number(1)])
        element.meta[MARK] = True
        bare = isinstance(reference.parent, exp.Select) and reference.arg_key == "expressions"
        reference.replace(exp.alias_(element, reference.name) if bare else element)
    return Unnested(join, alias, column)


def _problem(unnests: list[exp.Join], joins: list[exp.Join], select: exp.Expr, relations, qualify_name) -> str | None:
    join = unnests[0]
    unnest: exp.Unnest = join.this
    names = unnest.args["alias"].columns if unnest.args.get("alias") else []
    if len(unnests) > 1 or len(joins) > 1:
        return "UNNEST together with another join or a second UNNEST is not supported yet"
    if (join.side or "") or join.args.get("on") is not None:
        return "only CROSS JOIN UNNEST is supported (a LEFT JOIN keeping rows of empty arrays is not)"
    if len(unnest.expressions) != 1 or unnest.args.get("offset"):
        return "UNNEST takes one array, without WITH ORDINALITY"
    if len(names) != 1:
        return "UNNEST needs an alias naming its column, e.g. AS t(x)"
    table = select.args["from_"].this if select.args.get("from_") else None
    if not isinstance(table, exp.Table) or not table.name:
        return "UNNEST reads an ARRAY column of the stream in FROM"
    relation = relations.get(qualify_name([p.name for p in table.parts]))
    if relation is not None and relation.kind != "stream":
        return f"UNNEST over the {relation.kind} '{relation.fqn}' is not supported: unnest a stream"
    array = unnest.expressions[0]
    column = relation.column(array.name) if relation is not None and isinstance(array, exp.Column) else None
    if column is None or not column.type.upper().startswith("ARRAY"):
        return f"UNNEST({array.sql()}) needs an ARRAY column of '{table.name}'"
    return None


def _is_element(column: exp.Column, alias: str, name: str) -> bool:
    if column.name.lower() != name.lower():
        return False
    return column.table.lower() == alias.lower() if column.table else True


def restore_unnest(qualified: exp.Select, unnested: Unnested | None) -> exp.Select:
    """Put the UNNEST join back into the resolved SELECT, its element references as `alias.column`."""
    if not unnested:
        return qualified
    for element in [b for b in qualified.find_all(exp.Bracket) if b.meta.get(MARK)]:
        element.replace(exp.column(unnested.column, table=unnested.alias, quoted=True))
    unnest: exp.Unnest = unnested.join.this
    source = qualified.args["from_"].this.alias_or_name
    array = unnest.expressions[0]
    array.replace(exp.column(array.name, table=source, quoted=True))
    qualified.append("joins", unnested.join)
    return qualified
