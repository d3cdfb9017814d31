"""An aggregation of an aggregation (Nexmark q4): a GROUP BY over a subquery in FROM that aggregates without a window.

    SELECT Q.category, AVG(Q.final)
    FROM (SELECT MAX(B.price) AS final, A.category
          FROM auction A, bid B WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
          GROUP BY A.id, A.category) Q
    GROUP BY Q.category

The subquery is resolved by the same code as a query (sql/select.py): a GROUP BY (or an aggregate without one) of a
stream, a changelog, a join of changelogs, or a regular join of two streams (sql/keyed_join.py). Its result is a
changelog keyed by its GROUP BY columns, updated as its groups change; the query reads it as that changelog (a
table named `__stacked_<alias>`: core/model.py Stacked), so its own GROUP BY is one over a changelog, with
retractions: a group's old row is taken out of the outer aggregate when the group changes (q4: an auction's MAX
grows, and the category's AVG takes its old MAX out). Both run in the same Spark query (adapters/spark/stacked.py).

A GROUP BY column the subquery does not select (q4's A.id) still keys its result: it is selected under a hidden
name (`__group<i>`), which the query around it does not see.

Refused with DSF-E045: a subquery that does not aggregate, aggregates a window (sql/nested.py runs those), reads a
subquery itself, or is joined with anything; a query over it that does not aggregate (GROUP BY or an aggregate).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sqlglot import exp

from dsflow.core.model import Relation, Stacked
from dsflow.errors import Diagnostic
from dsflow.sql.dialect import is_window
from dsflow.sql.parse import node_location
from dsflow.sql.statements import Analysed, RawStatement

Report = Callable[[Diagnostic], None]
PREFIX = "__stacked_"
HIDDEN = "__group"
HINT = ("a subquery in FROM that aggregates (GROUP BY, without a window) is read by a query that aggregates it: "
        "SELECT k, AVG(m) FROM (SELECT k, MAX(x) AS m FROM rel GROUP BY id, k) q GROUP BY k; else write the "
        "subquery as its own CREATE CHANGELOG ... AS SELECT and read that changelog")


def reads_aggregation(select: exp.Expr) -> bool:
    """Whether a SELECT reads FROM one subquery that aggregates without a window, and nothing else."""
    if not isinstance(select, exp.Select) or select.args.get("from_") is None or select.args.get("joins"):
        return False
    item = select.args["from_"].this
    body = item.this if isinstance(item, exp.Subquery) else None
    if not isinstance(body, exp.Select) or body.args.get("from_") is None or is_window(body.args["from_"].this):
        return False
    return body.args.get("group") is not None or any(p.find(exp.AggFunc) for p in body.selects)


def is_stacked(relation: Relation) -> bool:
    """Whether a relation stands for an aggregating subquery in the SELECT that reads it."""
    return relation.name.startswith(PREFIX)


def analyse_stacked(path: str, st: RawStatement, select: exp.Select, relations: dict[str, Relation], qualify_name,
                    report: Report, analyse) -> Analysed | None:
    """Resolve a GROUP BY over an aggregating subquery (`analyse` resolves each SELECT); None if reported."""
    where = lambda node: node_location(path, node, st.location)  # noqa: E731
    item = select.args["from_"].this
    assert isinstance(item, exp.Subquery) and isinstance(item.this, exp.Select)  # reads_aggregation
    alias = item.alias_or_name
    problem = _outer_problem(select, item, alias)
    if problem is not None:
        report(Diagnostic("DSF-E045", problem, where(item), hint=HINT))
        return None
    _select_groups(item.this)
    inner = analyse(path, replace(st, select=item.this), relations, qualify_name, report, copy=False)
    if inner is None:
        return None
    if inner.window is not None or inner.nested or inner.stacked is not None or inner.top_n is not None \
            or inner.join_within is not None or inner.temporal is not None or inner.chain:
        report(Diagnostic("DSF-E045", f"the subquery '{alias}' must be a GROUP BY without a window, of a relation or "
                          "of a join of two relations, to be aggregated by the query around it", where(item),
                          hint=HINT))
        return None
    name = qualify_name((f"{PREFIX}{alias.lower()}",))
    stand_in = Relation(fqn=name, kind="changelog", columns=inner.columns, primary_key=inner.group_keys, store="",
                        topic="")
    item.replace(exp.Table(this=exp.to_identifier(name.rsplit(".", 1)[-1]),
                           alias=exp.TableAlias(this=exp.to_identifier(alias))))
    outer = analyse(path, replace(st, select=select), relations | {name: stand_in}, _qualifier(qualify_name, name),
                    report, copy=False)
    if outer is None:
        return None
    stacked = Stacked(alias=alias, name=name, select_sql=inner.select_sql, sources=inner.sources,
                      output_columns=inner.columns, key_columns=inner.group_keys,
                      changelog_join=inner.changelog_join)
    return replace(outer, sources=inner.sources, stacked=stacked, regular=inner.regular)


def _outer_problem(select: exp.Select, item: exp.Subquery, alias: str) -> str | None:
    if not alias:
        return "a subquery in FROM needs an alias"
    if select.args.get("group") is None and not any(p.find(exp.AggFunc) for p in select.selects):
        return (f"a query over the aggregating subquery '{alias}' must aggregate it (GROUP BY): reading an "
                "aggregation's rows as they change is not supported yet")
    if item.this.find(exp.Subquery) is not None:
        return f"the subquery '{alias}' reads a subquery: nesting deeper is not supported yet"
    return None


def _select_groups(inner: exp.Select) -> None:
    """Each GROUP BY column the subquery does not select, selected under a hidden name (it keys the result)."""
    selected = {p.unalias().sql().lower() for p in inner.selects}
    group = inner.args.get("group")
    for index, item in enumerate(group.expressions if group is not None else []):
        if item.sql().lower() not in selected and not (isinstance(item, exp.Literal) and item.is_int):
            inner.select(exp.alias_(item.copy(), f"{HIDDEN}{index}"), copy=False)


def _qualifier(qualify_name, name: str):
    """`qualify_name` that also knows the stand-in's name (written without database and schema)."""
    short = name.rsplit(".", 1)[-1].lower()

    def qualify(parts) -> str:
        parts = tuple(parts)
        return name if len(parts) == 1 and parts[0].lower() == short else qualify_name(parts)

    return qualify
