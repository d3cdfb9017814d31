"""The Kinesis data source and sink (`dsflow_kinesis`) through real Spark against kinesalite.

Values are compared with what the test put into the streams (read back independently with boto3).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from dsflow.adapters.kafka.devbroker import free_port
from dsflow.adapters.kinesis import admin
from dsflow.adapters.kinesis.client import list_shards, new_client
from dsflow.adapters.kinesis.datasource import KinesisOptions, KinesisStreamReader
from dsflow.adapters.kinesis.records import put_json_lines, read_records

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(kinesis_endpoint: str) -> dict[str, str]:
    return {"endpoint": kinesis_endpoint, "region": "us-east-1"}


def _stream(settings: dict[str, str], shards: int) -> str:
    name = f"t{uuid.uuid4().hex[:10]}"
    assert admin.ensure_stream(settings, name, shards) is True
    return name


def _put(settings: dict[str, str], stream: str, start: int, count: int) -> list[dict]:
    rows = [{"id": i, "userid": f"User_{i % 7}", "n": i * 3} for i in range(start, start + count)]
    assert put_json_lines(settings, stream, [json.dumps(r) for r in rows], key_field="userid") == count
    return rows


def _split(settings: dict[str, str], stream: str) -> dict:
    """Split the stream's first shard in the middle of its hash range; the parent shard as it was listed."""
    client = new_client(settings)
    parent = list_shards(client, stream)[0]
    middle = str((int(parent["HashKeyRange"]["EndingHashKey"]) + 1) // 2)
    client.split_shard(StreamName=stream, ShardToSplit=parent["ShardId"], NewStartingHashKey=middle)
    admin.wait_active(settings, stream)
    return parent


def _options(settings: dict[str, str]) -> dict[str, str]:
    return {f"kinesis.{k}": v for k, v in settings.items()}


def _copy(spark, settings, source: str, sink: str, checkpoint: Path) -> None:
    """One availableNow run: every record of `source` into `sink`, through Spark."""
    frame = spark.readStream.format("dsflow_kinesis").option("stream", source).options(**_options(settings)).load()
    query = (frame.select("key", "value").writeStream.format("dsflow_kinesis").option("stream", sink)
             .options(**_options(settings)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None, query.exception()


def _values(settings, stream: str) -> Counter:
    return Counter(r["value"] for r in read_records(settings, stream, timeout=1.0))


def test_admin_create_describe_delete(settings):
    name = _stream(settings, 3)
    info = admin.describe_stream(settings, name)
    assert (info.status, info.open_shards) == ("ACTIVE", 3)
    assert name in admin.list_streams(settings)
    assert admin.ensure_stream(settings, name, 3) is False  # exists: not created again
    assert admin.delete_stream(settings, name) is True
    assert admin.describe_stream(settings, name) is None
    assert admin.delete_stream(settings, name) is False


def test_latest_offset_hands_records_to_partitions(settings):
    """The driver reads each shard once to find the batch's end; the partitions carry those records."""
    name = _stream(settings, 2)
    rows = _put(settings, name, 0, 40)
    reader = KinesisStreamReader(KinesisOptions.parse({"stream": name, **_options(settings)}))
    start = reader.initialOffset()
    assert set(start.values()) == {"trim"} and len(start) == 2
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    end = reader.latestOffset(start, ReadAllAvailable())
    assert all(v.startswith("after:") for v in end.values())
    parts = reader.partitions(start, end)
    assert len(parts) == 2 and all(p.records is not None for p in parts)
    got = sorted(json.loads(r.data)["id"] for p in parts for r in p.records)
    assert got == [r["id"] for r in rows]
    # planned again after a restart (nothing in memory): the same records, read between the sequence numbers
    again = KinesisStreamReader(KinesisOptions.parse({"stream": name, **_options(settings)}))
    replayed = [b for p in again.partitions(start, end) for b in again.read(p)]
    assert sorted(json.loads(v)["id"] for b in replayed for v in b.column("value").to_pylist()) == got
    assert reader.latestOffset(end, ReadAllAvailable()) == end  # nothing new


def test_source_and_sink_through_spark(spark, settings, tmp_path):
    source, sink = _stream(settings, 2), _stream(settings, 3)
    rows = _put(settings, source, 0, 500)
    _copy(spark, settings, source, sink, tmp_path / "cp")
    assert _values(settings, sink) == Counter(json.dumps(r) for r in rows)
    # partition keys are carried: each record lands on the shard its key hashes to, keys intact
    keys = Counter(r["key"] for r in read_records(settings, sink, timeout=1.0))
    assert keys == Counter(r["userid"] for r in rows)


def test_restart_resumes_from_checkpointed_sequence_numbers(spark, settings, tmp_path):
    source, sink = _stream(settings, 2), _stream(settings, 1)
    first = _put(settings, source, 0, 300)
    _copy(spark, settings, source, sink, tmp_path / "cp")
    second = _put(settings, source, 300, 200)
    _copy(spark, settings, source, sink, tmp_path / "cp")
    assert _values(settings, sink) == Counter(json.dumps(r) for r in first + second)  # no loss, no duplicates


def test_resharding_parents_before_children(spark, settings, tmp_path):
    """A split shard: its records come in batches before those of its children; none lost or doubled."""
    name = _stream(settings, 1)
    before = _put(settings, name, 0, 100)
    parent = _split(settings, name)
    after = _put(settings, name, 100, 100)
    assert len(list_shards(new_client(settings), name)) == 3

    batches: list[tuple[int, str, str]] = []

    def collect(batch, batch_id: int) -> None:
        batches.extend((batch_id, r["shard"], r["value"]) for r in batch.collect())

    frame = (spark.readStream.format("dsflow_kinesis").option("stream", name).options(**_options(settings))
             .option("max.records.per.batch", "1000").load())
    query = (frame.writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    assert Counter(v for _, _, v in batches) == Counter(json.dumps(r) for r in before + after)
    parent_last = max(b for b, s, _ in batches if s == parent["ShardId"])
    child_first = min(b for b, s, _ in batches if s != parent["ShardId"])
    assert parent_last < child_first


def test_aggregation_into_kinesis_through_dsflow_translation(spark, settings, tmp_path):
    """A changelog in a kinesis store read and written by dsflow's translated query (update mode through
    foreachBatch); shards inferred from the source. The last record per key equals a Counter reference."""
    from dsflow.adapters.spark.driver import start_query
    from dsflow.adapters.spark.translate import query_spec
    from dsflow.load.project import load_project
    from support.projects import make_project

    prefix = f"a{uuid.uuid4().hex[:6]}_"
    config = ("name: agg\ndefault:\n  store: kin\nenvironments:\n  dev:\n"
              f"    topic_prefix: {prefix}\n")
    stores = ("stores:\n  - name: kin\n    type: kinesis\n    properties:\n      region: us-east-1\n"
              "      endpoint: \"{{ var('kinesis') }}\"\n")
    sql = ("CREATE STREAM clicks (id BIGINT, page VARCHAR) WITH ('value.format' = 'json', 'topic.shards' = 2);\n"
           "CREATE CHANGELOG page_counts AS SELECT page, COUNT(*) AS n FROM clicks GROUP BY page;\n")
    root = make_project(tmp_path, {"dsflow.yml": config, "stores/kafka.yml": stores, "sql/all.sql": sql})
    project = load_project(root, variables={"kinesis": settings["endpoint"]})
    counts = project.relation("default.public.page_counts")
    assert (counts.store, counts.partitions) == ("kin", 2)
    for relation in project.relations:
        admin.ensure_stream(settings, relation.topic, relation.partitions)
    query = project.queries[0]
    clicks: list[dict] = []

    def run_once(first: int, count: int) -> dict:
        clicks.extend({"id": i, "page": f"p{i % 6}"} for i in range(first, first + count))
        put_json_lines(settings, f"{prefix}clicks", [json.dumps(c) for c in clicks[first:]], key_field="page")
        spec = query_spec(project, query, "t", str(tmp_path / "cp"), str(tmp_path / "status.json"))
        running = start_query(spark, spec, available_now=True)
        assert running.awaitTermination(180)
        assert running.exception() is None, running.exception()
        latest = {}
        for record in read_records(settings, f"{prefix}page_counts", timeout=1.0):  # shard order = write order
            latest[record["key"]] = json.loads(record["value"])["n"]
        return latest

    assert run_once(0, 120) == dict(Counter(c["page"] for c in clicks))
    assert run_once(120, 45) == dict(Counter(c["page"] for c in clicks))  # resumed: counts go on, none doubled


def test_starting_positions_and_parent_rule():
    """Pure: carried shard positions win over the starting position; a child waits for drained parents."""
    from dsflow.adapters.kinesis.offsets import eligible, initial_positions

    shards = [{"ShardId": "p", "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "9"}},
              {"ShardId": "a", "ParentShardId": "p", "SequenceNumberRange": {"StartingSequenceNumber": "10"}},
              {"ShardId": "b", "ParentShardId": "p", "SequenceNumberRange": {"StartingSequenceNumber": "11"}}]
    options = KinesisOptions.parse({"stream": "s", "starting.offsets": json.dumps({"a": "after:12"}),
                                    "starting.position": "latest"})
    assert initial_positions(shards, options.starting_position, None, options.starting_offsets, now_ms=5) == \
        {"p": "closed", "a": "after:12", "b": "at:5"}
    assert initial_positions(shards, "earliest", 7, None, now_ms=5) == {"p": "at:7", "a": "at:7", "b": "at:7"}
    assert [s["ShardId"] for s in eligible(shards, {"p": "after:3"})] == ["p"]
    assert [s["ShardId"] for s in eligible(shards, {"p": "closed"})] == ["p", "a", "b"]
    assert [s["ShardId"] for s in eligible(shards[1:], {})] == ["a", "b"]  # parent expired: not listed


def test_a_replay_that_misses_its_end_record_fails_instead_of_ending_elsewhere(settings: dict[str, str]) -> None:
    from dsflow.adapters.kinesis import client as kc
    from dsflow.adapters.kinesis.offsets import replay_range
    from dsflow.adapters.kinesis.records import put_json_lines
    from dsflow.errors import DsflowError

    name = _stream(settings, 1)
    assert put_json_lines(settings, name, [json.dumps({"id": i}) for i in range(6)]) == 6
    client = kc.new_client(settings)
    shard = kc.list_shards(client, name)[0]["ShardId"]
    records = replay_range(client, name, shard, "trim", "closed")
    assert [json.loads(r.data)["id"] for r in records] == list(range(6))
    third = records[2].sequence
    again = replay_range(client, name, shard, "trim", f"after:{third}")
    assert [r.sequence for r in again] == [r.sequence for r in records[:3]]
    with pytest.raises(DsflowError) as failed:  # an end no record has: the shard answers past it
        replay_range(client, name, shard, "trim", f"after:{int(third) + 1}")
    assert failed.value.code == "DSF-E709" and str(int(third) + 1) in str(failed.value)


def test_a_reader_whose_stream_was_deleted_or_created_again_fails_with_a_clear_error(settings) -> None:
    """Between two micro-batches the stream is deleted (its shard does not exist), then created again under the
    same name (its shard does not hold the checkpoint's sequence number): each is DSF-E763 naming the shard, not
    the SDK's exception, for whichever of listing the shards or reading one meets it first."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from dsflow.adapters.kinesis.offsets import read_shard
    from dsflow.errors import DsflowError

    name = _stream(settings, 1)
    _put(settings, name, 0, 5)
    reader = KinesisStreamReader(KinesisOptions.parse({"stream": name, **_options(settings)}))
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    [(shard, position)] = end.items()
    assert position.startswith("after:")
    client = new_client(settings)
    admin.delete_stream(settings, name)
    reads = (lambda: reader.latestOffset(end, ReadAllAvailable()), lambda: read_shard(client, name, shard, position, 9))
    for read in reads:
        with pytest.raises(DsflowError) as gone:
            read()
        assert gone.value.code == "DSF-E763" and name in str(gone.value)
    time.sleep(1.1)  # a creation time in another second, as any real recreation has
    assert admin.ensure_stream(settings, name, 1) is True
    admin.wait_active(settings, name)
    for read in reads:
        with pytest.raises(DsflowError) as recreated:
            read()
        assert recreated.value.code == "DSF-E763" and "created again" in str(recreated.value) \
            and position[6:] in str(recreated.value)


def test_a_failing_source_never_prints_a_secret_setting(spark, tmp_path, capfd):
    """Settings passed as secrets (`secret.options`, as the query driver names the store's env_var() values) are
    scrubbed in the data source's own processes: the error Spark reports and the traceback it prints into the log
    name the endpoint as <secret>, with no SDK error chained under it that would show it in clear."""
    dead = f"http://127.0.0.1:{free_port()}"
    options = {"kinesis.endpoint": dead, "kinesis.region": "us-east-1", "secret.options": "kinesis.endpoint"}
    frame = spark.readStream.format("dsflow_kinesis").option("stream", "nowhere").options(**options).load()
    query = (frame.writeStream.format("memory").queryName(f"q{uuid.uuid4().hex[:8]}")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as failed:
        query.awaitTermination(180)
    failure = str(failed.value)
    printed = capfd.readouterr()
    assert "DSF-E763" in failure and "<secret>" in failure
    host = dead.split("://", 1)[1]
    assert host not in failure
    assert host not in printed.err and host not in printed.out


def test_a_tail_reads_until_stopped_through_idle_time_and_a_reshard(settings):
    """A tail (read_records with `stop`) is positioned before `on_start`; it then gets every record put after it,
    also after idle seconds (reads used to end at 10 s idle and start again at "now") and from the children of a
    shard split under it; nothing put before it is read."""
    import threading

    name = _stream(settings, 1)
    _put(settings, name, 0, 5)  # before the tail: not read
    stop, started, got = threading.Event(), threading.Event(), []

    def tail() -> None:
        for record in read_records(settings, name, from_beginning=False, timeout=0.5, stop=stop,
                                   on_start=started.set):
            got.append(json.loads(record["value"])["id"])

    reader = threading.Thread(target=tail, daemon=True)
    reader.start()
    assert started.wait(30)
    time.sleep(1.1)  # kinesalite's arrival times have whole seconds: the records before are a second older
    first = _put(settings, name, 100, 10)
    time.sleep(12)  # idle for longer than the reads' `timeout` and the former 10 s window
    second = _put(settings, name, 200, 10)
    _split(settings, name)
    third = _put(settings, name, 300, 20)
    expected = sorted(r["id"] for r in first + second + third)
    deadline = time.monotonic() + 60
    while sorted(got) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    reader.join(10)
    assert not reader.is_alive()
    assert sorted(got) == expected
