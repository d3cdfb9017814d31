"""Kafka's side of the query driver (the `spark` facet, adapters/spark/facets.py): a topic read by the
`dsflow_kafka` data source, a query writing a topic (append through the data source, updates through
foreachBatch, an exactly-once stream through foreachBatch in Kafka transactions: transactions.py), and the topics'
end offsets for the query's lag (in records)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from dsflow.adapters.spark.facets import SparkFacet
from dsflow.adapters.spark.gate import spark_query_name

BOOTSTRAP = "bootstrap.servers"


def client_option(setting: str) -> str:
    """The `dsflow_kafka` option a client setting is passed as: `kafka.<setting>`, the broker list as it is."""
    return setting if setting == BOOTSTRAP else f"kafka.{setting}"


class KafkaSpark:
    kinds: tuple[str, ...] = ("kafka",)
    async_checkpoint = True  # dsflow's sink is at-least-once like Spark's own Kafka sink (spark/driver.py), unless
    # the query is exactly-once: then its batches must be re-planned as they ran (translate.py turns it off)

    def client_option(self, setting: str) -> str:
        return client_option(setting)

    def source_fields(self, project: Any, query: Any, store: Any, relation: Any) -> dict[str, Any]:
        from dsflow.adapters.spark.translate import log_format

        return {"client_config": store.client_config(), **log_format(
            project, store, relation, dlq_topic=project.dlq_topic(query), key_format=relation.key_format)}

    def sink_spec(self, project: Any, query: Any, store: Any, relation: Any, columns: list[str]) -> Any:
        from dsflow.adapters.spark.spec import SinkSpec
        from dsflow.adapters.spark.translate import sink_format, sink_key_format

        exactly_once = query.delivery_guarantee == "exactly-once" and relation.kind == "stream"
        return SinkSpec(topic=relation.topic, client_config=store.client_config(), columns=columns,
                        output_mode=query.output_mode, key_columns=list(query.key_columns),
                        exactly_once=exactly_once, declared_at=str(query.location) if query.location else None,
                        **sink_format(project, relation), **sink_key_format(relation, query))

    def data_sources(self) -> list[type]:
        from dsflow.adapters.kafka.datasource import KafkaDataSource

        return [KafkaDataSource]

    def stream(self, spark: Any, spec: Any, source: Any) -> Any:
        from dsflow.adapters.spark.frames import gap_options, source_format_options
        from dsflow.adapters.spark.gate import gate_options

        raw = (spark.readStream.format("dsflow_kafka")
               .option(BOOTSTRAP, source.client_config[BOOTSTRAP])
               .option("topic", source.topic)
               .option("starting.position", source.starting_position))
        if source.starting_offsets:
            raw = raw.option("starting.offsets", json.dumps(source.starting_offsets))
        if source.starting_timestamp is not None:
            raw = raw.option("starting.timestamp", str(source.starting_timestamp))
        if source.ending_offsets:
            raw = raw.option("ending.offsets", json.dumps(source.ending_offsets))
        if source.ending_offsets_file:
            raw = raw.option("ending.offsets.file", source.ending_offsets_file)
        raw = _with_client(raw, source.client_config)
        return raw.options(**source_format_options(source, spec.name), **gap_options(spec, source),
                           **gate_options(spec.name)).load()

    def table(self, spark: Any, spec: Any, source: Any) -> Any:
        """The topic read whole, as a batch, each task finding its partition's offsets when it runs (a bounded table
        re-read at every micro-batch: adapters/spark/lookup.py)."""
        from dsflow.adapters.spark.frames import gap_options, source_format_options

        raw = (spark.read.format("dsflow_kafka").option(BOOTSTRAP, source.client_config[BOOTSTRAP])
               .option("topic", source.topic).option("ends.at.read", "true"))
        raw = _with_client(raw, source.client_config)
        return raw.options(**source_format_options(source, spec.name), **gap_options(spec, source)).load()

    def realtime_conf(self) -> dict[str, str]:
        """The session conf real-time mode needs: Spark's own Kafka connector's jars (connector.py; DSF-E874)."""
        from dsflow.adapters.kafka.connector import jars

        return {"spark.jars": jars().spark_jars}

    def realtime_stream(self, spark: Any, spec: Any, source: Any) -> Any:
        """The topic read by Spark's own connector (real-time mode): key and value as text, as dsflow's source gives
        them; carried offsets as its startingOffsets."""
        from pyspark.sql import functions as F

        raw = (spark.readStream.format("kafka").option("subscribe", source.topic)
               .option("startingOffsets", _connector_start(source)))
        raw = raw.options(**_connector_client(source.client_config))
        return raw.load().select(F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value"),
                                 "partition", "offset", "timestamp")

    def realtime_start(self, spec: Any, frame: Any, trigger: dict[str, Any]) -> Any:
        """(key, value) rows written by Spark's own connector in real-time mode (update mode, at-least-once), each
        with its source record's timestamp as a header (core/latency.py)."""
        writer = (frame.writeStream.format("kafka").option("topic", spec.sink.topic)
                  .option("checkpointLocation", spec.checkpoint).outputMode("update")
                  .queryName(spark_query_name(spec.name)).trigger(**trigger))
        return writer.options(**_connector_client(spec.sink.client_config)).start()

    def latency_probe(self, sink: Any) -> Any:
        """The latency of the records a real-time query wrote, read from its sink topic (kafka/latency.py)."""
        from dsflow.adapters.kafka.latency import SinkLatency

        return SinkLatency(sink.client_config, sink.topic)

    def value_layout(self, source: Any) -> str:
        from dsflow.formats.decoding import value_layout

        return value_layout(source.value_format, source.value_columns, source.dlq_topic)

    def sink_rows(self, result: Any, sink: Any) -> Any:
        from dsflow.adapters.spark.frames import sink_frame

        return sink_frame(result, sink)

    def start(self, spec: Any, frame: Any, trigger: dict[str, Any], options: dict[str, str]) -> Any:
        from dsflow.adapters.kafka.datasource import RUN_OPTION
        from dsflow.adapters.spark.frames import sink_format_options

        if spec.sink.exactly_once:
            return _start_transactional(spec, frame, trigger)
        if spec.sink.output_mode == "update":
            return _start_updates(spec, frame, trigger)
        writer = (frame.writeStream.format("dsflow_kafka")
                  .option(BOOTSTRAP, spec.sink.client_config[BOOTSTRAP])
                  .option("topic", spec.sink.topic)
                  .option(RUN_OPTION, uuid.uuid4().hex)
                  .option("checkpointLocation", spec.checkpoint)
                  .queryName(spark_query_name(spec.name))
                  .trigger(**trigger))
        writer = _with_client(writer, spec.sink.client_config)
        if options:
            writer = writer.options(**options)
        return writer.options(**sink_format_options(spec.sink)).start()

    def lag_reader(self) -> Any:
        return TopicEnds()

    def send_rows(self, config: dict[str, str], topic: str, records: list) -> None:
        """Rows failing a DEAD LETTER expectation, to the dead-letter topic (adapters/spark/expectations.py)."""
        from dsflow.adapters.kafka.deadletters import send_records

        send_records(config, topic, records)


