"""The GROUP BY forms beyond plain columns (sql/select.py asks these):

    GROUP BY UPPER(userid), CAST(amount / 10 AS INT)   an expression, selected (its output column keys the result)
    SELECT COUNT(*) AS n, SUM(x) AS s FROM rel         a global aggregate: one row, keyed by nothing (GLOBAL_KEY)
    SESSION(rel, GAP 5 MINUTES) ... GROUP BY window_start, window_end, userid   a session window, with a key

A global aggregate's changelog has no primary key column: its one row is the record of key GLOBAL_KEY, the
JSON object of its (zero) key columns, as a key of several columns is the JSON object of them; a view of it holds
one row, replaced by each update. Over a changelog it is retracted as a GROUP BY is (adapters/spark/retract.py):
when the changelog becomes empty its row is SQL's answer over an empty table (COUNT 0, the other aggregates NULL).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.core.model import Window
from dsflow.errors import Diagnostic
from dsflow.sql.fields import base_column, group_key_sql, is_access, references

Report = Callable[[Diagnostic], None]
GLOBAL_KEY = "{}"
"""The record key of a global aggregate's one row (no key columns: the empty JSON object)."""
WINDOW_COLUMNS = ("window_start", "window_end")


def check_group_item(item: exp.Expr, where, report: Report) -> bool:
    """A GROUP BY item is a column, a field (col->field), or an expression of columns without an aggregate
    (DSF-E160 for a constant, which Spark would read as a position, and for an aggregate)."""
    if isinstance(item, exp.Column) or is_access(item):
        return True
    if item.find(exp.AggFunc) is not None:
        report(Diagnostic("DSF-E160", f"GROUP BY {item.sql()} holds an aggregate", where(item),
                          hint="group by columns or expressions of columns; aggregates go in the SELECT list"))
        return False
    if not references(item):
        report(Diagnostic("DSF-E160", f"GROUP BY {item.sql()} is a constant: it groups nothing (and a number would "
                          "be read as a position in the SELECT list)", where(item),
                          hint="group by columns or expressions of columns, e.g. GROUP BY UPPER(userid); for one "
                               "row over everything, leave GROUP BY out (a global aggregate)"))
        return False
    return True


def item_text(item: exp.Expr) -> str:
    """How an error names a GROUP BY item: a column by its name, an expression by its SQL."""
    return item.name if isinstance(item, exp.Column) else item.sql()


def loose_columns(projection: exp.Expr, grouped_sql: set[str], names: set[tuple[str, str]]) -> list[exp.Expr]:
    """The column references of `projection` that are neither inside an aggregate nor covered by the GROUP BY: a
    grouped column, or inside a sub-expression equal to a GROUP BY expression (UPPER(userid) under
    GROUP BY UPPER(userid))."""
    def covered(node: exp.Expr | None) -> bool:
        while node is not None and node is not projection.parent:
            if not isinstance(node, exp.Alias) and group_key_sql(node) in grouped_sql:
                return True
            node = node.parent
        return False

    # a reference is a column or a chain that starts from one: base_column gives a column
    return [c for c in references(projection) if not c.find_ancestor(exp.AggFunc) and not covered(c)
            and (base_column(c).table, base_column(c).name) not in names]  # type: ignore[union-attr]


def global_aggregate(qualified: exp.Select, where, report: Report) -> tuple[bool, tuple[str, ...]] | None:
    """An aggregate without GROUP BY: every column must be inside an aggregate (DSF-E046); (True, no keys)."""
    for projection in qualified.selects:
        loose = loose_columns(projection, set(), set())
        if loose:
            report(Diagnostic("DSF-E046", f"column '{loose[0].name}' must be inside an aggregate: without GROUP BY "
                              "the query has one row over all records", where(loose[0]),
                              hint=f"aggregate it, e.g. MAX({loose[0].name}), or GROUP BY {loose[0].name}"))
            return None
    return True, ()


def check_session_keys(window: Window | None, grouped: list[exp.Expr], group: exp.Group, where,
                       report: Report) -> bool:
    """A session window groups by at least one key besides window_start, window_end (DSF-E161): Spark keeps a
    session per key; one global session is not supported in a streaming query."""
    if window is None or window.kind != "session":
        return True
    keys = [g for g in grouped if not (isinstance(g, exp.Column) and g.name.lower() in WINDOW_COLUMNS)]
    if keys:
        return True
    report(Diagnostic("DSF-E161", "a SESSION window needs a key to group by besides window_start, window_end",
                      where(group), hint="sessions are per key, e.g. GROUP BY window_start, window_end, userid"))
    return False


def global_aggregate_into_table(fqn: str, location) -> Diagnostic:
    """DSF-E163: an aggregate without GROUP BY into a table: its one row has no key to merge its updates on."""
    return Diagnostic("DSF-E163", f"'{fqn}' aggregates without GROUP BY into a table: its one row is updated, and a "
                      "table without key columns would append every update", location,
                      hint="aggregate into a CHANGELOG or a MATERIALIZED VIEW (one row), or GROUP BY a column")



def check_by_calls(select: exp.Expr, where, report: Report) -> bool:
    """MAX_BY and MIN_BY take two arguments, the value and its ordering (DSF-E143 for each call that does not);
    Spark's third, a count that makes the result an ARRAY, is not taken: the result is the value's type."""
    ok = True
    for call in select.find_all(exp.ArgMax, exp.ArgMin):
        given = sum(call.args.get(k) is not None for k in ("this", "expression", "count"))
        if given == 2 and call.args.get("expression") is not None:
            continue
        name, most = ("MAX_BY", "highest") if isinstance(call, exp.ArgMax) else ("MIN_BY", "lowest")
        report(Diagnostic("DSF-E143", f"function {name} takes 2 arguments (the value, its ordering), got {given}",
                          where(call), hint=f"e.g. {name}(bidder, price): the bidder of the {most} price"))
        ok = False
    return ok


