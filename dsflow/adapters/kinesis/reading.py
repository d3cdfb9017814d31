"""The query driver's side of Kinesis: the streaming DataFrame of a SourceSpec of kind kinesis, and a
query writing into a Kinesis stream (append through the data source; updates through foreachBatch)."""

from __future__ import annotations

import json
from typing import Any

from dsflow.adapters.kinesis.client import prefixed
from dsflow.adapters.spark.gate import gate_options, spark_query_name


def kinesis_stream(spark, source, query: str = "", skip_log: str | None = None):
    """Rows (key, value, stream, shard, sequence, timestamp) of the source's Kinesis stream; for a value
    format other than json, `__value` (the decoded columns) instead of `value`. `skip_log`: where records skipped
    under 'source.deserialization.error.handling' = IGNORE are counted."""
    from dsflow.adapters.spark.frames import source_format_options

    reader = (spark.readStream.format("dsflow_kinesis").option("stream", source.topic)
              .option("starting.position", source.starting_position)
              .options(**source_format_options(source, query), **gate_options(query)))
    if skip_log:
        reader = reader.option("skip.log", skip_log)
    for key, value in prefixed(source.client_config).items():
        reader = reader.option(key, value)
    if source.starting_offsets:
        reader = reader.option("starting.offsets", json.dumps(source.starting_offsets))
    if source.starting_timestamp is not None:
        reader = reader.option("starting.timestamp", str(source.starting_timestamp))
    return reader.load()


def start_kinesis(spec, frame, trigger: dict[str, Any]):
    """Start a query whose sink is a Kinesis stream; `frame` holds (key, value) rows (value a struct for a
    value format other than json, serialized by the writer)."""
    from dsflow.adapters.spark.frames import sink_format_options

    options = {"stream": spec.sink.topic, **prefixed(spec.sink.client_config), **sink_format_options(spec.sink)}
    options.pop("key.format", None)  # partition keys are text
    if spec.sink.output_mode == "update":
        def write(batch, batch_id: int) -> None:
            batch.write.format("dsflow_kinesis").mode("append").options(**options).save()

        writer = frame.writeStream.foreachBatch(write).outputMode("update")
    else:
        writer = frame.writeStream.format("dsflow_kinesis").options(**options)
    return (writer.option("checkpointLocation", spec.checkpoint).queryName(spark_query_name(spec.name))
            .trigger(**trigger).start())
