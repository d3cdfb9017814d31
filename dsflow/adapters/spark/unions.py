"""A UNION ALL of streams in Spark (sql/unions.py): each branch translated as a query of its own source, over
that source's view, carrying its own record key; Spark unions the streams and checkpoints each source's offsets."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

from sqlglot import exp

from dsflow.core.model import Project, Query
from dsflow.sql.plan import QueryPlan


def union_select(plan: QueryPlan, project: Project | None,
                 translate: Callable[[QueryPlan, Project | None], exp.Query],
                 view: Callable[[int, Query], str]) -> exp.Query:
    """The Spark SQL of a UNION ALL query (its plan's `branches`, each translated by `translate`)."""
    parts = []
    for index, branch in enumerate(plan.branches):
        select = translate(branch, project)
        for table in select.find_all(exp.Table):
            table.set("this", exp.to_identifier(view(index, plan.query)))
        parts.append(select)
    return reduce(lambda left, right: exp.union(left, right, distinct=False), parts)
