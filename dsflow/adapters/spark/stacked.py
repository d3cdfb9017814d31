"""An aggregation of an aggregating subquery (sql/stacked.py, Nexmark q4) on Spark: one query, one checkpoint.

The subquery is aggregated with retractions (adapters/spark/retract.py: two transformWithState stages) over what
it reads: a changelog, a join (adapters/spark/changelog_join.py, streams keyed by their records' place), or a
stream (each record a row keyed by its place, never deleted). Its result, one row per group a batch changed (a
delete, __keep false, when a group empties), is the changelog view `__stacked_<query>`: its columns, __offset 0
(retract.py emits a group at most once a batch) and __deleted. The query's own GROUP BY reads that view as it reads
any changelog (retract.py again), so an inner group's old row is retracted from its outer group when it changes.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.core.model import Project, Query
from dsflow.sql.plan import QueryPlan
from dsflow.adapters.spark.changelog_join import aggregated_source, view_name as join_view
from dsflow.adapters.spark.frames import DELETED, KEEP, OFFSET, PARTITION
from dsflow.adapters.spark.retract import changelog_source, rewrite
from dsflow.adapters.spark.spec import StackedSpec


def view_name(fqn: str) -> str:
    return f"__stacked_{fqn.replace('.', '_')}"


def stacked_spec(project: Project, plan: QueryPlan, over_views: Callable[[QueryPlan, Project], exp.Select],
                 join_spec: Callable) -> StackedSpec | None:
    """The subquery's stages (its plan's `stacked`; `over_views`: a plan's SELECT over its source views; `join_spec`:
    its join's)."""
    if plan.stacked is None:
        return None
    query, inner = plan.query, plan.stacked.query
    select = over_views(plan.stacked, project)
    first = inner.sources[0]
    relation = project.relation(first.relation)
    assert relation is not None  # a loaded project's sources name its relations
    if inner.changelog_join is not None:
        source = aggregated_source(select, join_view(inner.fqn))
    elif relation.kind == "changelog":
        source = changelog_source(first.alias, relation.primary_key)
    else:  # a stream: each record a row of its own, keyed by its place
        key = exp.func("TO_JSON", exp.func("ARRAY", *[exp.cast(exp.column(c, table=first.alias), "STRING")
                                                       for c in (PARTITION, OFFSET)]))
        source = (key, exp.column(OFFSET, table=first.alias), exp.true())
    per_change, retract = rewrite(select, source, f"__retract_inner_{query.fqn.replace('.', '_')}")
    return StackedSpec(view=view_name(query.fqn), select_sql=per_change, retract=retract,
                       changelog_join=join_spec(project, inner))


def outer_select(select: exp.Select, query: Query) -> tuple[exp.Expr, exp.Expr, exp.Expr]:
    """The query's SELECT (over its source views) made to read the subquery's changelog view, and what retract.py's
    stage 1 reads of it (`changelog_source`)."""
    assert query.stacked is not None
    table = select.args["from_"].this
    table.set("this", exp.to_identifier(view_name(query.fqn)))
    return changelog_source(table.alias_or_name, query.stacked.key_columns)


def stacked_view(spark, spec: StackedSpec) -> None:
    """Create the subquery's changelog view (spec.view), its join's view first."""
    from pyspark.sql import functions as F

    from dsflow.adapters.spark.retract import retracted_view

    if spec.changelog_join is not None:
        from dsflow.adapters.spark.changelog_join import joined_view

        joined_view(spark, spec.changelog_join)
    retracted_view(spark, spec.retract, spark.sql(spec.select_sql))
    rows = spark.sql(spec.retract.post_sql)
    rows.select(*[F.col(f"`{c}`") for c in rows.columns if c != KEEP], F.lit(0).cast("long").alias(OFFSET),
                (~F.col(KEEP)).alias(DELETED)).createOrReplaceTempView(spec.view)
