"""Windowed aggregations read as subqueries (sql/nested.py) in Spark: one query, one checkpoint.

Each subquery is translated as a query of its own sources by the same code (`translate`), over their views at
their places in the query's sources, and selects its window struct as __window (grouped, so it keeps its
event-time watermark). The query's SELECT reads each in place of its stand-in table; the operator after them keys
on that struct, so Spark emits, and evicts, per window in append mode: a join of two adds `a.__window =
b.__window` to ON (ON equates their window_start and window_end, over windows of one size: the same thing), a GROUP
BY adds the subquery's __window (a GROUP BY in a subquery selects it in turn, for the join around it). A stream
joined with one reads its view in place (`_bound`). A result row is a stream's record without a source key (NULL),
or a changelog's row keyed by its GROUP BY columns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from sqlglot import exp

from dsflow.core.model import Nested, Project, Query
from dsflow.sql.dialect import milliseconds
from dsflow.sql.functions import to_spark
from dsflow.sql.plan import QueryPlan

WINDOW = "__window"
WINDOW_TIME = "__wt"
KEY = "__key"
EVENT_TIME = "__ts"


Translate = Callable[[QueryPlan, Project | None], exp.Query]


def nested_select(plan: QueryPlan, project: Project | None, translate: Translate, view: Callable[[int, Query], str],
                  declared: dict | None = None) -> exp.Select:
    """The Spark SQL of a query over windowed subqueries (its plan's `nested`); `declared`: the signatures of the
    user-defined functions it calls (sql/functions.py to_spark)."""
    select, _ = _outer_select(plan, project, translate, view, declared or {})
    if not plan.query.key_columns:
        select.select(exp.cast(exp.null(), "STRING").as_(KEY), copy=False)
    return select


def _outer_select(plan: QueryPlan, project: Project | None, translate: Translate, view: Callable[[int, Query], str],
                  declared: dict) -> tuple[exp.Select, list[str]]:
    """The query's SELECT with each subquery's stand-in replaced by its Spark SQL, and a relation by its view; the
    operator after the subqueries keyed on their __window, or, for a stream joined with one, bounded in event time
    (`_bound`); and the subqueries' aliases."""
    query = plan.query
    select = to_spark(plan.select(), declared)
    assert isinstance(select, exp.Select)  # sql/nested.py resolves a SELECT
    windowed, offset, stream = [], 0, None
    for table in list(select.find_all(exp.Table)):
        name, alias = ".".join(p.name for p in table.parts).lower(), table.alias_or_name
        found = plan.nested_plan(name)
        if found is None:  # a stream joined with a windowed subquery (sql/window_bound.py)
            table.replace(exp.Table(this=exp.to_identifier(view(offset, query)),
                                    alias=exp.TableAlias(this=exp.to_identifier(alias))))
            stream, offset = alias, offset + 1
            continue
        nested, inner_plan = found
        inner = _inner_select(query, project, nested, inner_plan, offset, translate, view, declared)
        windowed.append((alias, nested))
        table.replace(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias))))
        offset += len(nested.sources)
    joins = select.args.get("joins") or []
    if joins and len(windowed) == 2:
        on = joins[0].args["on"]
        joins[0].set("on", exp.and_(on, exp.EQ(this=exp.column(WINDOW, table=windowed[0][0]),
                                               expression=exp.column(WINDOW, table=windowed[1][0]))))
    elif joins:
        assert stream is not None  # sql/nested.py: two subqueries, or a stream and one
        _bound(select, stream, *windowed[0])
    elif select.args.get("group") is not None:
        select.args["group"].append("expressions", exp.column(WINDOW, table=windowed[0][0]))
    for count in list(select.find_all(exp.Count)):
        if isinstance(count.this, exp.Distinct):
            count.replace(exp.func("SIZE", exp.func("COLLECT_SET", count.this.expressions[0])))
    return select, [alias for alias, _ in windowed]


def _bound(select: exp.Select, stream: str, alias: str, nested: Nested) -> None:
    """A stream joined with a windowed subquery: Spark's form of the event-time bound the query writes
    (sql/window_bound.py), added to ON beside it. Spark drops the join's state by a condition between event-time
    columns of both sides: the stream view's __ts and the subquery's `window_time(__window)` (its window's end
    minus a microsecond, which keeps the aggregation's watermark), selected around it as __wt."""
    subquery = next(s for s in select.find_all(exp.Subquery) if s.alias_or_name == alias)
    around = exp.select("*", exp.func("window_time", exp.column(WINDOW)).as_(WINDOW_TIME)).from_(
        exp.Subquery(this=subquery.this, alias=exp.TableAlias(this=exp.to_identifier("__agg"))))
    subquery.set("this", around)
    assert nested.stream_bound is not None  # sql/nested.py refuses a join without it (DSF-E295)

    def at(ms: int) -> exp.Expr:
        return exp.condition(f"{alias}.{WINDOW_TIME} + INTERVAL 1 MICROSECOND + INTERVAL {ms} MILLISECONDS",
                             dialect="spark")

    lower, upper = nested.stream_bound
    join = select.args["joins"][0]
    join.set("on", exp.and_(join.args["on"], exp.Between(this=exp.column(EVENT_TIME, table=stream), low=at(lower),
                                                         high=at(upper))))


def _inner_select(query: Query, project: Project | None, nested: Nested, plan: QueryPlan, offset: int,
                  translate: Translate, view: Callable[[int, Query], str], declared: dict) -> exp.Expr:
    """A subquery's Spark SQL over the views of its sources (at `offset` in the query's), with its __window: a
    windowed aggregation's, or that of the windowed subquery it groups (a subquery in a subquery). `plan`: the
    subquery's (sql/plan.py `subquery`)."""
    if nested.nested:
        select, aliases = _outer_select(plan, project, translate, view, declared)
        window = exp.column(WINDOW, table=aliases[0])
    else:
        select = cast(exp.Select, translate(plan, project))  # an aggregation
        window = exp.column(WINDOW, table=nested.window.source)
    renamed = {view(i, query): view(offset + i, query) for i in range(len(nested.sources))}
    for table in select.find_all(exp.Table):
        table.set("this", exp.to_identifier(renamed.get(table.name, table.name)))
    return select.select(window.as_(WINDOW), copy=False)


def windowed_join(select: exp.Select, query: Query) -> None:
    """A window over an interval join (sql/windowed_join.py) is computed over the joined rows, from the windowed
    source's event time: `window(v.__ts, size, slide)` in place of the view's __window (which would be a second
    event-time column of the join's input, which Spark refuses: MULTIPLE_EVENT_TIME_COLUMNS)."""
    window = query.window
    assert window is not None and window.kind != "session"  # sql/windowed_join.py
    size = f"{milliseconds(window.size)} milliseconds"  # as translate.spark_duration writes it
    slide = f"{milliseconds(window.advance)} milliseconds" if window.advance else size
    call = exp.Anonymous(this="window", expressions=[exp.column(EVENT_TIME, table=window.source),
                                                     exp.Literal.string(size), exp.Literal.string(slide)])
    for column in list(select.find_all(exp.Column)):
        if column.table == WINDOW and column.args.get("db") and column.args["db"].name == window.source:
            column.replace(exp.Dot(this=call.copy(), expression=exp.to_identifier(column.name)))
        elif column.table == window.source and column.name == WINDOW:
            column.replace(call.copy())
