"""What a query adds around its SQL: event time and windows on source views, keys and sinks on the result.

    source_view   the parsed records of one source, with __ts (event time, watermarked) and __window
                  when the query needs them
    sink_frame    (key, value) rows for Kafka: the key is the source key carried through, or built
                  from the sink's key columns (one column as text, several as a JSON object)
    start_view    a materialized view: foreachBatch into SQLite, one transaction per micro-batch
"""

from __future__ import annotations

from typing import Any

from dsflow.adapters.spark.spec import QuerySpec, SinkSpec, SourceSpec

KEY = "__key"
KAFKA_TIMESTAMP = "__kafka_ts"


def source_view(raw, source: SourceSpec):
    """The source's rows as its temp view sees them: __key, the value's columns, and event time if needed."""
    from pyspark.sql import functions as F

    parsed = raw.select(F.col("key").alias(KEY), F.from_json("value", source.schema_ddl).alias("__v"),
                        F.col("timestamp").alias(KAFKA_TIMESTAMP))
    view = parsed.select(KEY, "__v.*", KAFKA_TIMESTAMP)
    if source.event_time is None:
        return view.drop(KAFKA_TIMESTAMP)
    view = view.withColumn("__ts", F.expr(source.event_time)).withWatermark("__ts", source.watermark_delay)
    if source.window:
        view = view.withColumn("__window", F.window("__ts", source.window[0], source.window[1]))
    return view


def sink_frame(result, sink: SinkSpec):
    """(key, value) rows for a Kafka sink."""
    from pyspark.sql import functions as F

    value = F.to_json(F.struct(*[F.col(f"`{c}`") for c in sink.columns]))
    if not sink.key_columns:
        key = F.col(KEY)
    elif len(sink.key_columns) == 1:
        key = F.col(f"`{sink.key_columns[0]}`").cast("string")
    else:
        key = F.to_json(F.struct(*[F.col(f"`{c}`") for c in sink.key_columns]))
    return result.select(key.alias("key"), value.alias("value"))


def view_writer(spec: QuerySpec):
    """The foreachBatch function writing micro-batches into a view's SQLite table (exactly-once per batch)."""
    from dsflow.adapters.sqlite import mv

    sink = spec.sink
    checkpoint = spec.checkpoint

    def write(batch, batch_id: int) -> None:
        table = batch.select(*[f"`{c}`" for c in sink.columns]).toArrow()
        rows = zip(*(table.column(i).to_pylist() for i in range(table.num_columns))) if table.num_rows else []
        mv.write_batch(sink.database, sink.topic, sink.columns, sink.key_columns, rows, checkpoint, batch_id)

    return write


def start_view(spec: QuerySpec, result, trigger: dict[str, Any]):
    """Start a query whose sink is a materialized view (its table is created if apply has not yet)."""
    from dsflow.adapters.sqlite import mv

    types = {f.name: f.dataType.simpleString() for f in result.schema.fields}
    columns = [(c, types.get(c, "string")) for c in spec.sink.columns]
    mv.ensure_table(spec.sink.database, spec.sink.topic, columns, spec.sink.key_columns)
    writer = (result.writeStream.foreachBatch(view_writer(spec))
              .outputMode(spec.sink.output_mode)
              .option("checkpointLocation", spec.checkpoint)
              .queryName(spec.name.replace(".", "_"))
              .trigger(**trigger))
    return writer.start()


def kafka_batch_writer(spec: QuerySpec):
    """The foreachBatch function writing an update-mode micro-batch to Kafka.

    Spark's Python data source sinks take append mode only; an aggregation's updates go through
    foreachBatch and the batch writer instead (at-least-once; the records are upserts by key).
    """
    sink = spec.sink

    def write(batch, batch_id: int) -> None:
        writer = (batch.write.format("dsflow_kafka").mode("append")
                  .option("bootstrap.servers", sink.client_config["bootstrap.servers"]).option("topic", sink.topic))
        for key, value in sink.client_config.items():
            if key != "bootstrap.servers":
                writer = writer.option(f"kafka.{key}", value)
        writer.save()

    return write


def start_kafka_updates(spec: QuerySpec, frame, trigger: dict[str, Any]):
    return (frame.writeStream.foreachBatch(kafka_batch_writer(spec))
            .outputMode("update")
            .option("checkpointLocation", spec.checkpoint)
            .queryName(spec.name.replace(".", "_"))
            .trigger(**trigger)
            .start())