EXACT_ORDERINGS = ("number", "string", "timestamp", "date", "boolean", "null", "unknown")
"""The kinds (sql/typekinds.py) of a MAX_BY/MIN_BY ordering a retracting aggregation compares as Spark does: its
stage 2 keeps the (ordering, value) pairs as JSON and compares them in Python (adapters/spark/retract_state.py)."""
DOUBLE_DIGITS = 15
"""A DECIMAL ordering of at most this many digits keeps its order exactly as a double (its JSON number in Python)."""


def check_retracted_by(qualified: exp.Select, where, report: Report) -> bool:
    """MAX_BY/MIN_BY over a changelog (retracted, adapters/spark/retract.py) ordered by a type whose order stage 2
    keeps exactly (DSF-E165 otherwise: an ARRAY, a STRUCT, a BINARY, an INTERVAL, a DECIMAL of more than 15 digits)."""
    from dsflow.sql.typekinds import kind_of

    ok = True
    for call in qualified.find_all(exp.ArgMax, exp.ArgMin):
        ordering = call.expression.type
        digits = ordering.expressions[0].name if ordering is not None and ordering.this == exp.DType.DECIMAL \
            and ordering.expressions else None
        if kind_of(ordering) in EXACT_ORDERINGS and not (digits and digits.isdigit() and int(digits) > DOUBLE_DIGITS):
            continue
        name = "MAX_BY" if isinstance(call, exp.ArgMax) else "MIN_BY"
        report(Diagnostic("DSF-E165", f"{name} over a changelog ordered by {ordering.sql(dialect='spark').upper()}: "
                          "its retractions compare orderings that are numbers (DECIMALs of up to 15 digits), "
                          "strings, TIMESTAMPs, DATEs or BOOLEANs", where(call),
                          hint="order by one of those, e.g. a field or an element of it, or CAST it; or aggregate "
                               "a stream, where Spark orders it itself"))
        ok = False
    return ok


def top_row_hint(node: exp.Expr) -> str | None:
    """The rewrite of ROW_NUMBER() OVER (PARTITION BY k ORDER BY t) (the top row per key, refused with DSF-E045) as
    an aggregation with MAX_BY/MIN_BY; None for another construct."""
    if not (isinstance(node, exp.Window) and isinstance(node.this, exp.RowNumber)):
        return None
    keys = ", ".join(p.sql() for p in node.args.get("partition_by") or []) or "k"
    order = node.args.get("order")
    first = order.expressions[0] if order is not None and order.expressions else None
    ordering = first.this.sql() if isinstance(first, exp.Ordered) else "t"
    by = "MAX_BY" if isinstance(first, exp.Ordered) and first.args.get("desc") else "MIN_BY"
    return (f"rank in a subquery over one stream and keep the top rows in the query over it: SELECT ... FROM "
            f"(SELECT *, {node.sql()} AS rn FROM stream) WHERE rn <= N, into a CHANGELOG keyed by ({keys}[, rn]) "
            f"(sql/topn.py); or, the top row per key (WHERE rn = 1), an aggregation: SELECT {keys}, "
            f"{by}(c, {ordering}) AS c, ... GROUP BY {keys}, one {by} per column; with an ordering without ties, "
            "each column comes from the same row (see MAX_BY in docs/project.md)")


FILTERABLE = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg, exp.ArgMax, exp.ArgMin)
"""The aggregates that take FILTER (WHERE ...): each skips NULL inputs, so a filter is a CASE around its input."""


def rewrite_filters(select: exp.Expr, where, report: Report) -> bool:
    """`AGG(x) FILTER (WHERE c)` becomes `AGG(CASE WHEN c THEN x END)` (the rows where c is not true give NULL,
    which the aggregate skips): COUNT(*) counts `CASE WHEN c THEN 1 END`, COUNT(DISTINCT x) its CASE, MAX_BY and
    MIN_BY filter their ordering. Every later stage (types, Spark, retractions) then sees plain aggregates.
    DSF-E166 for a FILTER on anything else, or whose condition holds an aggregate."""
    ok = True
    for node in list(select.find_all(exp.Filter)):
        call, condition = node.this, node.expression.this if isinstance(node.expression, exp.Where) else None
        if not isinstance(call, FILTERABLE) or condition is None or condition.find(exp.AggFunc) is not None:
            report(Diagnostic("DSF-E166", f"{node.sql(dialect='spark')}: FILTER (WHERE ...) applies to the aggregates "
                              "COUNT, SUM, MIN, MAX, AVG, MAX_BY and MIN_BY, with a condition on the row",
                              where(node), hint="e.g. COUNT(*) FILTER (WHERE price < 10000) AS cheap_bids"))
            ok = False
            continue
        node.replace(_filtered(call, condition))
    return ok


def _filtered(call: exp.Expr, condition: exp.Expr) -> exp.Expr:
    def when(value: exp.Expr) -> exp.Expr:
        return exp.Case(ifs=[exp.If(this=condition.copy(), true=value)])

    if isinstance(call, exp.ArgMax | exp.ArgMin):
        call.set("expression", when(call.expression))
    elif isinstance(call.this, exp.Distinct):
        call.this.set("expressions", [when(e) for e in call.this.expressions])
    else:
        call.set("this", when(exp.Literal.number(1) if isinstance(call.this, exp.Star) else call.this))
    return call
