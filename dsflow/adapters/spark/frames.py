"""What a query adds around its SQL: event time and windows on source views, keys and sinks on the result.

    source_view   the parsed records of one source, with __ts (event time, watermarked) and __window
                  when the query needs them
    sink_frame    (key, value) rows for a log (a topic, a stream): the key is the source key carried through,
                  or built from the sink's key columns (one column as text, a NULL as '{"col":null}' (formats/keys.py
                  null_key_text), several as a JSON object)
    start_view    a materialized view: foreachBatch into its table, one transaction per micro-batch

Which store a source or sink is in is asked of its `spark` facet (facets.py); nothing here names a store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsflow.adapters.spark.facets import for_kind
from dsflow.adapters.spark.gate import spark_query_name
from dsflow.adapters.spark.spec import RECORD_TIMESTAMP, SOURCE_TIMESTAMP, QuerySpec, SinkSpec, SourceSpec
from dsflow.formats.keys import null_key_text

KEY = "__key"
DELETED = "__deleted"
OFFSET = "__offset"
PARTITION = "__partition"
KEEP = "__keep"


def source_view(raw, source: SourceSpec):
    """The source's rows as its temp view sees them: __key, the value's columns, and event time if needed."""
    from pyspark.sql import functions as F

    offset = F.col("offset") if "offset" in raw.columns else F.lit(0).cast("long")
    value, deleted = _value_columns(source)
    cdc_key = source.options.get("key.fields")  # a change stream read as a changelog (spark/cdc.py)
    position = [F.col("partition").alias(PARTITION)] if source.keep_position else []
    parsed = raw.select(F.col("key").alias(KEY), value.alias("__v"),
                        F.col("timestamp").alias(RECORD_TIMESTAMP), deleted.alias(DELETED), offset.alias(OFFSET),
                        *position, *([F.col("value").alias("__raw_value")] if cdc_key else []))
    if cdc_key:
        from dsflow.adapters.spark.cdc import changelog_rows

        parsed = changelog_rows(parsed, json.loads(cdc_key))
    view = parsed.select(KEY, "__v.*", RECORD_TIMESTAMP, DELETED, OFFSET, *([PARTITION] if position else []))
    if source.changelog_key:
        view = _key_columns(view, source.changelog_key)
    elif not cdc_key:
        view = view.drop(DELETED, *([] if position else [OFFSET]))
    if source.event_time is None:
        return view if source.keep_timestamp else view.drop(RECORD_TIMESTAMP)
    view = view.withColumn("__ts", F.coalesce(F.expr(source.event_time), F.col(RECORD_TIMESTAMP)))
    if source.watermark_delay:
        view = view.withWatermark("__ts", source.watermark_delay)
    if source.window:
        view = view.withColumn("__window", F.window("__ts", source.window[0], source.window[1]))
    if source.session_gap:
        view = view.withColumn("__window", F.session_window("__ts", source.session_gap))
    return view


def _value_columns(source: SourceSpec):
    """(the value struct, whether the record is a tombstone), by where the reader put the value
    (formats/decoding.py, `value_layout`: the same predicate as the data source's schema)."""
    from pyspark.sql import functions as F

    from dsflow.formats.arrow import VALUE_COLUMN
    from dsflow.formats.decoding import BOTH, STRUCT

    facet = for_kind(source.kind)
    assert facet is not None  # a source's kind
    layout = facet.value_layout(source)
    if layout == STRUCT:  # decoded by the reader
        return F.col(VALUE_COLUMN), F.col(VALUE_COLUMN).isNull()
    text = F.from_json("value", source.schema_ddl)
    if layout == BOTH:  # JSON parsed by the reader into __value, except records it left to from_json as text
        return (F.coalesce(F.col(VALUE_COLUMN), text),
                F.col("value").isNull() & F.col(VALUE_COLUMN).isNull())
    return text, F.col("value").isNull()


def _key_columns(view, key: dict[str, str]):
    """A changelog's primary key columns also come from the record key, so a tombstone (null value) has them:
    one column is the key as text (null_key_text: NULL), several a JSON object of the columns."""
    from pyspark.sql import functions as F

    if len(key) == 1:
        name, type_ = next(iter(key.items()))
        from_key = F.when(F.col(KEY) != F.lit(null_key_text(name)), F.col(KEY).cast(type_))
        return view.withColumn(name, F.coalesce(F.col(f"`{name}`"), from_key))
    parsed = F.from_json(F.col(KEY), ", ".join(f"`{k}` {t}" for k, t in key.items()))
    for name in key:
        view = view.withColumn(name, F.coalesce(F.col(f"`{name}`"), parsed.getField(name)))
    return view


def split_deletes(rows: list[tuple], columns: list[str], key: list[str]) -> tuple[list[tuple], list[tuple]]:
    """Rows ending in a __keep flag -> (rows to upsert, keys to delete), the last row of each key winning."""
    positions = [columns.index(k) for k in key]
    last: dict[tuple, tuple] = {}
    for row in rows:
        last.pop(tuple(row[i] for i in positions), None)  # re-insert: dict order follows the last occurrence
        last[tuple(row[i] for i in positions)] = row
    upserts = [row[:-1] for row in last.values() if row[-1]]
    deletes = [k for k, row in last.items() if not row[-1]]
    return upserts, deletes


def sink_frame(result, sink: SinkSpec):
    """(key, value) rows for a log sink; a row whose __keep is false becomes a tombstone (null value). A real-time
    query's rows also carry their source record's timestamp as a header (core/latency.py)."""
    from pyspark.sql import functions as F

    value = F.struct(*[F.col(f"`{c}`") for c in sink.columns])
    if sink.value_format == "json":
        value = F.to_json(value)  # other formats: the writer serializes the struct (formats/serializers.py)
    if KEEP in result.columns:
        value = F.when(F.col(KEEP), value)
    if not sink.key_columns:
        key = F.col(KEY)
    elif len(sink.key_columns) == 1:
        name = sink.key_columns[0]
        key = F.coalesce(F.col(f"`{name}`").cast("string"), F.lit(null_key_text(name)))
    else:
        key = F.to_json(F.struct(*[F.col(f"`{c}`") for c in sink.key_columns]))
    return result.select(key.alias("key"), value.alias("value"), *_source_timestamp_header(result))


def _source_timestamp_header(result) -> list:
    from pyspark.sql import functions as F

    from dsflow.core.latency import SOURCE_TIMESTAMP_HEADER

    if SOURCE_TIMESTAMP not in result.columns:
        return []
    millis = F.unix_millis(F.col(SOURCE_TIMESTAMP)).cast("string").cast("binary")
    return [F.array(F.struct(F.lit(SOURCE_TIMESTAMP_HEADER).alias("key"), millis.alias("value"))).alias("headers")]


def view_writer(spec: QuerySpec, views: Any):
    """The foreachBatch function writing micro-batches into a view's table through `views` (the sink's facet:
    `write_batch`; exactly-once per batch: each store keeps a ledger of applied batch ids)."""
    sink = spec.sink
    checkpoint = spec.checkpoint

    def write(batch, batch_id: int) -> None:
        keep = [KEEP] if KEEP in batch.columns else []
        table = batch.select(*[f"`{c}`" for c in sink.columns + keep]).toArrow()
        rows = (zip(*(table.column(i).to_pylist() for i in range(table.num_columns)), strict=True)
                if table.num_rows else [])
        deletes: list[tuple] = []
        if keep:
            rows, deletes = split_deletes(list(rows), sink.columns, sink.key_columns)
        # an aggregate without GROUP BY (no key; __keep when it retracts a changelog): its one row replaces the view's
        replace = {"replace": True} if not sink.key_columns and (sink.output_mode == "update" or keep) else {}
        views.write_batch(sink, list(rows), deletes, replace, checkpoint, batch_id)

    return write


def start_view(spec: QuerySpec, result, trigger: dict[str, Any], views: Any):
    """Start a query whose sink is a materialized view (its table is created by `views.ensure_table` if apply has
    not yet)."""
    types = {f.name: f.dataType.simpleString() for f in result.schema.fields}
    views.ensure_table(spec.sink, [(c, types.get(c, "string")) for c in spec.sink.columns])
    writer = (result.writeStream.foreachBatch(view_writer(spec, views))
              .outputMode(spec.sink.output_mode)
              .option("checkpointLocation", spec.checkpoint)
              .queryName(spark_query_name(spec.name))
              .trigger(**trigger))
    return writer.start()


def source_format_options(source: SourceSpec, query: str) -> dict[str, str]:
    """A log reader's options for the source's value format, registry and dead-letter target."""
    facet = for_kind(source.kind)
    assert facet is not None  # a source's kind
    options = {"value.format": source.value_format, "value.columns": json.dumps(source.value_columns),
               **source.registry, **secret_options(source.client_config, source.registry, facet.client_option)}
    if source.dlq_topic:
        options |= {"dlq.topic": source.dlq_topic, "dlq.query": query}
    if source.on_error:
        options["deserialization.errors"] = source.on_error
    if source.key_format:
        options["key.format"] = source.key_format
    return options


def sink_format_options(sink: SinkSpec) -> dict[str, str]:
    """A log writer's options for the sink's value format (avro: schema, subject, registry)."""
    facet = for_kind(sink.kind)
    assert facet is not None  # a sink's kind
    options = {"value.format": sink.value_format, **sink.registry,
               **secret_options(sink.client_config, sink.registry, facet.client_option)}
    if sink.value_schema:
        options["value.schema"] = sink.value_schema
    if sink.value_subject:
        options["value.subject"] = sink.value_subject
    if sink.key_format:
        options["key.format"] = sink.key_format
    if sink.key_schema:
        options |= {"key.schema": sink.key_schema, "key.subject": sink.key_subject or f"{sink.topic}-key"}
    return options


def secret_options(client_config: dict[str, str], registry: dict[str, str],
                   client_option: Callable[[str], str]) -> dict[str, str]:
    """`secret.options`: the names of the data source's options whose values are secrets this driver was given
    (`client_option`: the option a client setting is passed as), so the data source's tasks (other processes)
    scrub them from their log lines too (core/secrets.py)."""
    from dsflow.core.secrets import registered

    secrets = registered()
    names = [client_option(k) for k, v in client_config.items() if v in secrets]
    names += [k for k, v in registry.items() if v in secrets]
    return {SECRET_OPTIONS: ",".join(names)} if names else {}


SECRET_OPTIONS = "secret.options"


def gap_log_path(spec: QuerySpec) -> Path:
    """Where the query's read tasks append the gaps they counted (beside its status file)."""
    return Path(spec.status_path).with_name("gaps.jsonl")


def skip_log_path(spec: QuerySpec) -> Path:
    """Where the query's read tasks append the records they skipped under IGNORE (beside its status file)."""
    return Path(spec.status_path).with_name("skipped.jsonl")


def gap_options(spec: QuerySpec, source: SourceSpec) -> dict[str, str]:
    """What the source's reads do with offsets the broker holds no record for (SourceSpec.gaps), and where
    they count them (and the records they skip: 'source.deserialization.error.handling' = IGNORE)."""
    return {"gaps": source.gaps, "gap.log": str(gap_log_path(spec)), "skip.log": str(skip_log_path(spec))}
