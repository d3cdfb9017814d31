"""Subqueries in FROM and JOIN that aggregate a window, read by the query in the same Spark query:

    SELECT P.id, P.name, P.starttime                                           (Nexmark q8: a join of two)
    FROM (SELECT id, name, window_start AS starttime, window_end AS endtime
          FROM TUMBLE(person, SIZE 10 SECONDS) GROUP BY id, name, window_start, window_end) P
    JOIN (SELECT seller, window_start AS starttime, window_end AS endtime
          FROM TUMBLE(auction, SIZE 10 SECONDS) GROUP BY seller, window_start, window_end) A
    ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime

    SELECT starttime, endtime, MAX(num) AS maxn                                (an aggregate of one, per window)
    FROM (SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
          FROM TUMBLE(bid, SIZE 10 SECONDS) GROUP BY auction, window_start, window_end) C
    GROUP BY starttime, endtime

    SELECT B.auction, B.price FROM bid B JOIN (SELECT MAX(price) AS maxprice, window_end AS dateTime   (q7: a
      FROM TUMBLE(bid, SIZE 10 SECONDS) GROUP BY window_start, window_end) B1 ON B.price = B1.maxprice    stream
    WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime                          and one)

A subquery may itself be such a GROUP BY of one windowed subquery by its window (Nexmark q5's MaxBids: a subquery
in a subquery; its window is that one's), and need not select its GROUP BY columns (`_select_grouped`). A stream
joined with a windowed subquery must bound its event time by the subquery's window (sql/window_bound.py: DSF-E295).

A subquery that joins (and does not group), read as the one relation of the SELECT, is inlined as a CTE that joins
is (sql/ctes.py). Each other subquery (a CTE that aggregates a window becomes one where it is read) is resolved by
the same code as a query (sql/select.py) and must aggregate a TUMBLE or HOP window of streams. The query then reads
it as a stream of its output columns (a table named `__nested<i>_<alias>`: core/model.py Nested). Spark runs the
window aggregations in append mode, each window's row once when the watermark passes its end, and the operator after
them keys on their window (adapters/spark/nested.py): an INNER join that equates both subqueries' window_start and
window_end (windows of one size), or a GROUP BY that holds the subquery's window_start and window_end; a stream
joined with one is bounded in event time. Its rows are appended too, once per window (once per match for a stream
joined); the query's sources are the relations the subqueries read (and the stream), in the order of the SELECT.

Other subqueries (neither a windowed aggregation nor a join read alone) are left to sql/select.py, which refuses
them (DSF-E045, or ROW_NUMBER's hint). Refused here with DSF-E045, each with its reason: beside a windowed one, a
subquery that does not aggregate a window (or group one by its window); a subquery joined with a relation other
than a stream, or more than two; a join of subqueries that is not INNER, does not equate both window columns,
over windows of different sizes, or that aggregates; a GROUP BY that does not hold the subquery's window columns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal
from dataclasses import replace

from sqlglot import exp

from dsflow.core.model import Nested, Relation
from dsflow.errors import Diagnostic, Location
from dsflow.sql.fields import base_column
from dsflow.sql.dialect import is_window
from dsflow.sql.parse import node_location, parse_one_select
from dsflow.sql import window_bound, windowed_join
from dsflow.sql.ctes import inline_joined_subquery
from dsflow.sql.statements import Analysed, RawStatement

Report = Callable[[Diagnostic], None]
PREFIX = "__nested"
WINDOW_JOIN = "window"
"""The kind of join sql/select.py returns for two subqueries (`window_join`), in place of an interval join's WITHIN."""
HINT = ("a subquery in FROM or JOIN aggregates a TUMBLE or HOP window (GROUP BY window_start, window_end, ...); the "
        "query joins two of them INNER ON their window_start and window_end, or groups one by them; else write "
        "the subquery as its own CREATE STREAM|CHANGELOG ... AS SELECT and read that relation")


def reads_subqueries(select: exp.Expr) -> bool:
    """Whether a SELECT reads, in its FROM or a JOIN, a subquery of the shapes this module reads: one that
    aggregates a window, or a join read as the one relation (other subqueries are refused as before)."""
    if not isinstance(select, exp.Select):
        return False
    items = _items(select)
    return any(_windowed(i) for i in items) or (len(items) == 1 and _joins(items[0]))


