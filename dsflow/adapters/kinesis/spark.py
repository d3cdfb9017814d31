"""Kinesis's side of the query driver (the `spark` facet, adapters/spark/facets.py): a stream read by the
`dsflow_kinesis` data source and a query writing a stream (reading.py). Partition keys are text (no key format),
and a dead-letter stream is used only when the query names one ('dlq.topic')."""

from __future__ import annotations

from typing import Any

from dsflow.adapters.spark.facets import SparkFacet


class KinesisSpark:
    kinds: tuple[str, ...] = ("kinesis",)
    async_checkpoint = False

    def client_option(self, setting: str) -> str:
        from dsflow.adapters.kinesis.client import PREFIX

        return f"{PREFIX}{setting}"

    def source_fields(self, project: Any, query: Any, store: Any, relation: Any) -> dict[str, Any]:
        from dsflow.adapters.spark.translate import log_format

        return {"kind": "kinesis", "client_config": dict(store.properties),
                **log_format(project, store, relation, dlq_topic=query.dlq_topic, key_format=None)}

    def sink_spec(self, project: Any, query: Any, store: Any, relation: Any, columns: list[str]) -> Any:
        from dsflow.adapters.spark.spec import SinkSpec
        from dsflow.adapters.spark.translate import sink_format

        return SinkSpec(topic=relation.topic, client_config=dict(store.properties), columns=columns, kind="kinesis",
                        output_mode=query.output_mode, key_columns=list(query.key_columns),
                        **{**sink_format(project, relation), "key_format": None})

    def data_sources(self) -> list[type]:
        from dsflow.adapters.kinesis.datasource import KinesisDataSource

        return [KinesisDataSource]

    def stream(self, spark: Any, spec: Any, source: Any) -> Any:
        from dsflow.adapters.kinesis.reading import kinesis_stream
        from dsflow.adapters.spark.frames import skip_log_path

        return kinesis_stream(spark, source, spec.name, str(skip_log_path(spec)))

    def value_layout(self, source: Any) -> str:
        from dsflow.formats.decoding import value_layout

        return value_layout(source.value_format, source.value_columns, source.dlq_topic, parses_json=False)

    def sink_rows(self, result: Any, sink: Any) -> Any:
        from dsflow.adapters.spark.frames import sink_frame

        return sink_frame(result, sink)

    def start(self, spec: Any, frame: Any, trigger: dict[str, Any], options: dict[str, str]) -> Any:
        from dsflow.adapters.kinesis.reading import start_kinesis

        return start_kinesis(spec, frame, trigger)

    def lag_reader(self) -> Any:
        from dsflow.adapters.kinesis.lag import ShardAges

        return ShardAges()  # shard positions are sequence numbers, not counts: the lag is a time


# a log store's facet has no view-sink members (ensure_table, write_batch: Capability.VIEWS stores only)
SPARK: SparkFacet = KinesisSpark()  # type: ignore[assignment]
