"""A query in Spark's real-time mode ('trigger' = 'realtime', load/realtime.py says what it may be).

Spark (4.1 and later) runs a real-time query as long batches whose tasks process each record as it arrives; the
trigger interval is how often the query checkpoints. Python data sources are not supported in it, so the sources
and the sink are read and written by Spark's own connector, asked of the store's `spark` facet (`realtime_conf`,
`realtime_stream`, `realtime_start`). The source view, the SELECT and the sink's (key, value) rows are dsflow's own
(adapters/spark/frames.py), so the records are those a micro-batch query writes. The sink is at-least-once: a
stop interrupts the running batch, whose records may be written again from the last checkpoint. So a blue/green
deployment builds a new version in real-time mode in micro-batches, and first restarts a deployed one in
micro-batches (`in_micro_batches`: from its recorded spec, its SQL being no longer the project's; engine/bluegreen.py).
"""

from __future__ import annotations

from typing import Any

from dsflow.adapters.spark.facets import for_kind
from dsflow.adapters.spark.spec import SOURCE_TIMESTAMP, QuerySpec


def _facet(kind: str) -> Any:
    facet = for_kind(kind)
    if facet is None or not hasattr(facet, "realtime_stream"):
        raise ValueError(f"no store of kind {kind!r} runs in real-time mode")
    return facet


def session_conf(conf: dict[str, str], sink_kind: str) -> dict[str, str]:
    """The session conf with the connector's jars added (spark.jars, after any the project lists)."""
    extra = _facet(sink_kind).realtime_conf()
    jars = ",".join(j for j in (conf.get("spark.jars"), extra.pop("spark.jars", None)) if j)
    return {**conf, **extra, **({"spark.jars": jars} if jars else {})}


def start(spec: QuerySpec, frame: Any) -> Any:
    """Start the query writing `frame` (driver.py `build_dataframe`) in real-time mode (its checkpoint every trigger
    interval)."""
    return _facet(spec.sink.kind).realtime_start(spec, frame, {"realTime": spec.trigger_interval})


def stream(spark, spec: QuerySpec, source) -> Any:
    """One source read by its store's connector: key and value as text, partition, offset, timestamp."""
    return _facet(source.kind).realtime_stream(spark, spec, source)


def in_micro_batches(spec: QuerySpec, dlq_topic: str) -> QuerySpec:
    """A real-time query's spec as translate.py `query_spec` makes it for the same query in micro-batches: read by
    dsflow's own source without its records' timestamps, undecodable records to `dlq_topic` (the project's default
    for the query: a real-time query sets none, load/realtime.py), its SELECT without the source timestamp column,
    the connector's session conf taken out; checkpointed synchronously (it runs until a blue/green cut)."""
    from sqlglot import exp, parse_one

    extra = _facet(spec.sink.kind).realtime_conf()
    jars = extra.pop("spark.jars", "")
    conf = {k: v for k, v in spec.spark_conf.items() if k not in extra}
    kept = ",".join(j for j in conf.pop("spark.jars", "").split(",") if j and j not in jars.split(","))
    conf |= {"spark.jars": kept} if kept else {}
    select = parse_one(spec.select_sql, dialect="spark")
    assert isinstance(select, exp.Select)  # a real-time query's: one stateless SELECT (translate.py)
    select.set("expressions", [c for c in select.expressions if c.alias_or_name != SOURCE_TIMESTAMP])
    return spec.model_copy(update={
        "realtime": False, "spark_conf": conf, "async_checkpoint": False, "select_sql": select.sql(dialect="spark"),
        "sources": [s.model_copy(update={"keep_timestamp": False, "dlq_topic": dlq_topic}) for s in spec.sources]})