def _windowed(item: exp.Expr) -> bool:
    """A subquery that groups a window (`SELECT ... FROM TUMBLE(s, ...) GROUP BY ...`)."""
    body = item.this if isinstance(item, exp.Subquery) else None
    return isinstance(body, exp.Select) and body.args.get("group") is not None and \
        body.args.get("from_") is not None and is_window(body.args["from_"].this)


def _items(select: exp.Select) -> list[exp.Expr]:
    """What a SELECT reads: its FROM's item and each JOIN's."""
    found = [select.args["from_"].this] if select.args.get("from_") else []
    return found + [j.this for j in select.args.get("joins") or []]


def _relation(item: exp.Expr) -> bool:
    """A relation read as it is (not a window function's call, not a subquery)."""
    return isinstance(item, exp.Table) and not is_window(item)


def _joins(item: exp.Expr) -> bool:
    """A subquery whose SELECT joins, and does not group, aggregate or call a window function."""
    body = item.this if isinstance(item, exp.Subquery) else None
    return isinstance(body, exp.Select) and bool(body.args.get("joins")) and body.args.get("group") is None \
        and body.find(exp.AggFunc, exp.Window) is None


def is_nested(relation: Relation) -> bool:
    """Whether a relation stands for a subquery in the SELECT that reads it (`analyse_nested`)."""
    return relation.name.startswith(PREFIX)


def analyse_nested(path: str, st: RawStatement, select: exp.Select, relations: dict[str, Relation], qualify_name,
                   report: Report, analyse) -> Analysed | None:
    """Resolve a SELECT over windowed aggregations in subqueries (`analyse` resolves each SELECT); every problem is
    reported, None if any."""
    where = lambda node: node_location(path, node, st.location)  # noqa: E731
    items = _items(select)
    if len(items) == 1 and _joins(items[0]):  # the one relation read: inlined as a CTE that joins (sql/ctes.py)
        if not inline_joined_subquery(select, relations, qualify_name, where, report):
            return None
        return analyse(path, replace(st, select=select), relations, qualify_name, report, copy=False)
    if not _shape(select, items, where, report):
        return None
    joins, group = select.args.get("joins"), select.args.get("group")
    place = where(joins[0] if joins else group if group is not None else select)
    nested: list[Nested] = []
    stand_ins: dict[str, Relation] = {}
    for index, item in enumerate(items):
        if not isinstance(item, exp.Subquery):  # a stream joined with a windowed subquery (_shape)
            continue
        found = _inner(path, st, index, item, relations, qualify_name, where, report, analyse)
        if found is None:
            return None
        nested.append(found)
        stand_ins[found.name] = Relation(fqn=found.name, kind="stream", columns=found.output_columns, store="",
                                         topic="")
        item.replace(exp.Table(this=exp.to_identifier(found.name.rsplit(".", 1)[-1]),
                               alias=exp.TableAlias(this=exp.to_identifier(found.alias))))
    outer = analyse(path, replace(st, select=select), relations | stand_ins, _qualifier(qualify_name, stand_ins),
                    report, copy=False)
    if outer is None or not _keyed_on_windows(outer, nested, place, report):
        return None
    bounded = _bounded(outer, nested, relations, place, report)
    if bounded is False:
        return None
    if bounded is not None:
        nested = [nested[0].model_copy(update={"stream_bound": bounded})]
    by_name = {n.name: n for n in nested}
    sources = tuple(s for source in outer.sources
                    for s in (by_name[source.relation].sources if source.relation in by_name else (source,)))
    return replace(outer, sources=sources, join_within=None, join_side=None, nested=tuple(nested))


def _qualifier(qualify_name, stand_ins: dict[str, Relation]):
    """`qualify_name` that also knows the stand-ins' names (written without database and schema)."""
    names = {fqn.rsplit(".", 1)[-1].lower(): fqn for fqn in stand_ins}

    def qualify(parts) -> str:
        parts = tuple(parts)
        return names[parts[0].lower()] if len(parts) == 1 and parts[0].lower() in names else qualify_name(parts)

    return qualify


