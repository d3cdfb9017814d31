"""The Kafka adapter against a real tansu broker and a real Spark session."""

from __future__ import annotations

import json
import pickle
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from dsflow.adapters.kafka import client
from dsflow.adapters.kafka.admin import TopicSpec, delete_topic, describe_topic, ensure_topic, list_topics
from dsflow.adapters.kafka.datasource import SCHEMA, KafkaDataSource, KafkaOptions, cap_rows
from dsflow.adapters.kafka.writing import check_write_schema
from dsflow.adapters.kafka.options import moved_ending_offsets
from dsflow.adapters.kafka.devbroker import free_port
from dsflow.errors import DsflowError
from support.brokers import both_brokers, kafka_only, tansu_only

integration = pytest.mark.integration


def _new_topic(broker: str, prefix: str, partitions: int = 2) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    assert ensure_topic(broker, TopicSpec(name, partitions=partitions)) is True
    return name


# --- pure ---------------------------------------------------------------------------------------


def test_options_are_case_insensitive_and_pass_kafka_settings() -> None:
    opts = KafkaOptions.parse({
        "Bootstrap.Servers": "h:1", "TOPIC": "t", "starting.position": "LATEST",
        "max.records.per.batch": "50", "kafka.client.id": "me",
    })
    assert (opts.bootstrap, opts.topic, opts.starting_position) == ("h:1", "t", "latest")
    assert opts.max_records_per_batch == 50
    assert opts.config == {"client.id": "me", "bootstrap.servers": "h:1"}
    with pytest.raises(DsflowError, match="'topic' is required"):
        KafkaOptions.parse({"bootstrap.servers": "h:1"})
    with pytest.raises(DsflowError, match="starting.position"):
        KafkaOptions.parse({"bootstrap.servers": "h:1", "topic": "t", "starting.position": "middle"})


def test_a_moved_bound_replaces_the_ending_offsets_once_written(tmp_path: Path) -> None:
    moved = tmp_path / "until.json"
    opts = KafkaOptions.parse({"bootstrap.servers": "h:1", "topic": "t", "ending.offsets": '{"0": 5, "1": 7}',
                               "ending.offsets.file": str(moved)})
    assert (moved_ending_offsets(opts), opts.ending_offsets) == (None, {0: 5, 1: 7}), "not written yet"
    moved.write_text(json.dumps({"other": {"0": 1}}))
    assert moved_ending_offsets(opts) is None, "another topic's cut"
    moved.write_text(json.dumps({"t": {"0": 9, "1": 12}, "other": {"0": 1}}))
    assert moved_ending_offsets(opts) == {0: 9, 1: 12}


def test_write_schema_needs_a_value_column() -> None:
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    check_write_schema(StructType([StructField("value", StringType()), StructField("partition", IntegerType())]))
    with pytest.raises(DsflowError, match="needs a 'value' column"):
        check_write_schema(StructType([StructField("payload", StringType())]))
    with pytest.raises(DsflowError, match="column 'key' is int"):
        check_write_schema(StructType([StructField("value", StringType()), StructField("key", IntegerType())]))


def test_cap_rows_shares_the_budget_fairly() -> None:
    assert cap_rows({0: 0, 1: 10}, {0: 100, 1: 12}, 50) == {0: 48, 1: 12}
    assert cap_rows({0: 0, 1: 0}, {0: 100, 1: 100}, 50) == {0: 25, 1: 25}
    assert cap_rows({0: 5}, {0: 7}, 50) == {0: 7}


# --- admin --------------------------------------------------------------------------------------


@integration
@both_brokers
def test_topic_lifecycle(broker: str) -> None:
    name = _new_topic(broker, "admin", partitions=3)
    assert describe_topic(broker, name) == TopicSpec(name, partitions=3, replicas=1)
    assert name in list_topics(broker)
    assert ensure_topic(broker, TopicSpec(name, partitions=3)) is False

    with pytest.raises(DsflowError) as caught:
        ensure_topic(broker, TopicSpec(name, partitions=2))
    assert caught.value.code == "DSF-E701"
    assert "3 partition(s)" in caught.value.message and "partitions: 3" in caught.value.hint

    assert delete_topic(broker, name) is True
    assert describe_topic(broker, name) is None
    assert delete_topic(broker, name) is False
    assert describe_topic(broker, "never-created") is None
    assert "never-created" not in list_topics(broker)  # describing must not auto-create


