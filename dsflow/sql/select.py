"""The SELECT of a continuous query: its sources, shape (window, join, aggregation) and output columns.

    FROM rel | FROM TUMBLE(rel, SIZE ..) | FROM HOP(rel, SIZE .., ADVANCE BY ..) | FROM SESSION(rel, GAP ..)
    [INNER | LEFT | FULL] JOIN rel2 WITHIN <duration> ON a.k = b.k
    stream [INNER] JOIN stream2 ON a.k = b.k [JOIN stream3 ON ...]  (regular joins, no WITHIN: sql/join_chain.py)
    stream [INNER | LEFT] JOIN changelog ON s.k = c.pk           (temporal join, sql/temporal.py)
    ... [LEFT] JOIN stream3 WITHIN <duration> ON ...                (more interval joins, sql/join_chain.py)
    ... [LEFT] JOIN changelog2 ON x.k = c2.pk ...                  (more temporal joins, sql/join_chain.py)
    changelog [INNER | LEFT | FULL] JOIN changelog ON a.x = b.y  (a changelog, sql/changelog_join.py)
    ... [INNER | LEFT | FULL] JOIN changelog3 ON x.a = c3.b ...   (more changelogs, sql/changelog_join.py)
    GROUP BY cols with COUNT, SUM, MIN, MAX, AVG, COUNT(DISTINCT),   (over a changelog or a changelog join:
        MAX_BY(value, ordering), MIN_BY(value, ordering)            with retractions)
    GROUP BY expressions, and aggregates without GROUP BY (one row)  (sql/aggregates.py)
    FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY t) AS rn FROM rel) WHERE rn <= N     (sql/topn.py)
    GROUP BY or ROW_NUMBER over a regular join of two streams (run as a join of changelogs: sql/keyed_join.py)
    SELECT k, AVG(m) FROM (SELECT k, MAX(x) AS m FROM rel GROUP BY id, k) q GROUP BY k      (sql/stacked.py)
    FROM TUMBLE(a, ..) [LEFT] JOIN b WITHIN .. ON .. GROUP BY window_start, window_end, ..  (sql/windowed_join.py)
    SELECT ..., AGG(x) OVER (PARTITION BY k ORDER BY t ROWS|RANGE BETWEEN .. PRECEDING AND CURRENT ROW) (sql/over.py)

Anything else that needs state (RIGHT JOIN, window functions, UNION, ...) is DSF-E045 with its place.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Literal, cast

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema, normalize_name

from dsflow.core.model import (
    ChainedChangelogJoin, ChangelogJoin, Column, IntervalJoin, RegularJoin, Relation, Source, TemporalJoin, Window,
)
from dsflow.errors import Diagnostic, Location
from dsflow.sql.cdc import SLOT_KEY
from dsflow.sql.dialect import (
    MAX_MILLISECONDS, SOURCE_PROPERTIES, WITHIN, duration_text, is_window, milliseconds, normalized_duration,
    window_call,
)
from dsflow.sql.filecache import DeferredSelect
from dsflow.sql.fields import base_column, check_fields, group_key_sql, type_map_subscripts
from dsflow.sql.functions import check_functions, declare_result_types
from dsflow.sql.parse import DIALECT, RawStatement, node_location, type_sql
from dsflow.sql.statements import Analysed  # noqa: F401  (defined without sqlglot, for the load cache)
from dsflow.core.suggest import did_you_mean, relation_hint
from dsflow.sql.simple import qualify_simple
from dsflow.sql.typecheck import check_types
from dsflow.sql.temporal import check_shape, system_time, temporal_join
from dsflow.sql import aggregates as grouping
from dsflow.sql import changelog_join as cj
from dsflow.sql import flink_windows
from dsflow.sql import join_chain as chain
from dsflow.sql import join_keys, keyed_join, stacked
from dsflow.sql import nested, proctime, windowed_join
from dsflow.sql.unsupported import check_select_surface, is_cte_name
from dsflow.sql.ctes import inline_ctes
from dsflow.sql.unions import analyse_union
from dsflow.sql.unnest import extract_unnest, restore_unnest
from dsflow.sql.topn import extract_top_n, restore_top_n
from dsflow.sql.over import extract_over, restore_over

Report = Callable[[Diagnostic], None]
QUALIFY_SIMPLE = True
"""sql/simple.py's qualify for the simplest SELECTs (False: sqlglot's qualify for every SELECT; the tests that
compare the two paths switch it)."""
TYPE_ALIASES = {"TEXT": "VARCHAR", "STRING": "VARCHAR", "TIMESTAMPTZ": "TIMESTAMP"}
UNSUPPORTED = {
    exp.Window: "window functions (OVER)", exp.Union: "UNION", exp.Subquery: "subqueries",
    exp.Limit: "LIMIT", exp.Order: "ORDER BY",
}
AGGREGATES = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg, exp.ArgMax, exp.ArgMin)
WINDOW_COLUMNS = ("window_start", "window_end")
TEMPORAL = "temporal"
UNNAMED = "_col_"
"""sqlglot's name of a computed column without AS (`_col_3`): an INSERT INTO names it after its target's column."""
SUPPORTED_HINT = ("supported: projections, WHERE, GROUP BY with COUNT/SUM/MIN/MAX/AVG/COUNT(DISTINCT)/MAX_BY/MIN_BY, "
                  "TUMBLE/HOP/SESSION windows, [LEFT|FULL] JOIN ... WITHIN ... ON between two streams, INNER "
                  "JOIN ... ON between streams without WITHIN (a regular join, state kept for ever), and "
                  "stream [LEFT] JOIN changelog ON its primary key, followed by more [LEFT] JOIN stream WITHIN ... ON "
                  "(after an interval join), then more [LEFT] JOIN changelog ON its key")


def source_tables(select: exp.Expr) -> list[exp.Table]:
    """The relations a SELECT reads (a window function's relation, not the function itself)."""
    return [t for t in select.find_all(exp.Table) if not is_window(t) and not is_cte_name(t)]


def analyse_select(path: str, st: RawStatement, relations: dict[str, Relation], qualify_name,
                   report: Report, copy: bool = True) -> Analysed | None:
    """Check and resolve st.select; every problem is reported, None if any. With copy=False st.select itself is
    resolved, in place: for a caller that analyses the statement once and reads its tree no more (a load; copying
    the tree was ~20% of resolving it)."""
    select = st.select.copy() if copy else st.select.tree() if isinstance(st.select, DeferredSelect) else st.select
    where = lambda node: node_location(path, node, st.location)  # noqa: E731
    proctime.prepare(select)  # PROCTIME() columns: sql/proctime.py
    if select.args.get("with_") is not None and not inline_ctes(select, relations, qualify_name, where, report):
        return None
    if isinstance(select, exp.Union):  # UNION ALL of streams: each branch resolved as its own SELECT
        return analyse_union(path, st, select, relations, qualify_name, report, analyse_select)
    if not flink_windows.resolve(select, relations, qualify_name, where, report):  # Flink's window syntax
        return None
    over = extract_over(select, relations, qualify_name, where, report)  # OVER aggregates: sql/over.py
    top = extract_top_n(select, relations, qualify_name, where, report) if over is None else None  # sql/topn.py
    if top is False or over is False:
        return None
    if stacked.reads_aggregation(select):  # an aggregation of an aggregating subquery (sql/stacked.py)
        return stacked.analyse_stacked(path, st, select, relations, qualify_name, report, analyse_select)
    if nested.reads_subqueries(select):  # windowed aggregations in subqueries: each resolved as its own SELECT
        return nested.analyse_nested(path, st, select, relations, qualify_name, report, analyse_select)
    unnested = extract_unnest(select, relations, qualify_name, where, report)  # sql/unnest.py
    if unnested is False or not check_select_surface(select, where, report) \
            or not grouping.rewrite_filters(select, where, report):
        return None
    unsupported = _first_unsupported(select)
    if unsupported is not None:
        node, what = unsupported
        report(Diagnostic("DSF-E045", f"{what} in continuous queries are not supported yet", where(node),
                          hint=grouping.top_row_hint(node) or SUPPORTED_HINT))
        return None
    window = _extract_window(select, where, report)
    if window is False or not proctime.check_rest(select, where, report) or not check_functions(select, where, report) \
            or not grouping.check_by_calls(select, where, report):
        return None
    tables = source_tables(select)
    if not tables:
        report(Diagnostic("DSF-E209", "the query reads no relation: its SELECT has no FROM", where(select),
                          hint="a continuous query reads a stream or changelog: SELECT ... FROM relation"))
        return None
    unknown = [t for t in tables if qualify_name([p.name for p in t.parts]) not in relations]
    for table in unknown:  # an INSERT INTO's sources are not resolved before its SELECT is analysed
        report(Diagnostic("DSF-E040", f"unknown relation '{table.sql(dialect=DIALECT)}'", where(table),
                          hint=relation_hint(table.name, relations),
                          subject=f"relation.{qualify_name([p.name for p in table.parts])}"))
    if unknown:
        return None
    found = {id(t): relations[qualify_name([p.name for p in t.parts])] for t in tables}
    options = _source_options(tables, found, where, report)
    if options is None:
        return None
    if _aggregates_a_changelog(select, tables, found, window, where, report):
        return None
    chain.comma_join(select, tables, found)  # FROM a, b WHERE a.k = b.k: an inner join
    join = _check_join(select, tables, found, where, st, report)
    if join and join[0] == chain.REGULAR and keyed_join.applies(select, bool(top)):  # run as a join of changelogs
        join = (cj.CHANGELOG_JOIN, "INNER") if keyed_join.check_two(select, tables, where, report) else False
    elif top and join:  # a ROW_NUMBER over another join
        keyed_join.refuse_ranked(select, tables, found, where, report)
        return None
    places = tuple(where(j) for j in select.args["joins"]) if join and join[0] == chain.REGULAR else ()  # unqualified
    if join is False or not system_time(tables, found, options, join is not None and join[0] == TEMPORAL, where,
                                        report):
        return None
    if not _columns_known(select, tables, found, window, where, report):
        return None
    qualified = _qualified(select, tables, found, window, st, report)
    if qualified is None or not check_fields(qualified, where, report) \
            or not check_types(qualified, _column_types(tables, found, window), where, report):
        return None
    lookup = any(options[id(t)].get("lookup") for t in tables)  # processing time (sql/proctime.py): Spark joins it
    joined = (None, None, (), ()) if lookup else _join_kind(qualified, tables, found, join, places, where, st, report)
    if joined is None:
        return None
    temporal, chained, later, regular = joined
    shape = _aggregation(qualified, window, where, st, report)
    if shape is None or (shape[0] and (found[id(tables[0])].kind == "changelog" or chained)  # retract.py
                         and not grouping.check_retracted_by(qualified, where, report)):
        return None
    if lookup and not proctime.check_lookup(len(tables), shape[0], where(select.args["joins"][0]), report):
        return None
    if join and shape[0] and not chained and not windowed_join.check_aggregation(  # sql/windowed_join.py
            None if temporal else join[0], join[1], window is not None, bool(later), st.location, report):
        return None  # (a changelog join is aggregated with retractions: retract.py)
    columns = _output_columns(qualified, st, report) if restore_over(qualified, over, where, report) else None
    if columns is None:
        return None
    sources = tuple(Source(relation=found[id(t)].fqn, alias=t.alias_or_name, **options[id(t)]) for t in tables)
    # copy=False: `qualified` is this function's own copy and is not used after this (saves a deep copy)
    interval = bool(join) and not (temporal or chained or regular or lookup)
    return Analysed(restore_top_n(restore_unnest(qualified, unnested), top).sql(dialect=DIALECT, copy=False),
                    sources, columns,
                    aggregated=shape[0], group_keys=shape[1], window=window or None,
                    join_within=join[0] if join and interval else None,
                    join_side=join[1] if join and interval else None, temporal=temporal,
                    changelog_join=chained, chain=later, top_n=top.top_n if top else None, regular=regular,
                    over=over.over if over else None)


def _join_kind(qualified: exp.Select, tables: list[exp.Table], found: dict, join, places: tuple[Location, ...],
               where, st: RawStatement, report: Report) -> tuple[TemporalJoin | None, ChangelogJoin | None,
                                        tuple[IntervalJoin | TemporalJoin | ChainedChangelogJoin, ...],
                                        tuple[RegularJoin, ...]] | None:
    """The temporal join or the changelog join the SELECT makes first (both None for an interval join, a regular
    join or no join), the joins chained after it, and the regular joins (sql/join_chain.py; `places`: where each of
    their joins is written); None if a problem was reported."""
    if not join:
        return None, None, (), ()
    found_kinds = _join_kind_unchecked(qualified, tables, found, join, places, where, st, report)
    if found_kinds is None:
        return None
    relations = {t.alias_or_name: found[id(t)] for t in tables}
    if not join_keys.check(_text_keyed_pairs(*found_kinds[1:3]), relations, where(qualified.args["joins"][0]),
                           report):
        return None
    return found_kinds


def _text_keyed_pairs(changelog: ChangelogJoin | None,
                      later: tuple[IntervalJoin | TemporalJoin | ChainedChangelogJoin, ...]
                      ) -> list[tuple[str, str, str, str]]:
    """The key pairs of the joins that match keys by their text (sql/join_keys.py): a join of changelogs (or of
    streams run as one) and the changelogs joined after a first join."""
    pairs = []
    if changelog is not None:
        pairs += [(changelog.left, a, changelog.right, b)
                  for a, b in zip(changelog.left_keys, changelog.right_keys, strict=True)]
    for step in later:
        if isinstance(step, ChainedChangelogJoin):
            pairs += [(r, a, step.changelog, b)
                      for r, a, b in zip(step.left_relations, step.left_keys, step.right_keys, strict=True)]
        elif isinstance(step, TemporalJoin):
            pairs += [(step.stream, a, step.changelog, b)
                      for a, b in zip(step.stream_keys, step.changelog_keys, strict=True)]
    return pairs


def _join_kind_unchecked(qualified: exp.Select, tables: list[exp.Table], found: dict, join,
                         places: tuple[Location, ...], where, st: RawStatement, report: Report
                         ) -> tuple[TemporalJoin | None, ChangelogJoin | None,
                                    tuple[IntervalJoin | TemporalJoin | ChainedChangelogJoin, ...],
                                    tuple[RegularJoin, ...]] | None:
    aliases = (tables[0].alias_or_name, tables[1].alias_or_name)
    if join[0] == cj.CHANGELOG_JOIN and found[id(tables[0])].kind == "stream":  # streams (sql/keyed_join.py)
        keyed = keyed_join.keyed_join(qualified, aliases, where, report)
        return None if keyed is None else (None, keyed[0], (), (keyed[1],))
    if join[0] == cj.CHANGELOG_JOIN:  # and more changelogs joined after it
        chained = cj.changelog_join(qualified, aliases, (found[id(tables[0])], found[id(tables[1])]), join[1], where,
                                    report)
        steps = cj.chained_joins(qualified, tables, found, where, report) if chained and len(tables) > 2 else ()
        return None if chained is None or steps is None else (None, chained, steps, ())
    if join[0] == chain.REGULAR:  # every join of the SELECT: streams without WITHIN
        regular = chain.regular_joins(qualified, tables, places, where, report)
        return None if regular is None else (None, None, (), regular)
    later = chain.chained_joins(qualified, tables, found, where, report) if len(tables) > 2 else ()
    if later is None:
        return None
    if join[0] == TEMPORAL:
        temporal = temporal_join(qualified, aliases, found[id(tables[1])], join[1], where, report)
        return None if temporal is None else (temporal, None, later, ())
    if not _join_equality(qualified, tables, where, st, report):
        return None
    return None, None, later, ()


def _aggregates_a_changelog(select: exp.Select, tables: list[exp.Table], found: dict, window: Window | None, where,
                            report: Report) -> bool:
    """A GROUP BY over one changelog, or an aggregate without GROUP BY over it, is aggregated with retractions
    (adapters/spark/retract.py); DSF-E130 for a window over a changelog, DSF-E156 for an aggregation of a raw CDC
    stream (it would count every update again)."""
    if not (select.args.get("group") or select.find(exp.AggFunc)):
        return False
    cdc = [t for t in tables if SLOT_KEY in found[id(t)].table_options]
    if cdc:
        report(Diagnostic("DSF-E156", f"aggregating the change stream '{found[id(cdc[0])].fqn}' would count every "
                          "update of a row again, and never take a deleted row out", where(cdc[0]),
                          hint="make it a changelog keyed by the table's primary key first (CREATE CHANGELOG t "
                          "(PRIMARY KEY (id)) AS SELECT `after`->id AS id, ... FROM the stream), then GROUP BY over "
                          "that changelog: updates are retracted and deletes leave their group"))
        return True
    changelogs = [t for t in tables if found[id(t)].kind == "changelog"]
    if not changelogs or not window:
        return False
    report(Diagnostic("DSF-E130", f"a window over the changelog '{found[id(changelogs[0])].fqn}' is not supported",
                      where(changelogs[0]), hint="a changelog holds current state, not events in time: GROUP BY "
                      "its columns without TUMBLE/HOP (updates and deletes are retracted), or window a stream"))
    return True


SOURCE_PROPS = ("starting.position", "timestamp")
"""What a source of a query may set: FROM relation WITH (...)."""


def _source_options(tables: list[exp.Table], found: dict, where, report: Report) -> dict[int, dict] | None:
    """Each source's own `WITH ('starting.position' = ..., 'timestamp' = ...)`; None if any is wrong (DSF-E133)."""
    options: dict[int, dict] = {}
    ok = True
    for table in tables:
        relation, chosen = found[id(table)], {}
        for prop in table.args.get(SOURCE_PROPERTIES) or []:
            key, value = prop.this.name, prop.args["value"].name if prop.args.get("value") else ""
            if key == "starting.position" and value.lower() in ("earliest", "latest"):
                chosen["position"] = value.lower()
            elif key == "timestamp" and relation.column(value) is not None:
                chosen["timestamp"] = relation.column(value).name
            else:
                ok = False
                report(Diagnostic("DSF-E133", _bad_source_option(key, value, relation), where(prop),
                                  hint="a source takes 'starting.position' = 'earliest'|'latest' and 'timestamp' = "
                                       "'<one of its columns>'"))
        options[id(table)] = chosen
    return options if ok else None


def _bad_source_option(key: str, value: str, relation: Relation) -> str:
    if key == "starting.position":
        return f"'starting.position' of a source must be 'earliest' or 'latest', got '{value}'"
    if key == "timestamp":
        return f"timestamp column '{value}' is not a column of '{relation.fqn}'"
    return f"unknown source property '{key}' ({did_you_mean(key, SOURCE_PROPS)})"


def _first_unsupported(select: exp.Expr) -> tuple[exp.Expr, str] | None:
    """The node `select.find(t)` finds for the first type t of UNSUPPORTED present, in one walk, not one per type."""
    first: dict[type, exp.Expr] = {}
    kinds = tuple(UNSUPPORTED)
    for node in select.bfs():
        if isinstance(node, kinds):
            for kind in kinds:
                if isinstance(node, kind):
                    first.setdefault(kind, node)
    return next(((first[kind], what) for kind, what in UNSUPPORTED.items() if kind in first), None)


MAX_WINDOWS_PER_ROW = 30_000
"""The most windows of a HOP a row falls in (SIZE / ADVANCE BY) dsflow takes: Spark's analyzer expands each row into
one projection per window; 20,160 (1 week by 30 seconds) took 73 s to analyse, 60,480 exhausted a 1 GB driver heap."""


def _windows_per_row(texts: dict[str, str | None]) -> int:
    return -(-milliseconds(str(texts["size"])) // milliseconds(str(texts["advance"])))


def _extract_window(select: exp.Select, where, report: Report) -> Window | None | Literal[False]:
    """Replace TUMBLE(rel, ...)/HOP(rel, ...) by rel itself; the window it described, None, or False on error."""
    wrapped = [t for t in select.find_all(exp.Table) if is_window(t)]
    if not wrapped:
        return None
    problem = "more than one window is not supported yet" if len(wrapped) > 1 else \
        windowed_join.window_problem(select, wrapped[0]) if select.args.get("joins") else None
    if problem is not None:  # sql/windowed_join.py
        report(Diagnostic("DSF-E045", problem, where(wrapped[-1]), hint=SUPPORTED_HINT))
        return False
    outer = wrapped[0]
    function = window_call(outer)
    assert function is not None  # `outer` is a window (is_window)
    inner: exp.Table = function.relation.copy()
    durations = {"size": function.size, "advance": function.advance}
    texts: dict[str, str | None] = {}
    for key, node in durations.items():
        if node is None:
            texts[key] = None
            continue
        text = texts[key] = normalized_duration(duration_text(node))
        # Spark runs a window in whole milliseconds, and refuses one of 0 (0.1 ms); a session of GAP 0 it takes,
        # and drops every row (session_window windows no row of a gap that is not positive)
        if text is None or float(text.split()[0]) <= 0 or milliseconds(text) <= 0:
            label = "GAP" if function.kind == "session" else key.upper()
            report(Diagnostic("DSF-E032", f"window {label} must be a positive duration like 10 SECONDS, got "
                              f"'{duration_text(node)}'", where(outer), hint="units: MILLISECONDS, SECONDS, "
                              "MINUTES, HOURS, DAYS, WEEKS; at least 1 millisecond"))
            return False
        if milliseconds(text) > MAX_MILLISECONDS:
            report(Diagnostic("DSF-E032", f"window {key.upper()} {duration_text(node)} is longer than Spark's longest "
                              f"interval ({MAX_MILLISECONDS:,} milliseconds)", where(outer),
                              hint="a window Spark can hold, e.g. SIZE 365 DAYS"))
            return False
    if texts["advance"] is not None and milliseconds(texts["advance"]) > milliseconds(str(texts["size"])):
        report(Diagnostic("DSF-E032", f"HOP's ADVANCE BY ({texts['advance']}) is longer than its SIZE "
                          f"({texts['size']}): Spark refuses a window that slides past its end", where(outer),
                          hint="ADVANCE BY at most the SIZE (equal to it is a TUMBLE)"))
        return False
    if texts["advance"] is not None and _windows_per_row(texts) > MAX_WINDOWS_PER_ROW:
        report(Diagnostic("DSF-E032", f"HOP's SIZE ({texts['size']}) over its ADVANCE BY ({texts['advance']}) puts "
                          f"each row in {_windows_per_row(texts):,} windows: Spark writes one projection per window "
                          f"while analysing the query, and runs out of memory past ~{MAX_WINDOWS_PER_ROW:,}",
                          where(outer), hint="a longer ADVANCE BY, or a shorter SIZE"))
        return False
    # as qualify() normalizes it (`AS B` is b): the window's source is then the name its Source has
    alias = DIALECT.normalize_identifier(exp.to_identifier(outer.alias or inner.name)).name
    inner.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    outer.replace(inner)
    return Window(kind=function.kind, source=alias, size=texts["size"], advance=texts["advance"],
                  processing_time=getattr(outer.meta.get(flink_windows.FLINK), "processing", False))


def _check_join(select: exp.Select, tables: list[exp.Table], found: dict, where, st: RawStatement,
                report: Report) -> tuple[str, str] | None | Literal[False]:
    """(within, side) of an interval join, (REGULAR, "inner") of a regular one, None without a join, False on
    error."""
    joins = select.args.get("joins") or []
    if not joins:
        return None
    if len(tables) != len(joins) + 1:
        report(Diagnostic("DSF-E045", "a join reads one relation per JOIN", where(joins[-1]), hint=SUPPORTED_HINT))
        return False
    if len(joins) > 1 and not chain.check_chain(joins, tables, found, where, report):  # sql/join_chain.py
        return False
    join = joins[0]
    side = (join.side or "").upper() or "INNER"
    kind = (join.kind or "").upper()
    if side == "RIGHT":
        report(Diagnostic("DSF-E045", "RIGHT JOIN is not supported", where(join),
                          hint="swap the two relations and use LEFT JOIN"))
        return False
    if kind in ("CROSS", "SEMI", "ANTI") or join.args.get("on") is None:
        report(Diagnostic("DSF-E045", f"{kind or 'a'} JOIN without ON is not supported", where(join),
                          hint="join ON an equality of a column of each side, e.g. ON a.userid = b.userid"))
        return False
    left, right = (found[id(t)] for t in tables[:2])
    if nested.is_nested(left) or nested.is_nested(right):  # windowed aggregations, or a stream (sql/nested.py)
        return nested.WINDOW_JOIN, "inner"
    if left.kind == "changelog" and right.kind == "changelog":  # sql/changelog_join.py
        return (cj.CHANGELOG_JOIN, side) if cj.check_shape(join, side, where, report) else False
    if left.kind == "changelog" or right.kind == "changelog":
        return (TEMPORAL, side) if check_shape(join, side, left, right, where, report) else False
    if left.kind != "stream" or right.kind != "stream":
        report(Diagnostic("DSF-E045", f"joins with a {right.kind if left.kind == 'stream' else left.kind} are not "
                          "supported", where(join), hint=SUPPORTED_HINT))
        return False
    if join.args.get(WITHIN) is None:  # a regular join (sql/join_chain.py)
        return (chain.REGULAR, "inner") if chain.regular_side(join, side, where, report) else False
    duration = chain.within_duration(join, where, report)
    if duration is None:
        return False
    join.set(WITHIN, None)
    return duration, {"INNER": "inner", "LEFT": "left", "FULL": "full"}.get(side, "inner")


def _columns_known(select: exp.Select, tables: list[exp.Table], found: dict, window: Window | None, where,
                   report: Report) -> bool:
    by_alias: dict[str, Relation] = {}
    for t in tables:
        relation = found[id(t)]
        for name in {t.name, t.alias_or_name, relation.name}:
            by_alias.setdefault(name.lower(), relation)
    windowed = found[id(next(t for t in tables if t.alias_or_name == window.source))] if window else None

    def has(relation: Relation, name: str) -> bool:
        return relation.column(name) is not None or (relation is windowed and name.lower() in WINDOW_COLUMNS)

    ok = True
    outputs = {p.alias_or_name.lower() for p in select.selects}
    for column in select.find_all(exp.Column):
        if isinstance(column.this, exp.Star):
            continue
        if column.table:
            relation = by_alias.get(column.table.lower())
            if relation is None:
                struct = any(found[id(t)].column(column.table) is not None for t in tables)
                report(Diagnostic("DSF-E040", f"unknown relation or alias '{column.table}'", where(column),
                                  hint=f"a field of the column '{column.table}' is {column.table}->{column.name}"
                                  if struct else did_you_mean(column.table, set(by_alias))))
                ok = False
            elif not has(relation, column.name):
                report(_unknown_column(column, relation, where))
                ok = False
            continue
        owners = [found[id(t)] for t in tables if has(found[id(t)], column.name)]
        if not owners and not (column.find_ancestor(exp.Group) and column.name.lower() in outputs):
            report(_unknown_column(column, found[id(tables[0])], where))
            ok = False
        elif len(owners) > 1:
            report(Diagnostic("DSF-E041", f"column '{column.name}' is ambiguous: both relations have it",
                              where(column), hint=f"qualify it, e.g. {tables[0].alias_or_name}.{column.name}"))
            ok = False
    return ok


def _unknown_column(column: exp.Column, relation: Relation, where) -> Diagnostic:
    return Diagnostic("DSF-E041", f"unknown column '{column.name}' in '{relation.fqn}'", where(column),
                      hint=did_you_mean(column.name, [c.name for c in relation.columns]))


def _qualified(select: exp.Select, tables: list[exp.Table], found: dict, window: Window | None,
               st: RawStatement, report: Report) -> exp.Select | None:
    mapping: dict = {}
    for table in tables:
        relation = found[id(table)]
        db, schema, name = relation.fqn.split(".")
        for part, value in zip(("catalog", "db", "this"), (db, schema, name), strict=True):
            table.set(part, exp.to_identifier(value))
        columns = {_schema_name(c.name, False): _schema_type(c.type) for c in relation.columns}
        if window and table.alias_or_name == window.source:
            columns |= {c: _schema_type("TIMESTAMP") for c in WINDOW_COLUMNS}
        names = [_schema_name(part, True) for part in (db, schema, name)]
        mapping.setdefault(names[0], {}).setdefault(names[1], {})[names[2]] = columns
    try:
        # built once for both passes, of names and types normalized once per process (normalize=False)
        schema = MappingSchema(mapping, dialect=DIALECT, normalize=False)
        # the declared result types are kept (overwrite_types=False): qualify leaves every other node untyped
        def annotate(node: exp.Expr) -> exp.Expr:
            return annotate_types(declare_result_types(node), schema=schema, dialect=DIALECT, overwrite_types=False)

        # one relation and the simple shape: qualify's effect in one walk (sql/simple.py), the same tree
        simple = len(tables) == 1 and window is None and QUALIFY_SIMPLE and qualify_simple(select, columns)
        qualified = type_map_subscripts(annotate(select if simple else qualify(select, schema=schema, dialect=DIALECT)),
                                        annotate)
        return cast(exp.Select, qualified)  # qualify and annotate_types return the tree they were given
    except OptimizeError as err:
        report(Diagnostic("DSF-E041", f"cannot resolve the SELECT: {err}", st.location))
        return None


def _column_types(tables: list[exp.Table], found: dict, window: Window | None) -> dict[tuple[str, str], exp.DataType]:
    """{(alias, column) in lower case: type} of the relations read: the type checker's (sql/typecheck.py) for a
    column sqlglot's annotation leaves untyped (inside a CAST, which it types without typing what it casts)."""
    types: dict[tuple[str, str], exp.DataType] = {}
    for table in tables:
        alias = table.alias_or_name.lower()
        for column in found[id(table)].columns:
            types[(alias, column.name.lower())] = _schema_type(column.type)
        if window and table.alias_or_name == window.source:
            types |= {(alias, c): _schema_type("TIMESTAMP") for c in WINDOW_COLUMNS}
    return types


@cache
def _schema_name(name: str, is_table: bool) -> str:
    """A relation or column name as sqlglot's MappingSchema normalizes it (memoized: the same names recur)."""
    return normalize_name(name, dialect=DIALECT, is_table=is_table).name


@cache
def _schema_type(text: str) -> exp.DataType:
    """A column type as MappingSchema builds it from its text (memoized, and shared between queries as
    MappingSchema shares it between the columns of one)."""
    built = exp.DataType.from_str(text, dialect=DIALECT, udt=DIALECT.SUPPORTS_USER_DEFINED_TYPES)
    return built.transform(DIALECT.normalize_identifier, copy=False)


def _join_equality(qualified: exp.Select, tables: list[exp.Table], where, st: RawStatement,
                   report: Report) -> bool:
    join = qualified.args["joins"][0]
    left, right = tables[0].alias_or_name, tables[1].alias_or_name
    for eq in join.args["on"].find_all(exp.EQ):
        sides = {c.table for c in map(base_column, (eq.this, eq.expression)) if c is not None}
        if sides == {left, right}:
            return True
    report(Diagnostic("DSF-E045", "a join needs an equality between the two relations in ON", where(join),
                      hint=f"e.g. ON {left}.userid = {right}.userid"))
    return False


def _aggregation(qualified: exp.Select, window: Window | None, where, st: RawStatement,
                 report: Report) -> tuple[bool, tuple[str, ...]] | None:
    """(aggregated, the output names of the GROUP BY columns), None on error."""
    group = qualified.args.get("group")
    aggregates = list(qualified.find_all(exp.AggFunc))
    for agg in aggregates:
        if not isinstance(agg, AGGREGATES) or (isinstance(agg.this, exp.Distinct) and
                                                  (not isinstance(agg, exp.Count) or len(agg.this.expressions) != 1)):
            report(Diagnostic("DSF-E045", f"aggregate {agg.sql(dialect=DIALECT)} is not supported yet", where(agg),
                              hint="supported: COUNT(*), COUNT(x), COUNT(DISTINCT x), SUM, MIN, MAX, AVG, "
                                   "MAX_BY(value, ordering), MIN_BY(value, ordering)"))
            return None
    if group is None:
        if window:
            report(Diagnostic("DSF-E046", "a window needs GROUP BY window_start, window_end", st.location,
                              hint="e.g. GROUP BY window_start, window_end, userid"))
            return None
        return grouping.global_aggregate(qualified, where, report) if aggregates else (False, ())
    return _group_keys(qualified, group, window, where, st, report)


def _group_keys(qualified: exp.Select, group: exp.Group, window: Window | None, where, st: RawStatement,
                report: Report) -> tuple[bool, tuple[str, ...]] | None:
    grouped: list[exp.Expr] = []
    for item in group.expressions:
        if not grouping.check_group_item(item, where, report):
            return None
        grouped.append(item)
    names = {(c.table, c.name) for c in grouped if isinstance(c, exp.Column)}
    grouped_sql = {group_key_sql(c) for c in grouped}
    if window and not all((window.source, w) in names for w in WINDOW_COLUMNS):
        report(Diagnostic("DSF-E046", "a window needs GROUP BY window_start, window_end", where(group),
                          hint="add window_start, window_end to the GROUP BY"))
        return None
    if not grouping.check_session_keys(window, grouped, group, where, report):
        return None
    keys = []
    for column in grouped:
        output = next((p.alias_or_name for p in qualified.selects
                       if group_key_sql(p.unalias()) == group_key_sql(column)), None)
        if output is None:
            report(Diagnostic("DSF-E046", f"GROUP BY column '{grouping.item_text(column)}' must be selected: it keys "
                              "the result", where(column), hint=f"add {grouping.item_text(column)} to the SELECT list"))
            return None
        keys.append(output)
    for projection in qualified.selects:
        loose = grouping.loose_columns(projection, grouped_sql, names)
        if loose:
            report(Diagnostic("DSF-E046", f"column '{loose[0].name}' must be in GROUP BY or inside an aggregate",
                              where(loose[0]), hint=f"add it to GROUP BY, or aggregate it, e.g. MAX({loose[0].name})"))
            return None
    return True, tuple(dict.fromkeys(keys))


def _output_columns(qualified: exp.Select, st: RawStatement, report: Report) -> tuple[Column, ...] | None:
    columns = []
    for projection in qualified.selects:
        type_ = (type_sql(projection.type) if projection.type and not projection.is_type(exp.DType.UNKNOWN)
                 else "VARCHAR")
        columns.append(Column(name=projection.alias_or_name, type=TYPE_ALIASES.get(type_, type_)))
    if st.kind != "insert" and any(c.name.startswith(UNNAMED) for c in columns):  # INSERT: named by position
        report(Diagnostic("DSF-E044", "every computed column needs a name", st.location,
                          hint="add AS name to each expression in the SELECT"))
        return None
    seen: set[str] = set()
    for column in columns if st.kind != "insert" else ():  # INSERT: named by position, then checked (DSF-E043)
        if column.name.lower() in seen:
            report(Diagnostic("DSF-E044", f"column '{column.name}' appears twice", st.location,
                              hint="rename one of them"))
        seen.add(column.name.lower())
    return tuple(columns)
