"""dsflow.datagen: generators (pure) and producing to a real tansu broker (integration)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from dsflow import datagen
from dsflow.datagen import GENERATORS, Columns, DatagenSpec, Pageviews, Users, build_generator, run
from dsflow.errors import DsflowError

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- helpers


def new_topic(bootstrap: str, partitions: int = 3) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"datagen-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)]).values():
        future.result(timeout=15)
    return name


def consume(bootstrap: str, topic: str, expected: int, timeout: float = 30.0, linger: float = 0.5) -> list:
    """Read from offset 0 of every partition with assign() until `expected` records arrive.

    tansu's high watermark is wrong, so we count instead; after reaching `expected` we keep
    reading for `linger` seconds so that extra (duplicate) records would show up too.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        messages: list = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.2):
                assert msg.error() is None, msg.error()
                messages.append(msg)
            if len(messages) >= expected:
                deadline = min(deadline, time.monotonic() + linger)
        return messages
    finally:
        consumer.close()


def decoded(messages: list) -> list[tuple[str | None, dict]]:
    return [(m.key().decode() if m.key() is not None else None, json.loads(m.value())) for m in messages]


def start_cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "dsflow.datagen", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# ---------------------------------------------------------------- pure: generators and spec


def test_registry_holds_the_builtins():
    assert set(GENERATORS) == {"pageviews", "users", "columns", "nexmark_bids", "nexmark_auctions", "nexmark_persons"}
    assert isinstance(build_generator(DatagenSpec("t", "pageviews")), Pageviews)
    assert isinstance(build_generator(DatagenSpec("t", "users")), Users)


def test_pageviews_shape():
    rng = random.Random(1)
    before = time.time_ns() // 1_000_000
    for seq in range(200):
        key, rec = Pageviews().make(seq, rng)
        assert list(rec) == ["viewtime", "userid", "pageid", "id"]
        assert rec["id"] == seq and key == rec["userid"]
        assert rec["userid"] in {f"User_{i}" for i in range(1, 10)}
        assert rec["pageid"] in {f"Page_{i}" for i in range(1, 100)}
        assert isinstance(rec["viewtime"], int) and rec["viewtime"] >= before


def test_users_cycle_through_nine_keys():
    rng = random.Random(1)
    keys = [Users().make(seq, rng)[0] for seq in range(18)]
    assert keys == [f"User_{i}" for i in range(1, 10)] * 2
    _, rec = Users().make(0, rng)
    assert set(rec) == {"registertime", "userid", "regionid", "gender"}
    assert rec["regionid"] in {f"Region_{i}" for i in range(1, 10)}
    assert isinstance(rec["registertime"], int)


def test_columns_generator_types():
    gen = Columns([("id", "BIGINT"), ("n", "INT"), ("x", "DOUBLE"), ("name", "VARCHAR(20)"),
                   ("ok", "boolean"), ("ts", "TIMESTAMP")], key_columns=["name"])
    rng = random.Random(3)
    before = time.time_ns() // 1_000_000
    seen_bools = set()
    for seq in range(50):
        key, rec = gen.make(seq, rng)
        assert rec["id"] == seq
        assert type(rec["n"]) is int and type(rec["x"]) is float
        assert isinstance(rec["name"], str) and key == rec["name"]
        assert type(rec["ok"]) is bool
        assert type(rec["ts"]) is int and rec["ts"] >= before
        seen_bools.add(rec["ok"])
    assert seen_bools == {True, False}


def test_columns_keys_non_strings_as_json_and_defaults_to_null_key():
    key, rec = Columns([("id", "BIGINT"), ("flag", "BOOLEAN")], ["id"]).make(7, random.Random(0))
    assert key == "7"
    key, rec = Columns([("flag", "BOOLEAN")], ["flag"]).make(0, random.Random(0))
    assert key in ("true", "false")
    assert Columns([("id", "INT")]).make(1, random.Random(0)) == (None, {"id": 1})
    assert Columns([("id", "VARCHAR")]).make(4, random.Random(0)) == (None, {"id": "4"})


@pytest.mark.parametrize(
    ("columns", "keys"),
    [([("a", "DECIMAL(10,2)")], []), ([("a", "INT")], ["b"]), ([], [])],
)
def test_columns_errors_are_e713(columns, keys):
    with pytest.raises(DsflowError) as info:
        Columns(columns, keys)
    assert info.value.code == "DSF-E713" and info.value.hint


def test_unknown_generator_and_bad_spec():
    with pytest.raises(DsflowError) as info:
        build_generator(DatagenSpec("t", "nope"))
    assert info.value.code == "DSF-E712" and "pageviews" in info.value.hint
    for bad in ({"rate": -1}, {"count": -1}, {"start_seq": -2}):
        with pytest.raises(DsflowError) as info:
            DatagenSpec("t", **bad)
        assert info.value.code == "DSF-E714"


def test_same_seed_same_records_except_timestamps():
    def records(seed: int) -> list:
        rng = random.Random(seed)
        gen = Pageviews()
        return [{k: v for k, v in gen.make(s, rng)[1].items() if k != "viewtime"} for s in range(100)]

    assert records(5) == records(5)
    assert records(5) != records(6)


