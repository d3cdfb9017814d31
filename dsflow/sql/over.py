"""Bounded OVER aggregates over a stream (issue 46), as Flink's OVER aggregation: one output row per input row.

    SELECT cols, AGG(x) [FILTER (WHERE c)] OVER (PARTITION BY k, ... ORDER BY <event time> [ASC]
                                                 ROWS BETWEEN N PRECEDING AND CURRENT ROW) [AS a], ...
    FROM stream [WHERE ...]

or `RANGE BETWEEN INTERVAL 'n' UNIT PRECEDING AND CURRENT ROW`; AGG is SUM, COUNT (also COUNT(*) and COUNT(DISTINCT
x)), AVG, MIN or MAX. Every OVER of a query has the same window (as Flink asks); each is a whole projection. The
result is a stream: each row is written once the watermark passes its event time, with the aggregates over its
frame (adapters/spark/over.py, the rows of a key in event-time order, ties by the record's place in the source:
partition, then offset; RANGE includes the current row's peers, the rows of the same time, as SQL and Flink do).

`extract_over` checks the shape and puts a placeholder in each window's place, an expression of the aggregate's
argument (and FILTER), so sql/select.py resolves and types its columns as any projection's; `restore_over` puts the
windows back into the resolved SELECT, each typed as Spark types its aggregate.

    DSF-E188  a variant: a frame that is not bounded (UNBOUNDED PRECEDING, no frame: the default frame is unbounded)
              or does not end at CURRENT ROW, ORDER BY other than the source's event time ascending, a PARTITION
              BY expression, another aggregate, OVER inside an expression, windows that differ, GROUP BY beside it,
              a join, or a subquery that does not update (at the construct)
    DSF-E189  an OVER over an updating input: a changelog, or a subquery that aggregates or ranks (ROW_NUMBER),
              whose rows are later updated or deleted (Flink refuses it too: its OVER operator does not consume
              retractions; Nexmark q6)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from dsflow.core.model import OverWindow, Relation
from dsflow.errors import Diagnostic
from dsflow.sql.dialect import milliseconds, normalized_duration

Report = Callable[[Diagnostic], None]
FUNCTIONS = (exp.Sum, exp.Count, exp.Avg, exp.Min, exp.Max)
CLAUSES = {"group": "GROUP BY", "having": "HAVING", "distinct": "DISTINCT", "order": "ORDER BY", "limit": "LIMIT",
           "qualify": "QUALIFY"}
SHAPE = ("SELECT cols, SUM(x) OVER (PARTITION BY k ORDER BY <event time> ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) "
         "AS s FROM stream (or RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW)")
UPDATING_HINT = ("apply the OVER to a stream: write the updating input into a stream first (each row once, final: "
                 "e.g. a windowed aggregation, CREATE STREAM s AS SELECT ... FROM TUMBLE(...) GROUP BY window_start, "
                 "window_end, ..., or the stream it is made from), then SELECT ..., AVG(x) OVER (PARTITION BY k "
                 "ORDER BY <event time> ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) FROM s; or aggregate the "
                 "changelog with retractions: SELECT k, AVG(x) FROM changelog GROUP BY k")


@dataclass(frozen=True)
class Extracted:
    """A recognised OVER query: its model, and its windows by output name (to restore over `alias`)."""

    over: OverWindow
    windows: dict[str, exp.Window]
    alias: str


def _over_aggregates(select: exp.Expr) -> list[exp.Window]:
    """The windows of the SELECT's own projections whose function is an aggregate (ROW_NUMBER and the like are
    sql/topn.py's or DSF-E045)."""
    if not isinstance(select, exp.Select):
        return []
    found = []
    for projection in select.selects:
        for window in projection.find_all(exp.Window):
            function = window.this.this if isinstance(window.this, exp.Filter) else window.this
            if isinstance(function, exp.AggFunc):
                found.append(window)
    return found