def _connector_start(source: Any) -> str:
    """startingOffsets of Spark's Kafka source: carried offsets as {topic: {partition: offset}}, else the position."""
    if source.starting_offsets:
        return json.dumps({source.topic: {str(p): int(o) for p, o in source.starting_offsets.items()}})
    return source.starting_position


def _connector_client(config: dict[str, str]) -> dict[str, str]:
    """The store's client settings as options of Spark's Kafka connector (`kafka.<setting>`, Java's names:
    javaclient.py); files it needs (PEM key stores) go to the process's temporary folder, its scratch folder."""
    import tempfile
    from pathlib import Path

    from dsflow.adapters.kafka.javaclient import java_settings

    return {f"kafka.{k}": v for k, v in java_settings(config, Path(tempfile.gettempdir())).items()}


def _with_client(io: Any, config: dict[str, str]) -> Any:
    """A reader or writer with the client settings but the broker list (passed as its own option)."""
    for key, value in config.items():
        if key != BOOTSTRAP:
            io = io.option(client_option(key), value)
    return io


def batch_writer(spec: Any):
    """The foreachBatch function writing an update-mode micro-batch to Kafka.

    Spark's Python data source sinks take append mode only; an aggregation's updates go through
    foreachBatch and the batch writer instead (at-least-once; the records are upserts by key).
    """
    sink = spec.sink

    def write(batch, batch_id: int) -> None:
        _batch_save(batch, sink, {})

    return write