def test_pacer_deadlines_do_not_drift():
    now = [100.0]
    pacer = datagen._Pacer(10.0, clock=lambda: now[0])
    for _ in range(20):
        assert pacer.delay() == pytest.approx(0.0)
        pacer.advance()
        now[0] += 0.1 + 0.003  # late by 3 ms each time: stays "due now", no accumulated delay
    assert pacer.due == pytest.approx(102.0)
    now[0] = 200.0  # a long stall: backlog is capped at MAX_LAG_S instead of a 98 s burst
    pacer.advance()
    assert pacer.due == pytest.approx(200.0 - datagen.MAX_LAG_S)
    assert datagen._Pacer(0, clock=lambda: 0.0).delay() == 0.0


def test_spec_is_frozen():
    spec = DatagenSpec("t")
    with pytest.raises(AttributeError):
        spec.rate = 5  # type: ignore[misc]


# ---------------------------------------------------------------- integration: real broker


@pytest.mark.integration
def test_500_pageviews_arrive_exactly_once(broker):
    topic = new_topic(broker)
    assert run(broker, DatagenSpec(topic, "pageviews", rate=0, count=500, seed=1)) == 500
    records = decoded(consume(broker, topic, 500))
    assert sorted(rec["id"] for _, rec in records) == list(range(500))
    assert all(key == rec["userid"] for key, rec in records)


@pytest.mark.integration
def test_rate_limit(broker):
    topic = new_topic(broker, partitions=1)
    started = time.monotonic()
    assert run(broker, DatagenSpec(topic, "pageviews", rate=100, count=50)) == 50
    elapsed = time.monotonic() - started
    assert 0.45 <= elapsed < 5.0


@pytest.mark.integration
def test_start_seq_continues_ids_and_columns_roundtrip(broker):
    topic = new_topic(broker, partitions=2)
    spec = DatagenSpec(topic, "columns", rate=0, count=5, start_seq=10,
                       columns=(("id", "BIGINT"), ("city", "VARCHAR"), ("ts", "TIMESTAMP")), key_columns=("city",))
    assert run(broker, spec) == 5
    records = decoded(consume(broker, topic, 5))
    assert sorted(rec["id"] for _, rec in records) == [10, 11, 12, 13, 14]
    assert all(key == rec["city"] and isinstance(rec["ts"], int) for key, rec in records)


@pytest.mark.integration
def test_stop_event_ends_a_forever_run_and_progress_is_reported(broker, monkeypatch):
    monkeypatch.setattr(datagen, "PROGRESS_INTERVAL_S", 0.1)
    topic = new_topic(broker, partitions=1)
    stop = threading.Event()
    threading.Timer(0.6, stop.set).start()
    reports: list[int] = []
    started = time.monotonic()
    produced = run(broker, DatagenSpec(topic, "users", rate=20), stop, on_progress=reports.append)
    assert time.monotonic() - started < 3.0
    assert 3 <= produced <= 20
    assert len(reports) >= 3 and reports == sorted(reports) and reports[-1] <= produced
    assert len(consume(broker, topic, produced)) == produced  # flushed before returning


@pytest.mark.integration
def test_delivery_failure_is_e711():
    from dsflow.adapters.kafka.devbroker import free_port

    spec = DatagenSpec("nowhere", "pageviews", rate=0, count=1)
    with pytest.raises(DsflowError) as info:
        run(f"127.0.0.1:{free_port()}", spec, config={"message.timeout.ms": "1000", "log_level": "0"})
    assert info.value.code == "DSF-E711"


@pytest.mark.integration
def test_cli_with_count_exits_zero(broker):
    topic = new_topic(broker)
    proc = start_cli("--bootstrap", broker, "--topic", topic, "--generator", "pageviews", "--rate", "0",
                     "--count", "20", "--seed", "3")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "done, 20 records produced" in out
    assert sorted(rec["id"] for _, rec in decoded(consume(broker, topic, 20))) == list(range(20))


@pytest.mark.integration
def test_cli_sigterm_stops_cleanly_and_flushes(broker):
    topic = new_topic(broker, partitions=1)
    proc = start_cli("--bootstrap", broker, "--topic", topic, "--rate", "50")
    try:
        assert "started" in proc.stdout.readline()
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    total = int(out.split("done, ")[1].split()[0])
    assert total > 0
    records = decoded(consume(broker, topic, total))
    assert sorted(rec["id"] for _, rec in records) == list(range(total))


def test_cli_usage_errors_exit_2():
    proc = start_cli("--bootstrap", "x:1", "--topic", "t", "--generator", "nope")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "invalid choice" in err
    proc = start_cli("--bootstrap", "x:1", "--topic", "t", "--generator", "columns", "--column", "oops")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "NAME:TYPE" in err


def test_cli_bad_column_type_exits_1():
    proc = start_cli("--bootstrap", "x:1", "--topic", "t", "--generator", "columns", "--column", "a:DECIMAL")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "DSF-E713" in err