def extract_over(select: exp.Expr, relations: dict[str, Relation], qualify_name, where,
                 report: Report) -> Extracted | None | Literal[False]:
    """Replace each OVER aggregate of `select` in place by its placeholder; the OVER query found, None for another
    SELECT, False when it was refused (reported)."""
    windows = _over_aggregates(select)
    if not windows:
        return None
    assert isinstance(select, exp.Select)  # _over_aggregates
    source = select.args["from_"].this if select.args.get("from_") is not None else None
    updating = _updating_input(source, relations, qualify_name)
    if updating is not None:
        report(Diagnostic("DSF-E189", f"{windows[0].sql(dialect='spark')}: an OVER window over {updating} is not "
                          "supported: its rows are later updated or deleted, and an OVER aggregation writes each "
                          "row once (Flink refuses it too)", where(windows[0]), hint=UPDATING_HINT))
        return False
    relation = relations.get(qualify_name([p.name for p in source.parts])) if isinstance(source, exp.Table) else None
    problem = _query_problem(select, source, windows) or _window_problem(windows, relation)
    if problem is not None:
        node, message, hint = problem
        report(Diagnostic("DSF-E188", message, where(node), hint=hint or f"the form supported: {SHAPE}"))
        return False
    assert isinstance(source, exp.Table)  # _query_problem
    first = windows[0]
    spec = first.args["spec"]
    duration = normalized_duration(_interval_text(spec.args["start"])) if spec.args["kind"] == "RANGE" else None
    preceding = milliseconds(duration) if duration is not None else int(spec.args["start"].name)  # _frame_problem
    over = OverWindow(partition=tuple(c.name for c in first.args.get("partition_by") or []),
                      order=first.args["order"].expressions[0].this.name, frame=spec.args["kind"].lower(),
                      preceding=preceding)
    named: dict[str, exp.Window] = {}
    for index, projection in enumerate(select.selects):
        window = projection.unalias()
        if isinstance(window, exp.Window):
            name = projection.alias if isinstance(projection, exp.Alias) else f"_col_{index}"
            named[name] = window.copy()
            projection.replace(exp.alias_(_placeholder(window), name, quoted=True))
    return Extracted(over, named, source.alias_or_name)


def _updating_input(source: exp.Expr | None, relations: dict[str, Relation], qualify_name) -> str | None:
    """What makes the OVER's input updating (a changelog, a subquery that aggregates or ranks), or None."""
    if isinstance(source, exp.Table):
        relation = relations.get(qualify_name([p.name for p in source.parts]))
        return f"the changelog '{source.name}'" if relation is not None and relation.kind == "changelog" else None
    if isinstance(source, exp.Subquery):
        ranked = any(isinstance(w.this, exp.RowNumber) for w in source.find_all(exp.Window))
        if ranked:
            return "a ROW_NUMBER top-N subquery (a changelog: its rank rows are replaced as rows arrive)"
        if source.find(exp.Group) is not None or any(True for _ in source.find_all(exp.AggFunc)):
            return "an aggregating subquery (a changelog: its groups are updated as rows arrive)"
    return None


def _query_problem(select: exp.Select, source: exp.Expr | None,
                   windows: list[exp.Window]) -> tuple[exp.Expr, str, str | None] | None:
    if not isinstance(source, exp.Table) or select.args.get("joins"):
        return windows[0], "an OVER window reads one stream (FROM stream), not a join or a subquery", \
            "write the join or subquery into a stream first (CREATE STREAM s AS SELECT ...), then apply the OVER to it"
    for key, what in CLAUSES.items():
        if select.args.get(key):
            node = select.args[key]
            return (node[0] if isinstance(node, list) else node), \
                f"a query with an OVER window takes no {what}: it writes one row per input row", None
    inside = {id(n) for w in windows for n in w.walk()}
    loose = next((a for a in select.find_all(exp.AggFunc) if id(a) not in inside), None)
    if loose is not None:
        return loose, f"{loose.sql(dialect='spark')} without OVER beside an OVER window", \
            "give it the same OVER (...), or aggregate in another query with GROUP BY"
    for projection in select.selects:
        window = next(projection.find_all(exp.Window), None)
        if window is not None and projection.unalias() is not window:
            return window, f"an OVER window inside an expression ({projection.sql(dialect='spark')})", \
                "select the OVER aggregate as a column of its own: SUM(x) OVER (...) AS s"
    return None


def _window_problem(windows: list[exp.Window], relation: Relation | None) -> tuple[exp.Expr, str, str | None] | None:
    for window in windows:
        problem = _function_problem(window) or _frame_problem(window) or _order_problem(window, relation)
        if problem is not None:
            return problem
        loose = next((p for p in window.args.get("partition_by") or [] if not isinstance(p, exp.Column)), None)
        if loose is not None:
            return loose, f"PARTITION BY {loose.sql(dialect='spark')}: partition by columns of the stream", None
    first = _window_text(windows[0])
    other = next((w for w in windows if _window_text(w) != first), None)
    if other is not None:
        return other, "the OVER windows of a query differ: every OVER aggregate of a query has one window " \
            f"(here OVER ({first}))", "give every aggregate the same OVER (...), or write them in two queries"
    return None


