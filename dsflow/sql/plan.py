"""The typed query plan: one resolved query as the front end hands it to an engine's translator.

The loader resolves a query's SELECT (sql/select.py and the shape modules beside it) and keeps the result in the model:
the SELECT's text (`Query.select_sql`, which the load cache keeps, so a fully cached load never imports sqlglot) and
the parts of its shape (window, joins, top-N, OVER, subqueries). `lower` turns such a query into a `QueryPlan`, once
per query, at translate time: the text parsed once, typed against its source relations' columns, its shape named, the
parts of a union, of its windowed subqueries and of its aggregating subquery lowered in turn. The translator
(adapters/spark/translate.py and its neighbours) reads the plan only: it never parses the query's SQL nor works out
its shape or types again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

from sqlglot import exp

from dsflow.core.model import (
    ChainedChangelogJoin, ChangelogJoin, Column, IntervalJoin, Nested, OverWindow, Project, Query, Source,
    TemporalJoin, TopN, Window,
)
from dsflow.sql.parse import DIALECT, parse_one_select
from dsflow.sql.unions import union_branches

Shape = Literal["union", "nested", "stacked", "top_n", "over", "changelog_join", "join_chain", "temporal_join",
                "interval_join", "regular_join", "aggregation", "projection"]
"""The recognised kinds of query, most specific first (`shape`): a UNION ALL of streams (sql/unions.py); a query over
windowed subqueries (sql/nested.py); an aggregation of an aggregating subquery (sql/stacked.py); a ROW_NUMBER top-N
(sql/topn.py); bounded OVER aggregates (sql/over.py); a join of changelogs, or of streams keyed for an aggregation
(sql/changelog_join.py, sql/keyed_join.py); a chain of joins that starts with a stream (sql/join_chain.py); a stream
joined with a changelog (sql/temporal.py); an interval join of streams (WITHIN); a join of streams without WITHIN; a
GROUP BY or window aggregation; a projection or filter of one relation."""


@dataclass(frozen=True)
class QueryPlan:
    """A query lowered for a translator: what it is, what it reads and writes, and its resolved, typed SELECT.

    `tree` is shared by every reader of the plan: a translator that rewrites it takes `select()`, a copy."""

    query: Query
    """The model the plan was lowered from (its sink, settings and keys)."""
    shape: Shape
    """Which recognised kind of query it is (`Shape`)."""
    tree: exp.Query
    """The resolved SELECT (a UNION of them for a union), over fully qualified relations; typed (`typed`): its nodes
    carry sqlglot's types from the sources' columns."""
    typed: bool
    """Whether `tree` carries types: lowered with the project whose relations it reads, and its SELECT has a
    subscript, the one construct whose meaning depends on its operand's type (an array's counts from 1, a map's is
    a key). A tree without one is left untyped: typing it costs more than parsing it."""
    columns: tuple[Column, ...]
    """The output columns, with their types, as the front end resolved them."""
    sources: tuple[Source, ...]
    """The relations it reads with their aliases, in FROM order (a union: branch order)."""
    join_sides: tuple[str, ...]
    """Each JOIN of the SELECT's FROM, in order: its side (LEFT, RIGHT, FULL) or "" for an inner join."""
    source_windows: tuple[Window | None, ...]
    """For each source, the window its rows are grouped by as they are read: the query's, or the one of the
    windowed subquery that reads it; none for a stream joined with a windowed subquery and none below an interval
    join (its window is over the joined rows: sql/windowed_join.py)."""
    conditions: tuple[exp.Select, ...]
    """Each expectation's condition (`query.expectations`, in order) as `SELECT <condition>`."""
    branches: tuple[QueryPlan, ...] = ()
    """A union's branches, each a query of its own source (its expectations are checked on the union's rows)."""
    nested: tuple[QueryPlan, ...] = ()
    """The windowed subqueries (`query.nested`, in order), each a query of its own sources, in append mode."""
    stacked: QueryPlan | None = None
    """The aggregating subquery (`query.stacked`) as a query of its own, in update mode."""

    def select(self) -> exp.Query:
        """A copy of `tree` to rewrite."""
        return self.tree.copy()

    @property
    def window(self) -> Window | None:
        return self.query.window

    @property
    def join_within(self) -> str | None:
        return self.query.join_within

    @property
    def temporal_join(self) -> TemporalJoin | None:
        return self.query.temporal_join

    @property
    def changelog_join(self) -> ChangelogJoin | None:
        return self.query.changelog_join

    @property
    def join_chain(self) -> tuple[IntervalJoin | TemporalJoin | ChainedChangelogJoin, ...]:
        return self.query.join_chain

    @property
    def stream_chain(self) -> bool:
        """A chain of joins that starts with a stream (sql/join_chain.py); a chain of changelogs is a changelog
        join's."""
        return bool(self.query.join_chain) and self.query.changelog_join is None

    @property
    def top_n(self) -> TopN | None:
        return self.query.top_n

    @property
    def over(self) -> OverWindow | None:
        return self.query.over

    def nested_plan(self, name: str) -> tuple[Nested, QueryPlan] | None:
        """The windowed subquery the SELECT reads as the table `name` (case-insensitive), with its plan."""
        for nested, plan in zip(self.query.nested, self.nested, strict=True):
            if nested.name.lower() == name.lower():
                return nested, plan
        return None