def _shape(select: exp.Select, items: list[exp.Expr], where, report: Report) -> bool:
    """One subquery, or an INNER join of two, with nothing else read; DSF-E045 otherwise."""
    problem = None
    joins = select.args.get("joins") or []
    if not all(isinstance(i, exp.Subquery) for i in items) and not (
            len(items) == 2 and joins and all(_windowed(i) or _relation(i) for i in items)):
        problem = "a subquery joined with a relation is supported only as a stream joined with a subquery that " \
            "aggregates a window"
    elif len(items) > 2:
        problem = "a join of more than two subqueries is not supported yet"
    elif joins and ((joins[0].side or "").upper() not in ("", "INNER") or (joins[0].kind or "").upper() == "CROSS"
                    or joins[0].args.get("on") is None):
        problem = "a join of two subqueries must be an INNER JOIN ... ON"
    elif joins and (select.args.get("group") or any(p.find(exp.AggFunc) for p in select.selects)):
        problem = "aggregating a join of subqueries is not supported yet"
    if problem is not None:
        report(Diagnostic("DSF-E045", problem, where(joins[0] if joins else select), hint=HINT))
        return False
    return True


def _inner(path: str, st: RawStatement, index: int, item: exp.Subquery, relations: dict[str, Relation],
           qualify_name, where, report: Report, analyse) -> Nested | None:
    """The subquery resolved (it must aggregate a TUMBLE or HOP window of streams), or None (reported)."""
    alias = item.alias_or_name
    if not alias or not isinstance(item.this, exp.Select):
        report(Diagnostic("DSF-E045", "a subquery in FROM or JOIN needs an alias and a SELECT (not a UNION)",
                          where(item), hint=HINT))
        return None
    _select_grouped(item.this)
    inner = analyse(path, replace(st, select=item.this), relations, qualify_name, report, copy=False)
    if inner is None:
        return None
    grouped = inner.nested[0] if inner.aggregated and len(inner.nested) == 1 and inner.join_within is None \
        else None  # a GROUP BY of a windowed subquery by its window (a subquery in a subquery)
    window = grouped.window if grouped is not None else inner.window
    if inner.join_within is not None and not inner.aggregated:
        report(Diagnostic("DSF-E045", f"the subquery '{alias}' joins two streams: a query reads such a join only "
                          "as its one relation (FROM (SELECT ... JOIN ...) x, or a CTE read FROM x or FROM TUMBLE(x, "
                          "SIZE ...))", where(item), hint="e.g. " + windowed_join.EXAMPLE))
        return None
    if not inner.aggregated or window is None or window.kind == "session" or (inner.nested and grouped is None) \
            or inner.join_within is not None or inner.temporal is not None or inner.changelog_join is not None:
        report(Diagnostic("DSF-E045", f"the subquery '{alias}' must aggregate a TUMBLE or HOP window of a stream "
                          "(no join, no subquery) to be read by the query around it", where(item), hint=HINT))
        return None
    columns = _window_outputs(inner.select_sql, window.source) if grouped is None else \
        _window_outputs(inner.select_sql, grouped.alias.lower(), grouped.window_columns)
    return Nested(alias=alias, name=qualify_name((f"{PREFIX}{index}_{alias.lower()}",)), select_sql=inner.select_sql,
                  sources=inner.sources, output_columns=inner.columns, window=window, key_columns=inner.group_keys,
                  window_columns=columns, nested=inner.nested)


def _select_grouped(select: exp.Select) -> None:
    """Each GROUP BY column a subquery does not select is selected under a hidden name (`__group<i>`): the query
    reads its rows, not its key (Nexmark q5's `SELECT count(*) ... GROUP BY auction, window_start, window_end`)."""
    group = select.args.get("group")
    selected = {p.unalias().sql().lower() for p in select.selects}
    for index, item in enumerate(group.expressions if group is not None else []):
        if isinstance(item, exp.Column) and item.sql().lower() not in selected:
            select.select(exp.alias_(item.copy(), f"__group{index}"), copy=False)