@integration
def test_dead_broker_is_reported_quickly() -> None:
    dead = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    calls = [
        lambda: describe_topic(dead, "t"),
        lambda: list_topics(dead),
        lambda: ensure_topic(dead, TopicSpec("t")),
        lambda: list(client.print_records(dead, "t")),
        lambda: client.produce_json_lines(dead, "t", ["{}"]),
    ]
    for call in calls:
        with pytest.raises(DsflowError) as caught:
            call()
        assert caught.value.code == "DSF-E702" and dead in caught.value.message
    assert time.monotonic() - began < 5


@integration
def test_a_failing_source_never_prints_a_secret_broker_address(spark, tmp_path, capfd) -> None:
    """A broker address the driver names as a secret (`secret.options`, as it does for a store's env_var() values)
    is scrubbed in the data source's own reader process: the error Spark reports and the traceback it prints into
    the log say <secret>, with no librdkafka error chained under it that would show the address in clear."""
    from pyspark.errors import StreamingQueryException

    dead = f"127.0.0.1:{free_port()}"
    options = {"bootstrap.servers": dead, "topic": "nowhere", "secret.options": "bootstrap.servers"}
    frame = spark.readStream.format("dsflow_kafka").options(**options).load()
    query = (frame.writeStream.format("memory").queryName(f"q{uuid.uuid4().hex[:8]}")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as failed:
        query.awaitTermination(180)
    printed = capfd.readouterr()
    assert "DSF-E702" in str(failed.value) and "<secret>" in str(failed.value)
    assert dead not in str(failed.value) and dead not in printed.err and dead not in printed.out


# --- client -------------------------------------------------------------------------------------


@integration
@tansu_only
def test_the_end_tracker_reads_a_busy_partition_to_the_end_of_its_last_batch(broker: str) -> None:
    """Between micro-batches a partition being written to has a new high watermark at every call; on tansu that is
    its last batch's base offset + 1. The tracker probes it anyway, so each micro-batch reads every record already
    written (a record left for the next one could be dropped as late there)."""
    topic = _new_topic(broker, "busy", partitions=2)
    errors = client.DeliveryErrors()
    producer = client.new_producer(client.client_config(broker), errors)
    # the wait for a busy partition's last record is 0.1 s by default (a bound on every micro-batch's latency; an end
    # found short is completed by the next call): made long here, so the test asserts what the probe reads, not how
    # fast a fetch comes (at load ~16 one took longer than 0.1 s)
    tracker, written, answers = client.EndTracker(busy_wait=5.0), {0: 0, 1: 0}, []
    with client.consumer(client.client_config(broker)) as c:
        for round_ in range(6):
            for partition in (0, 1):  # one producer batch per partition and round: 2 + round records
                for i in range(2 + round_):
                    client.produce_one(producer, topic, f"v{round_}-{i}", None, partition)
                written[partition] += 2 + round_
            client.flush_or_raise(producer, topic, 4 + 2 * round_, errors)
            highs = {p: high for p, (_, high) in client.watermarks(c, topic, [0, 1]).items()}
            answers.append((highs, tracker.ends(c, topic, [0, 1], 0.02, 0.02), dict(written)))
    assert all(ends == wrote for _, ends, wrote in answers), answers
    assert any(highs != wrote for highs, _, wrote in answers), "tansu's watermark no longer stops short: " \
        "this test no longer tells a probing tracker from one that takes the watermark"


@integration
@both_brokers
def test_end_offsets_see_past_the_tansu_high_watermark(broker: str) -> None:
    topic = _new_topic(broker, "ends")
    errors = client.DeliveryErrors()
    producer = client.new_producer(client.client_config(broker), errors)
    for batch in range(4):  # a few batches per partition: tansu's high watermark is the last batch's base + 1
        for i in range(250):
            client.produce_one(producer, topic, f"v{batch}-{i}", None, i % 2)
        client.flush_or_raise(producer, topic, 250, errors)

    with client.consumer(client.client_config(broker)) as c:
        highs = client.watermarks(c, topic, [0, 1])
        assert client.end_offsets(c, topic, [0, 1]) == {0: 500, 1: 500}
        assert client.end_offsets(c, topic, [0, 1]) == {0: 500, 1: 500}  # the consumer is reusable
        chunks = list(client.read_range(c, topic, 0, 100, 500, max_batch=64))
    assert all(high <= 500 for _, high in highs.values())
    assert [m.offset() for chunk in chunks for m in chunk] == list(range(100, 500))
    assert max(len(chunk) for chunk in chunks) <= 64


@integration
@both_brokers
def test_high_watermarks_in_one_request_match_the_per_partition_ones(broker: str) -> None:
    topic = _new_topic(broker, "highs", partitions=3)
    errors = client.DeliveryErrors()
    producer = client.new_producer(client.client_config(broker), errors)
    for i in range(300):  # partition 2 stays empty
        client.produce_one(producer, topic, f"v{i}", None, i % 2)
    client.flush_or_raise(producer, topic, 300, errors)

    with client.consumer(client.client_config(broker)) as c:
        per_partition = {p: high for p, (_, high) in client.watermarks(c, topic, [0, 1, 2]).items()}
        assert client.high_watermarks(c, topic, [0, 1, 2]) == per_partition
        assert per_partition[2] == 0 and 0 < per_partition[0] <= 150
        assert client.high_watermarks(c, topic, []) == {}
        with pytest.raises(DsflowError) as caught:
            client.high_watermarks(c, topic, [0, 7])
    assert caught.value.code == "DSF-E703" and f"{topic}[7]" in caught.value.message


@integration
@both_brokers
def test_read_range_fails_instead_of_hanging(broker: str) -> None:
    topic = _new_topic(broker, "stall", partitions=1)
    client.produce_json_lines(broker, topic, ['{"a": 1}'])
    with client.consumer(client.client_config(broker)) as c:
        with pytest.raises(DsflowError) as caught:
            for _ in client.read_range(c, topic, 0, 0, 5, stall_timeout=1.0):
                pass
    assert caught.value.code == "DSF-E704"
    assert f"{topic}[0] at offset 1" in caught.value.message


@integration
@both_brokers
def test_produce_json_lines_and_print_records(broker: str) -> None:
    topic = _new_topic(broker, "lines")
    with pytest.raises(DsflowError) as caught:
        client.produce_json_lines(broker, topic, ['{"id": 1}', "", '{"id": 2', '{"id": 3}'], key_field="id")
    assert caught.value.code == "DSF-E706" and caught.value.message.startswith("line 3:")
    assert client.read_to_end(broker, topic) == []  # nothing produced before the bad line either

    lines = [json.dumps({"id": i, "name": f"n{i}"}) for i in range(3)] + ['{"name": "no id"}']
    assert client.produce_json_lines(broker, topic, lines, key_field="id") == 4
    # a limit, not a short idle timeout, ends the reads: a loaded machine may take seconds to the first fetch
    records = list(client.print_records(broker, topic, from_beginning=True, limit=len(lines), timeout=60.0))
    assert sorted(r["value"] for r in records) == sorted(lines) and len(client.read_to_end(broker, topic)) == 4
    assert sorted((r["key"] or "") for r in records) == ["", "0", "1", "2"]
    assert all(r["timestamp"] > 0 and r["offset"] >= 0 for r in records)
    assert len(list(client.print_records(broker, topic, limit=2, timeout=60.0))) == 2
    assert list(client.print_records(broker, topic, from_beginning=False, timeout=0.5)) == []


# --- Spark data source --------------------------------------------------------------------------


@integration
def test_stream_reader_pickles_without_its_consumer(broker: str) -> None:
    topic = _new_topic(broker, "pickle")
    client.produce_json_lines(broker, topic, ['{"a": 1}'] * 10)
    reader = KafkaDataSource({"bootstrap.servers": broker, "topic": topic}).streamReader(SCHEMA)
    try:
        start = reader.initialOffset()
        assert start == {"0": 0, "1": 0}
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert sum(end.values()) == 10
        copy = pickle.loads(pickle.dumps(reader))
        ranges = copy.partitions(start, end)
        assert sum(sum(b.num_rows for b in copy.read(r)) for r in ranges) == 10
    finally:
        reader.stop()


def _run_stream(spark, broker: str, source: str, sink: str, checkpoint: Path, max_rows: int | None = None) -> list[int]:
    """One availableNow run filtering kept records from source to sink; input rows per micro-batch."""
    from pyspark.sql import functions as F

    reader = spark.readStream.format("dsflow_kafka").option("bootstrap.servers", broker).option("topic", source)
    if max_rows:
        reader = reader.option("max.records.per.batch", str(max_rows))
    parsed = reader.load().select("key", "value", F.from_json("value", "id INT, keep BOOLEAN").alias("r"))
    query = (
        parsed.where("r.keep").select("key", "value")
        .writeStream.format("dsflow_kafka")
        .option("bootstrap.servers", broker).option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "availableNow query did not finish"
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def _produce_ids(broker: str, topic: str, ids: range) -> list[int]:
    """Produce records keyed by id; returns the ids the pipeline keeps."""
    lines = [json.dumps({"id": i, "keep": i % 4 != 0}) for i in ids]
    client.produce_json_lines(broker, topic, lines, key_field="id")
    return [i for i in ids if i % 4 != 0]


def _assert_sink_holds(broker: str, sink: str, expected: list[int]) -> None:
    records = client.read_to_end(broker, sink)
    ids = Counter(json.loads(r["value"])["id"] for r in records)
    assert ids == Counter(expected), "each kept id exactly once: no loss, no duplicate"
    assert all(r["key"] == str(json.loads(r["value"])["id"]) for r in records)


@integration
def test_stream_round_trip_resumes_exactly_from_checkpoint(broker: str, spark, tmp_path: Path) -> None:
    source, sink = _new_topic(broker, "src"), _new_topic(broker, "dst")
    checkpoint = tmp_path / "checkpoint"

    expected = _produce_ids(broker, source, range(5_000))
    assert sum(_run_stream(spark, broker, source, sink, checkpoint)) == 5_000
    _assert_sink_holds(broker, sink, expected)

    expected += _produce_ids(broker, source, range(5_000, 6_000))
    batches = _run_stream(spark, broker, source, sink, checkpoint, max_rows=600)
    assert sum(batches) == 1_000 and len(batches) == 2 and max(batches) <= 600
    _assert_sink_holds(broker, sink, expected)

    assert sum(_run_stream(spark, broker, source, sink, checkpoint)) == 0  # nothing new: nothing read

    table = spark.read.format("dsflow_kafka").option("bootstrap.servers", broker).option("topic", sink).load()
    row = table.selectExpr(
        "count(*) AS n", "count(DISTINCT partition) AS parts", "count(timestamp) AS stamped", "min(topic) AS topic"
    ).first()
    assert (row.n, row.parts, row.stamped, row.topic) == (len(expected), 2, len(expected), sink)


@integration
def test_batch_write_honours_key_and_partition_columns(broker: str, spark) -> None:
    topic = _new_topic(broker, "batchw")
    rows = {("k1", "v1", 1), ("k2", "v2", 1), (None, "v3", 0)}
    frame = spark.createDataFrame(sorted(rows, key=str), "key STRING, value STRING, partition INT")
    frame.write.format("dsflow_kafka").option("bootstrap.servers", broker).option("topic", topic).mode("append").save()
    assert {(r["key"], r["value"], r["partition"]) for r in client.read_to_end(broker, topic)} == rows


@kafka_only
def test_a_reader_keeps_its_partition_list_and_reads_it_again_when_stale_or_failing(
    broker: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between micro-batches the stream reader asks the metadata of every topic at most every
    PARTITIONS_FRESH_S (client.RecentPartitions): partitions added in place show once the list is stale, and a
    topic deleted meanwhile is DSF-E708 at once, not a request on partitions it kept."""
    from dsflow.adapters.kafka.admin import add_partitions

    topic = _new_topic(broker, "fresh")
    client.produce_json_lines(broker, topic, ['{"a": 1}'] * 4)
    reader = KafkaDataSource({"bootstrap.servers": broker, "topic": topic}).streamReader(SCHEMA)
    try:
        start = reader.initialOffset()
        assert sorted(reader.latestOffset(start, reader.getDefaultReadLimit())) == ["0", "1"]
        add_partitions(broker, topic, 3)
        client.produce_json_lines(broker, topic, [json.dumps({"a": i}) for i in range(30)], key_field="a")
        kept = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert sorted(kept) == ["0", "1"], "the list kept within PARTITIONS_FRESH_S"
        reader._offsets._partitions.fresh_s = 0.0
        grown = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert sorted(grown) == ["0", "1", "2"] and sum(grown.values()) == 34
        reader._offsets._partitions.fresh_s = 3600.0
        reader.latestOffset(start, reader.getDefaultReadLimit())
        delete_topic(broker, topic)
        with pytest.raises(DsflowError) as gone:
            reader.latestOffset(start, reader.getDefaultReadLimit())
        assert gone.value.code == "DSF-E708", gone.value
        asked = []
        real = client.topic_partitions
        monkeypatch.setattr(client, "topic_partitions", lambda c, t: asked.append(t) or real(c, t))
        with pytest.raises(DsflowError) as again:
            reader.latestOffset(start, reader.getDefaultReadLimit())
        assert again.value.code == "DSF-E708" and asked == [topic], "no list kept: the broker's answer, asked once"
    finally:
        reader.stop()


def test_partitions_of_asks_once_for_every_topic(broker: str) -> None:
    first, second = _new_topic(broker, "many", 1), _new_topic(broker, "many", 3)
    with client.consumer(client.client_config(broker)) as c:
        assert client.partitions_of(c, [first, second, "no-such-topic"]) == {first: [0], second: [0, 1, 2]}