def lower(query: Query, project: Project | None = None) -> QueryPlan:
    """The query's plan: its SELECT parsed once and, with the `project` its sources belong to, typed. The one place
    a query's SQL is parsed after loading (a fully cached load keeps the text only)."""
    tree = parse_one_select(query.select_sql)
    typed = project is not None and not query.nested and tree.find(exp.Bracket) is not None \
        and _typed(tree, query, project)
    branches: tuple[QueryPlan, ...] = ()
    if isinstance(tree, exp.Union):
        branches = tuple(lower(_branch(query, branch, source), project)
                         for branch, source in zip(union_branches(tree), query.sources, strict=True))
    nested = tuple(lower(subquery(query, n), project) for n in query.nested)
    stacked = lower(stacked_query(query), project) if query.stacked is not None else None
    joins = (tree.args.get("joins") or []) if isinstance(tree, exp.Select) else []
    return QueryPlan(
        query=query, shape=shape(query, tree), tree=tree, typed=typed, columns=query.output_columns,
        sources=query.sources, join_sides=tuple((j.side or "").upper() for j in joins),
        source_windows=_source_windows(query, tree), conditions=tuple(
            cast(exp.Select, parse_one_select(f"SELECT {rule.condition}")) for rule in query.expectations),
        branches=branches, nested=nested, stacked=stacked)


def shape(query: Query, tree: exp.Expr) -> Shape:
    """The most specific recognised kind the resolved query is (`Shape`)."""
    parts: tuple[tuple[object, Shape], ...] = (
        (isinstance(tree, exp.Union), "union"), (query.nested, "nested"), (query.stacked, "stacked"),
        (query.top_n, "top_n"), (query.over, "over"), (query.changelog_join, "changelog_join"),
        (query.join_chain, "join_chain"), (query.temporal_join, "temporal_join"), (query.join_within, "interval_join"),
        (query.regular_joins, "regular_join"), (query.stateful or query.window, "aggregation"))
    return next((kind for present, kind in parts if present), "projection")


def subquery(query: Query, nested: Nested) -> Query:
    """A windowed subquery as a query of its own: the query's name and settings, its SELECT, sources and window, in
    append mode (each window once, when the watermark closes it)."""
    return query.model_copy(update={
        "select_sql": nested.select_sql, "sources": nested.sources, "output_columns": nested.output_columns,
        "window": nested.window, "key_columns": nested.key_columns, "output_mode": "append", "nested": nested.nested,
        "join_within": None, "temporal_join": None, "changelog_join": None, "join_chain": (), "deletes": "none",
        "expectations": ()})


def stacked_query(query: Query) -> Query:
    """The aggregating subquery as a query of its own (the query's name, so its sources' and its join's names are the
    query's), in update mode."""
    stacked = query.stacked
    assert stacked is not None  # its callers check
    return query.model_copy(update={
        "select_sql": stacked.select_sql, "sources": stacked.sources, "output_columns": stacked.output_columns,
        "key_columns": stacked.key_columns, "changelog_join": stacked.changelog_join, "stacked": None,
        "output_mode": "update", "expectations": ()})


def _branch(query: Query, branch: exp.Expr, source: Source) -> Query:
    """A union's branch as a query of its own source; its expectations are checked on the union's rows."""
    return query.model_copy(update={"select_sql": branch.sql(dialect=DIALECT), "sources": (source,),
                                    "expectations": ()})


def _typed(tree: exp.Query, query: Query, project: Project) -> bool:
    """Annotate `tree` (in place) with sqlglot's types from the columns of the query's source relations."""
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.schema import MappingSchema

    mapping: dict = {}
    for source in query.sources:
        relation = project.relation(source.relation)
        assert relation is not None  # a loaded project's sources name its relations
        database, schema, name = relation.fqn.split(".")
        mapping.setdefault(database, {}).setdefault(schema, {})[name] = {c.name: c.type for c in relation.columns}
    annotate_types(tree, schema=MappingSchema(mapping, dialect=DIALECT), dialect=DIALECT)
    return True


def _source_windows(query: Query, tree: exp.Expr) -> tuple[Window | None, ...]:
    """The window each source's rows are grouped by as they are read (`QueryPlan.source_windows`)."""
    if query.join_within is not None:
        return (None,) * len(query.sources)
    if not query.nested:
        return (query.window,) * len(query.sources)
    by_name = {n.name.lower(): n for n in query.nested}
    windows: list[Window | None] = []
    for table in tree.find_all(exp.Table):
        nested = by_name.get(".".join(p.name for p in table.parts).lower())
        if nested is None:  # a stream joined with a windowed subquery
            windows.append(None)
            continue
        windows += [nested.window if s.alias == nested.window.source else None for s in nested.sources]
    return tuple(windows[:len(query.sources)]) + (None,) * (len(query.sources) - len(windows))