def _window_outputs(select_sql: str, source: str, names: tuple[str, str] = ("window_start", "window_end")) \
        -> tuple[str, str]:
    """The output names of a windowed aggregation's window_start and window_end (or of the window columns `names`
    of the subquery `source` it groups), as its GROUP BY has them and every GROUP BY column is selected
    (sql/select.py, `_select_grouped`)."""
    found: dict[str, str] = {}
    for projection in parse_one_select(select_sql).selects:
        column = projection.unalias()
        if isinstance(column, exp.Column) and column.table == source and column.name in names:
            found.setdefault(column.name, projection.alias_or_name)
    return found[names[0]], found[names[1]]


def _keyed_on_windows(outer: Analysed, nested: list[Nested], place: Location, report: Report) -> bool:
    """The query's join equates both subqueries' windows (of one size); its GROUP BY holds the subquery's window
    columns; DSF-E045 otherwise."""
    select = parse_one_select(outer.select_sql)
    if len(nested) == 2:
        first, second = nested
        same = (first.window.kind, first.window.size, first.window.advance) == \
            (second.window.kind, second.window.size, second.window.advance)
        on = select.args["joins"][0].args["on"]
        pairs = {frozenset(_sides(eq)) for eq in on.find_all(exp.EQ)}
        wanted = [frozenset({(first.alias.lower(), a.lower()), (second.alias.lower(), b.lower())})
                  for a, b in zip(first.window_columns, second.window_columns, strict=True)]
        if same and all(w in pairs for w in wanted):
            return True
        report(Diagnostic("DSF-E045", "a join of two windowed subqueries must equate their window_start and "
                          "window_end (ON a.window_start = b.window_start AND a.window_end = b.window_end), over "
                          "windows of the same kind and size", place, hint=HINT))
        return False
    group = select.args.get("group")
    if group is None:
        return True  # each row of the subquery, filtered or projected: once per window
    only = nested[0]
    grouped = {(c.table.lower(), c.name.lower()) for c in group.expressions if isinstance(c, exp.Column)}
    if all((only.alias.lower(), c.lower()) in grouped for c in only.window_columns):
        return True
    report(Diagnostic("DSF-E045", f"a GROUP BY over the windowed subquery '{only.alias}' must hold its window "
                      f"columns ({', '.join(only.window_columns)}): a group that is not a window never closes",
                      place, hint=f"add {', '.join(only.window_columns)} to the GROUP BY"))
    return False


def _bounded(outer: Analysed, nested: list[Nested], relations: dict[str, Relation], place: Location,
             report: Report) -> tuple[int, int] | None | Literal[False]:
    """The bound of a relation joined with a windowed subquery: a stream whose event time the query bounds by the
    subquery's window (sql/window_bound.py); None without such a relation; DSF-E045 or DSF-E295 (False)."""
    plain = [s for s in outer.sources if not s.relation.rsplit(".", 1)[-1].startswith(PREFIX)]
    if not plain:
        return None
    (source,), (only,) = plain, nested
    relation = relations[source.relation]
    if relation.kind != "stream":
        report(Diagnostic("DSF-E045", f"a {relation.kind} joined with a windowed subquery is not supported (a "
                          "stream is)", place, hint=HINT))
        return False
    timestamp = source.timestamp or relation.timestamp
    select = parse_one_select(outer.select_sql)
    assert isinstance(select, exp.Select)  # a join: not a UNION
    found = window_bound.bound(select, (source.alias, timestamp), (only.alias, only.window_columns),
                               only.window) if timestamp else None
    if found is not None:
        return found
    report(Diagnostic("DSF-E295", f"the join of '{source.alias}' with the windowed subquery '{only.alias}' needs "
                      f"the event time of '{source.alias}' ({timestamp or 'its timestamp column'}) bounded "
                      f"below and above by the subquery's window ({', '.join(only.window_columns)}): else Spark "
                      "keeps both sides' rows in state for ever", place, hint=window_bound.HINT))
    return False


def _sides(eq: exp.EQ) -> set[tuple[str, str]]:
    """The (relation alias, column) of each side of an equality that is a bare column."""
    found = set()
    for side in (eq.this, eq.expression):
        column = base_column(side)
        if column is not None and column is side:
            found.add((column.table.lower(), column.name.lower()))
    return found