def _function_problem(window: exp.Window) -> tuple[exp.Expr, str, str | None] | None:
    function = window.this.this if isinstance(window.this, exp.Filter) else window.this
    distinct = isinstance(function.this, exp.Distinct)
    if not isinstance(function, FUNCTIONS) or (distinct and (not isinstance(function, exp.Count) or
                                                             len(function.this.expressions) != 1)):
        return function, f"{function.sql(dialect='spark')} OVER (...) is not supported", \
            "aggregates over an OVER window: SUM, COUNT, COUNT(*), COUNT(DISTINCT x), AVG, MIN, MAX (FILTER " \
            "(WHERE ...) allowed)"
    return None


def _frame_problem(window: exp.Window) -> tuple[exp.Expr, str, str | None] | None:
    spec = window.args.get("spec")
    frame_hint = "bound the frame: ROWS BETWEEN N PRECEDING AND CURRENT ROW or RANGE BETWEEN INTERVAL 'n' UNIT " \
                 "PRECEDING AND CURRENT ROW"
    if spec is None:
        return window, "an OVER window needs a bounded frame (without one it is RANGE BETWEEN UNBOUNDED PRECEDING " \
                       "AND CURRENT ROW, whose state grows for ever)", frame_hint
    start, kind = spec.args.get("start"), spec.args.get("kind")
    if start == "UNBOUNDED" or spec.args.get("start_side") != "PRECEDING" or spec.args.get("end") != "CURRENT ROW" \
            or spec.args.get("exclude"):
        what = "UNBOUNDED PRECEDING keeps every row of a key for ever" if start == "UNBOUNDED" else \
            "a frame other than '... PRECEDING AND CURRENT ROW' waits for rows after the current one"
        return window, f"{spec.sql(dialect='spark')}: {what}", frame_hint
    if kind == "ROWS" and not (isinstance(start, exp.Literal) and start.is_int and int(start.name) >= 0):
        return window, f"ROWS BETWEEN {start.sql(dialect='spark')} PRECEDING: the rows before are a whole number", \
            frame_hint
    if kind == "RANGE" and (not isinstance(start, exp.Interval) or normalized_duration(_interval_text(start)) is None):
        return window, f"RANGE BETWEEN {start.sql(dialect='spark')} PRECEDING: a RANGE over the event time is an " \
                     "INTERVAL", frame_hint
    return None


def _order_problem(window: exp.Window, relation: Relation | None) -> tuple[exp.Expr, str, str | None] | None:
    order = window.args.get("order")
    event_time = relation.timestamp if relation is not None else None
    column = order.expressions[0].this if order is not None and len(order.expressions) == 1 else None
    hint = f"ORDER BY {event_time}" if event_time else \
        "declare the stream's event time ('timestamp' = 'column' in its WITH) and ORDER BY that column"
    if relation is None:  # an unknown relation: sql/select.py names it (DSF-E040)
        return None
    if not isinstance(column, exp.Column) or event_time is None or column.name.lower() != event_time.lower():
        return order if order is not None else window, "an OVER window is ordered by the stream's event time alone " \
            f"({f'its column {event_time}' if event_time else 'it declares none'}), ascending", hint
    assert order is not None  # a column found in it
    if order.expressions[0].args.get("desc"):
        return order, f"ORDER BY {column.name} DESC: an OVER window runs forward in event time", hint
    return None


def _interval_text(interval: exp.Expr) -> str:
    unit = interval.args.get("unit")
    return f"{interval.this.name} {unit.name if unit is not None else ''}".strip()


def _window_text(window: exp.Window) -> str:
    bare = window.copy()
    bare.set("this", exp.Star())
    return bare.sql(dialect="spark").split("OVER", 1)[1].strip().strip("()")


def over_parts(window: exp.Window) -> tuple[exp.Expr, exp.Expr | None, exp.Expr | None]:
    """(the aggregate, its argument (None for COUNT(*)), its FILTER condition) of an OVER window."""
    filtered = window.this if isinstance(window.this, exp.Filter) else None
    function = filtered.this if filtered is not None else window.this
    argument = function.this.expressions[0] if isinstance(function.this, exp.Distinct) else function.this
    return function, None if isinstance(argument, exp.Star) else argument, \
        filtered.expression.this if filtered is not None else None


