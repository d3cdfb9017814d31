"""A UNION ALL of streams in Spark (sql/unions.py): each branch translated as a query of its own source, over
that source's view, carrying its own record key; Spark unions the streams and checkpoints each source's offsets."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

import sqlglot
from sqlglot import exp

from dsflow.core.model import Project, Query
from dsflow.sql.parse import DIALECT, parse_one_select
from dsflow.sql.unions import union_branches


def union_select(query: Query, project: Project | None, translate: Callable[[Query, Project | None], str],
                 view: Callable[[int, Query], str]) -> str | None:
    """The Spark SQL of a UNION ALL query, or None if the query is no UNION ALL."""
    if "UNION ALL" not in query.select_sql.upper():
        return None
    union = parse_one_select(query.select_sql)
    if not isinstance(union, exp.Union):
        return None
    parts = []
    for index, (branch, source) in enumerate(zip(union_branches(union), query.sources, strict=True)):
        one = query.model_copy(update={"select_sql": branch.sql(dialect=DIALECT), "sources": (source,),
                                       "expectations": ()})  # checked on the union's rows (spark/expectations.py)
        select = sqlglot.parse_one(translate(one, project), read="spark")
        for table in select.find_all(exp.Table):
            table.set("this", exp.to_identifier(view(index, query)))
        parts.append(select)
    return reduce(lambda left, right: exp.union(left, right, distinct=False), parts).sql(dialect="spark")
