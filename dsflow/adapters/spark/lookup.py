"""A processing-time temporal join on Spark (sql/proctime.py): the changelog read whole, as a bounded table, at
every micro-batch, and joined with the micro-batch's rows (Spark's stream-static join, INNER or LEFT).

Spark plans a streaming query's static side once and runs that plan again for each micro-batch, so the table is
read by a reader that finds its offsets when it runs (the store's `table` reader, core/protocol.py): each
micro-batch joins the changelog as it is when the micro-batch runs, its newest record per key, deleted keys left out.
"""

from __future__ import annotations

from typing import Any

from dsflow.adapters.spark.frames import DELETED, KEY, OFFSET, source_view
from dsflow.adapters.spark.spec import QuerySpec, SourceSpec


def bounded_view(spark: Any, spec: QuerySpec, source: SourceSpec, facet: Any) -> Any:
    """The changelog's rows now: its newest record per key, tombstones (deletes) left out."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    table = getattr(facet, "table", None)
    if table is None or not source.changelog_key:
        raise ValueError(f"a source of kind {source.kind!r} has no reader of whole tables (its facet's `table`), "
                         "so a processing-time join (FOR SYSTEM_TIME AS OF PROCTIME()) cannot read it (validate "
                         "refuses a store without Capability.WHOLE_READ: DSF-E262; `dsflow test` has no such reader)")
    rows = source_view(table(spark, spec, source), source)
    newest = Window.partitionBy(KEY).orderBy(F.col(OFFSET).desc())
    return (rows.withColumn("__newest", F.row_number().over(newest))
            .where(F.col("__newest") == 1).where(~F.col(DELETED)).drop("__newest", DELETED, OFFSET))