def _placeholder(window: exp.Window) -> exp.Expr:
    """An expression of the aggregate's argument and FILTER, typed as the argument (COUNT: a BIGINT):
    `x`, `CASE WHEN c THEN x END`; COUNT: `CAST(NULL AS BIGINT)`, `CASE WHEN [(c) AND] x IS NULL THEN ... END`."""
    function, argument, condition = over_parts(window)
    if isinstance(function, exp.Count):
        bigint = exp.cast(exp.Null(), "BIGINT")
        tests = [t for t in (exp.paren(condition.copy()) if condition is not None else None,
                             exp.Is(this=argument.copy(), expression=exp.Null()) if argument is not None else None)
                 if t is not None]
        if not tests:
            return bigint
        test = tests[0] if len(tests) == 1 else exp.And(this=tests[0], expression=tests[1])
        return exp.Case(ifs=[exp.If(this=test, true=bigint)])
    assert argument is not None  # SUM, AVG, MIN, MAX take one (sqlglot parses them so)
    if condition is None:
        return argument.copy()
    return exp.Case(ifs=[exp.If(this=condition.copy(), true=argument.copy())])


def _unplaced(placeholder: exp.Expr, window: exp.Window) -> tuple[exp.Expr | None, exp.Expr | None]:
    """(the qualified argument, the qualified FILTER condition) of the placeholder of `window` (_placeholder)."""
    function, argument, condition = over_parts(window)
    if not isinstance(placeholder, exp.Case):
        return (placeholder.copy() if argument is not None else None), None
    test, value = placeholder.args["ifs"][0].this, placeholder.args["ifs"][0].args["true"]
    if not isinstance(function, exp.Count):
        return value.copy(), test.copy()
    if argument is not None and condition is not None:
        return test.expression.this.copy(), test.this.unnest().copy()
    if argument is not None:
        return test.this.copy(), None
    return None, test.unnest().copy()


def restore_over(qualified: exp.Select, extracted: Extracted | None, where, report: Report) -> bool:
    """Put each window back in place of its placeholder (qualified as the rest), typed as Spark types the aggregate;
    False when an aggregate's argument has a type it does not take (DSF-E188, reported)."""
    if extracted is None:
        return True
    from dsflow.sql.typekinds import kind_of

    for projection in qualified.selects:
        window = extracted.windows.get(projection.alias_or_name)
        if window is None or not isinstance(projection, exp.Alias):
            continue
        placeholder = projection.this
        argument, condition = _unplaced(placeholder, window)
        window = window.copy()
        function, written, written_condition = over_parts(window)
        if argument is not None and written is not None:
            written.replace(argument)
        if condition is not None and written_condition is not None:
            written_condition.replace(condition)
        for column in [*(window.args.get("partition_by") or []), *window.args["order"].find_all(exp.Column)]:
            if isinstance(column, exp.Column) and not column.table:
                column.set("table", exp.to_identifier(extracted.alias))
        type_ = _aggregate_type(function, placeholder.type)
        if isinstance(function, (exp.Sum, exp.Avg)) and kind_of(placeholder.type) != "number":
            name = type(function).__name__.upper()
            report(Diagnostic("DSF-E188", f"{function.sql(dialect='spark')} OVER (...): {name} takes a number, not "
                              f"a {placeholder.type.sql(dialect='spark')}", where(projection),
                              hint="aggregate a number, or use MIN/MAX/COUNT"))
            return False
        projection.set("this", window)
        projection.type = type_
    return True


def _aggregate_type(function: exp.Expr, argument: exp.DataType | None) -> exp.DataType:
    """Spark's type of the aggregate of an argument of type `argument` (sql/typewidths.py's rules)."""
    from dsflow.sql.typewidths import INTEGRAL, build, decimal, decimal_of

    if isinstance(function, exp.Count) or argument is None:
        return build("BIGINT")
    digits = decimal_of(argument) if argument.this == exp.DataType.Type.DECIMAL else None
    if isinstance(function, exp.Sum):
        return decimal(digits[0] + 10, digits[1]) if digits else \
            build("BIGINT") if argument.this in INTEGRAL else build("DOUBLE")
    if isinstance(function, exp.Avg):
        return decimal(digits[0] + 4, digits[1] + 4) if digits else build("DOUBLE")
    return argument.copy()