def _batch_save(batch: Any, sink: Any, options: dict[str, str]) -> None:
    from dsflow.adapters.spark.frames import sink_format_options

    writer = (batch.write.format("dsflow_kafka").mode("append")
              .option(BOOTSTRAP, sink.client_config[BOOTSTRAP]).option("topic", sink.topic))
    _with_client(writer, sink.client_config).options(**sink_format_options(sink), **options).save()


def transactional_writer(spec: Any, query_id: Any):
    """The foreachBatch function of an exactly-once stream sink: the batch written by the data source's batch writer
    with the query's ledger and the batch id, so that each write task commits its records and the batch id in one
    Kafka transaction and skips a batch its ledger holds (adapters/kafka/transactions.py). `query_id()` is the
    checkpoint's query id (known once the query runs)."""
    from dsflow.adapters.kafka.transactions import ledger_name

    sink = spec.sink

    def write(batch, batch_id: int) -> None:
        _batch_save(batch, sink, {"transaction.ledger": ledger_name(spec.name, query_id()),
                                  "transaction.batch": str(batch_id)})

    return write


def _start_updates(spec: Any, frame: Any, trigger: dict[str, Any]) -> Any:
    return (frame.writeStream.foreachBatch(batch_writer(spec))
            .outputMode("update")
            .option("checkpointLocation", spec.checkpoint)
            .queryName(spark_query_name(spec.name))
            .trigger(**trigger)
            .start())


def _start_transactional(spec: Any, frame: Any, trigger: dict[str, Any]) -> Any:
    """An exactly-once stream sink, on a broker that isolates transactions (DSF-E870); the checkpoint's query id,
    which names the ledger, is Spark's id of the running query (the same after a restart on the checkpoint)."""
    from dsflow.adapters.kafka.transactions import check_isolates

    sink = spec.sink
    check_isolates(sink.client_config[BOOTSTRAP], sink.client_config, spec.name, sink.declared_at)
    session, name = frame.sparkSession, spark_query_name(spec.name)

    def query_id() -> str:
        return next(str(q.id) for q in session.streams.active if q.name == name)

    return (frame.writeStream.foreachBatch(transactional_writer(spec, query_id))
            .outputMode(sink.output_mode)
            .option("checkpointLocation", spec.checkpoint)
            .queryName(name)
            .trigger(**trigger)
            .start())


class TopicEnds:
    """The end offsets of topics, through one consumer per client config, kept until `close`."""

    unit = "records"

    def __init__(self) -> None:
        self._consumers: dict[str, Any] = {}
        self._partitions: dict[str, Any] = {}  # config key -> client.RecentPartitions

    def behind(self, source: Any, offsets: dict[str, int]) -> dict[str, int]:
        """Per partition, the records past the offset read up to."""
        ends = self.ends(source.client_config, source.topic)
        return {str(p): end - int(offsets.get(str(p), 0)) for p, end in ends.items()}

    def ends(self, config: dict[str, str], topic: str) -> dict[int, int]:
        from dsflow.adapters.kafka import client

        key = json.dumps(config, sort_keys=True)
        if key not in self._consumers:
            self._consumers[key] = client.new_consumer(config)
            self._partitions[key] = client.RecentPartitions()
        consumer = self._consumers[key]
        return client.end_offsets(consumer, topic, self._partitions[key].get(consumer, topic), first_wait=0.2)

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
        self._partitions.clear()


# a log store's facet has no view-sink members (ensure_table, write_batch: Capability.VIEWS stores only)
SPARK: SparkFacet = KafkaSpark()  # type: ignore[assignment]
