"""A join of more than two relations on Spark: a left-deep chain (sql/join_chain.py), each step a temporal join of
the rows so far with one more changelog.

The first join's rows come from `first_sql` (the stream's own rows for a temporal join first, Spark's interval join
otherwise, then one more Spark interval join per stream joined WITHIN after it, translate._interval_rows): __key,
__ts (event time: the first stream's, the only event-time column kept) and one struct column per relation, named by
its alias. Each step unions them
with the changelog's records, grouped by the join key, into the per-key state transition of the temporal join
(temporal.step): a row waits until the watermark reaches its event time, then joins the changelog's newest version
at or before it. Spark runs one applyInPandasWithState per query only, so every step is a
`transformWithStateInPandas` in event-time mode (state in RocksDB, in the checkpoint), with a timer per key at its
oldest waiting row.

A step fed by an earlier join takes its rows as they come (`chained`): the earlier step let them through already,
so none is late; rows of interval joins may be up to twice the sum of their WITHINs behind the watermark, so
versions are kept that far back (`horizon_ms`).

    joined_view(spark, spec)   creates the view `spec.view`: __key, __ts and one struct column per relation
"""

from __future__ import annotations

import json
from typing import Any

from dsflow.adapters.spark.retract_state import ROCKSDB, STATE_PROVIDER
from dsflow.adapters.spark.spec import ChainStepSpec, JoinChainSpec
from dsflow.adapters.spark.temporal import CHANGELOG, INTERNAL, STREAM, step

OUTPUT_SCHEMA = "key string, sv string, cv string"
STATE_SCHEMA = "versions string, pending string"
LEFT = "__left"


def _none(value: Any) -> Any:
    """pandas gives NaN/None for nulls; the state holds None."""
    return None if value is None or value != value else value


def _processor(spec: ChainStepSpec, horizon: int):
    """The StatefulProcessor of one step (made here: pyspark is imported only by a driver that needs it). It imports
    pandas where it makes a frame, not when unpickled (retract_state.processors says why)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    inner, chained = spec.side == "inner", spec.chained

    class TemporalStep(StatefulProcessor):
        """Keyed by the join key; its state is the changelog's versions and the rows waiting for the watermark."""

        def init(self, handle) -> None:
            self.handle = handle
            self.state = handle.getValueState("state", STATE_SCHEMA)

        def handleInputRows(self, key, rows, timerValues):
            found = [(int(s), _none(e), _none(o), _none(k), _none(sv), _none(cv)) for f in rows
                     for s, e, o, k, sv, cv in zip(f["side"], f["ets"], f["seq"], f["key"], f["sv"], f["cv"],
                                                   strict=True)]
            yield self._step(found, timerValues.getCurrentWatermarkInMs())

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            yield self._step([], timerValues.getCurrentWatermarkInMs())

        def _step(self, rows: list[tuple], watermark: int):
            import pandas as pd  # here, not when unpickled (_processor)
            versions, pending = ([], []) if not self.state.exists() else map(json.loads, self.state.get())
            versions, pending, out = step(list(versions), list(pending), rows, watermark, inner, chained, horizon)
            if versions or pending:
                self.state.update((json.dumps(versions), json.dumps(pending)))
            elif self.state.exists():
                self.state.clear()
            if pending:
                self.handle.registerTimer(min(p[0] for p in pending) - 1)  # fires once the watermark reaches it
            return pd.DataFrame(out, columns=["key", "sv", "cv"], dtype=object)

        def close(self) -> None:
            pass

    return TemporalStep()


def _joined(spark, frame, spec: ChainStepSpec, horizon: int):
    """`frame` (__key, __ts, one struct per relation) joined with the step's changelog: the same columns and one
    struct more, named by the changelog's alias."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    left_schema = StructType([f for f in frame.schema.fields if f.name != "__key"])
    changelog = spark.table(spec.changelog_view)

    def join_key(columns):
        return F.to_json(F.array(*[c.cast("string") for c in columns]))

    key_struct = F.col(f"`{spec.key_alias}`")
    left = frame.select(F.lit(STREAM).alias("side"), join_key([key_struct.getField(c) for c in spec.stream_keys])
                        .alias("jk"), F.unix_millis("__ts").alias("ets"), F.lit(0).cast("long").alias("seq"),
                        F.col("__key").alias("key"),
                        F.to_json(F.struct(*[F.col(f"`{n}`") for n in left_schema.fieldNames()])).alias("sv"),
                        F.lit(None).cast("string").alias("cv"))
    row = F.to_json(F.struct(*[F.col(f"`{c}`") for c in changelog.columns if c not in INTERNAL]))
    right = changelog.select(F.lit(CHANGELOG).alias("side"),
                             join_key([F.col(f"`{c}`") for c in spec.changelog_keys]).alias("jk"),
                             F.unix_millis("__ts").alias("ets"), F.col("__offset").alias("seq"),
                             F.lit(None).cast("string").alias("key"), F.lit(None).cast("string").alias("sv"),
                             F.when(~F.col("__deleted"), row).alias("cv"))
    joined = (left.unionByName(right).groupBy("jk")
              .transformWithStateInPandas(_processor(spec, horizon), OUTPUT_SCHEMA, "append", "EventTime"))
    return (joined.select(F.col("key").alias("__key"), F.from_json("sv", left_schema).alias(LEFT),
                          F.from_json("cv", spec.changelog_ddl).alias(spec.changelog_alias))
            .select("__key", f"{LEFT}.*", f"`{spec.changelog_alias}`"))


def joined_view(spark, spec: JoinChainSpec) -> None:
    """Create the view `spec.view` from the source views: the first join's rows, then each step's."""
    spark.conf.set(STATE_PROVIDER, ROCKSDB)  # transformWithState keeps its state in RocksDB only
    frame = spark.sql(spec.first_sql)
    for chained in spec.steps:
        frame = _joined(spark, frame, chained, spec.horizon_ms)
    frame.createOrReplaceTempView(spec.view)
