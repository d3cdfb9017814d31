"""CREATE VIEW name AS SELECT ...: a view that is not materialized (DeltaStream's and Flink's CREATE VIEW).

A view is a named SELECT: nothing is deployed for it (no topic, no query of its own). Each statement that reads it
gets the view's SELECT as a CTE of its own, `WITH name AS (<the view's SELECT>) <its SELECT>`, before its SELECT is
resolved; sql/ctes.py then inlines it as it inlines any CTE (a projection and filter of one relation, or a join read
as the one relation of a SELECT). A view may read another view (its CTEs come first). The reader's Query lists the
views it reads (`Query.views`) and its select_sql holds their SQL, so a change to a view changes those queries.

Refused: a view whose name is a relation's, or that is created twice (DSF-E020); one that reads a relation or view
the project does not have (DSF-E040, at the view); a view that reads itself, even through other views (DSF-E050).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sqlglot import exp

from dsflow.core.model import View
from dsflow.core.suggest import relation_hint
from dsflow.errors import Diagnostic
from dsflow.sql.dialect import is_window
from dsflow.sql.filecache import DeferredSelect
from dsflow.sql.parse import DIALECT, RawStatement

Report = Callable[[Diagnostic], None]
Qualify = Callable[[tuple[str, ...] | list[str]], str]


def declared_views(statements: list[tuple[str, RawStatement]], relations: set[str], qualify: Qualify,
                   report: Report) -> dict[str, RawStatement]:
    """The CREATE VIEW statements by fqn, each checked (what it reads exists; no cycle, no clash)."""
    views: dict[str, RawStatement] = {}
    for _, st in statements:
        if st.kind != "view":
            continue
        fqn = qualify(st.name)
        if fqn in relations or fqn in views:
            first = views[fqn].location if fqn in views else "a relation of that name"
            report(Diagnostic("DSF-E020", f"view '{fqn}' is defined twice", st.location,
                              hint=f"first defined at {first}: rename the view"))
            continue
        views[fqn] = st
    refused: set[str] = set()
    for fqn, st in views.items():
        unknown = [qualify(p) for p in st.source_parts if qualify(p) not in relations and qualify(p) not in views]
        for name in unknown:
            report(Diagnostic("DSF-E040", f"the view '{fqn}' reads the unknown relation '{name}'", st.location,
                              hint=relation_hint(name.rsplit(".", 1)[-1], relations), subject=f"relation.{name}"))
        if fqn in _reads(fqn, views, qualify, set()):
            report(Diagnostic("DSF-E050", f"dependency cycle: the view '{fqn}' reads itself", st.location,
                              hint="a view cannot read itself, even through other views"))
            unknown.append(fqn)
        if unknown:
            refused.add(fqn)
    return {fqn: st for fqn, st in views.items() if fqn not in refused}


def _reads(fqn: str, views: dict[str, RawStatement], qualify: Qualify, seen: set[str]) -> list[str]:
    """The views `fqn` reads, directly or through other views, each once, the deepest first."""
    found: list[str] = []
    for parts in views[fqn].source_parts:
        name = qualify(parts)
        if name in views and name not in seen:
            seen.add(name)
            found += [*_reads(name, views, qualify, seen), name]
    return found


def view_models(views: dict[str, RawStatement], qualify: Qualify) -> tuple[View, ...]:
    """The views as the project holds them."""
    return tuple(View(fqn=fqn, select_sql=st.extra["view_select"].sql(dialect=DIALECT),
                      sources=tuple(dict.fromkeys(qualify(p) for p in st.source_parts)), location=st.location)
                 for fqn, st in views.items())


def with_views(st: RawStatement, views: dict[str, RawStatement], qualify: Qualify) -> RawStatement:
    """`st` reading its views' SELECTs as CTEs (its text, what it reads and `extra["views"]` to match); `st` itself
    if it reads no view."""
    if not st.is_query or not views:
        return st
    direct = [qualify(p) for p in st.source_parts if qualify(p) in views]
    if not direct:
        return st
    read: list[str] = []
    for fqn in dict.fromkeys(direct):
        read += [v for v in [*_reads(fqn, views, qualify, set()), fqn] if v not in read]
    select = (st.select.tree() if isinstance(st.select, DeferredSelect) else st.select).copy()
    for table in select.find_all(exp.Table):  # a qualified reference reads the CTE by its bare name
        if not is_window(table) and qualify([p.name for p in table.parts]) in read and table.db:
            alias = table.alias_or_name
            table.replace(exp.Table(this=exp.to_identifier(table.name),
                                    alias=exp.TableAlias(this=exp.to_identifier(alias))))
    place = next((dict(t.meta) for t in select.find_all(exp.Table) if qualify([p.name for p in t.parts]) in direct),
                 {})
    ctes = [exp.CTE(this=_placed(_tree(views[fqn]).copy(), place),
                    alias=exp.TableAlias(this=exp.to_identifier(views[fqn].name[-1]))) for fqn in read]
    existing = select.args.get("with_")
    select.set("with_", exp.With(expressions=[*ctes, *(existing.expressions if existing is not None else [])]))
    parts = [p for p in st.source_parts if qualify(p) not in views]
    parts += [p for fqn in read for p in views[fqn].source_parts if qualify(p) not in views]
    text = "\0".join([st.text, *(views[fqn].text for fqn in read)])
    return replace(st, select=select, text=text, source_parts=tuple(dict.fromkeys(parts)),
                   extra={**st.extra, "views": tuple(read)})


def _tree(st: RawStatement) -> exp.Query:
    return st.extra["view_select"]


POSITION = ("line", "col", "start", "end")


def _placed(tree: exp.Query, place: dict) -> exp.Query:
    """The view's SELECT with every node at the place of the reader's reference to the view: a problem found in it
    is reported where the reading statement reads the view (its own file and line)."""
    for node in tree.walk():
        for key in POSITION:
            node.meta.pop(key, None)
        node.meta.update({k: place[k] for k in POSITION if k in place})
    return tree
