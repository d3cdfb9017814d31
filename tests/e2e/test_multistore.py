"""The multi-store tutorial end to end through `dsflow apply`: a Kinesis stream and a Kafka stream, a CSAS
moving the Kinesis stream into Kafka, and an interval join of both written to a new Kinesis stream whose
shards are inferred. Outputs are compared with a Python reference; destroy removes streams and topics.
Also the inference rules for topic.partitions/replicas/shards (validation only).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest
from click.testing import CliRunner

from dsflow.engine import operations
from dsflow.adapters.kafka.admin import describe_topic
from dsflow.adapters.kafka.client import read_to_end
from dsflow.adapters.kinesis import admin
from dsflow.adapters.kinesis.client import list_shards, new_client
from dsflow.adapters.kinesis.records import read_records
from dsflow.cli import cli
from support.projects import KAFKA_KINESIS_STORES as STORES, make_project
from support.waiting import wait_for

pytestmark = pytest.mark.integration

CONFIG = """\
name: multistore
default:
  database: tutorial
  schema: public
  store: kafka_store
default_environment: dev
environments:
  dev:
    topic_prefix: "{prefix}"
"""

SOURCES = """\
CREATE STREAM pageviews_kinesis (viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('store' = 'kinesis_store', 'value.format' = 'json', 'topic.shards' = 2, 'timestamp' = 'viewtime');

CREATE STREAM users_kafka (registertime BIGINT, userid VARCHAR, regionid VARCHAR, gender VARCHAR)
  WITH ('store' = 'kafka_store', 'value.format' = 'json', 'topic.partitions' = 1, 'timestamp' = 'registertime');
"""

QUERIES = """\
CREATE STREAM pageviews_kafka WITH ('store' = 'kafka_store', 'topic.partitions' = 1, 'topic.replicas' = 1) AS
  SELECT * FROM pageviews_kinesis;

CREATE STREAM pageviews_enriched WITH ('store' = 'kinesis_store') AS
  SELECT p.userid AS userid, p.pageid, u.regionid, u.gender
  FROM pageviews_kinesis p JOIN users_kafka u WITHIN 5 MINUTES ON p.userid = u.userid;
"""

BASE = 1_700_000_000_000


def _project(tmp_path, sources: str = SOURCES, queries: str = QUERIES, prefix: str = "t_"):
    return make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "stores/kafka.yml": STORES,
                                   "sql/sources.sql": sources, "sql/queries.sql": queries})


def _cli(root, broker: str, kinesis: str, *args: str, stdin: str | None = None):
    result = CliRunner().invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "--var", f"kinesis={kinesis}",
                                      *args], input=stdin)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def _reference(pageviews: list[dict], users: list[dict]) -> Counter:
    out = Counter()
    for p in pageviews:
        for u in users:
            if p["userid"] == u["userid"] and abs(p["viewtime"] - u["registertime"]) <= 5 * 60_000:
                out[(p["userid"], p["pageid"], u["regionid"], u["gender"])] += 1
    return out


def _wait_for(read, expected: Counter, timeout: float = 240) -> Counter:
    deadline = time.monotonic() + timeout
    got = Counter()
    while time.monotonic() < deadline:
        got = read()
        if sum(got.values()) >= sum(expected.values()):
            return got
        time.sleep(2)
    return got


def test_multistore_tutorial(tmp_path, broker, kinesis_endpoint):
    prefix = f"m{uuid.uuid4().hex[:6]}_"
    root = _project(tmp_path, prefix=prefix)
    kinesis = {"endpoint": kinesis_endpoint, "region": "us-east-1"}
    loaded = operations.load(operations.Options(root, None, {"bootstrap": broker, "kinesis": kinesis_endpoint}))
    enriched = loaded.project.relation("tutorial.public.pageviews_enriched")
    assert (enriched.store, enriched.partitions) == ("kinesis_store", 2)  # shards inferred from the Kinesis source
    _cli(root, broker, kinesis_endpoint, "apply", "--auto-approve")
    try:
        assert admin.describe_stream(kinesis, f"{prefix}pageviews_kinesis").open_shards == 2
        assert admin.describe_stream(kinesis, f"{prefix}pageviews_enriched").open_shards == 2
        users = [{"registertime": BASE + 1_000 * i, "userid": f"User_{i}", "regionid": f"Region_{i % 3}",
                  "gender": "F" if i % 2 else "M"} for i in range(10)]
        pageviews = [{"viewtime": BASE + 50 * i, "userid": f"User_{i % 12}", "pageid": f"Page_{i % 5}"}
                     for i in range(240)]
        _cli(root, broker, kinesis_endpoint, "topic", "produce", "users_kafka", "--key-field", "userid",
             stdin="\n".join(json.dumps(u) for u in users))
        _cli(root, broker, kinesis_endpoint, "topic", "produce", "pageviews_kinesis", "--key-field", "userid",
             stdin="\n".join(json.dumps(p) for p in pageviews))

        expected_copy = Counter(json.dumps(p, sort_keys=True) for p in pageviews)
        copied = _wait_for(lambda: Counter(json.dumps(json.loads(r["value"]), sort_keys=True) for r in read_to_end(
            broker, f"{prefix}pageviews_kafka")), expected_copy)
        assert copied == expected_copy
        shards = {s["ShardId"] for s in list_shards(new_client(kinesis), f"{prefix}pageviews_kinesis")}

        def caught_up() -> list[dict]:
            entries = operations.status(operations.load(operations.Options(
                root, None, {"bootstrap": broker, "kinesis": kinesis_endpoint})), with_dead_letters=False)
            found = [e for e in entries if f"{prefix}pageviews_kinesis" in (e.get("lag_millis") or {})]
            return found if found and all(e["lag_max_millis"] == 0 for e in found) else []

        readers = wait_for(caught_up, 120, "the Kinesis readers' lag (oldest unread record's age) to reach 0 ms")
        assert all(set(e["lag_millis"][f"{prefix}pageviews_kinesis"]) == shards for e in readers)

        expected_join = _reference(pageviews, users)
        assert sum(expected_join.values()) == 200  # User_10 and User_11 have no user record

        def joined() -> Counter:
            rows = (json.loads(r["value"]) for r in read_records(kinesis, f"{prefix}pageviews_enriched", timeout=1.0))
            return Counter((r["userid"], r["pageid"], r["regionid"], r["gender"]) for r in rows)

        assert _wait_for(joined, expected_join) == expected_join
    finally:
        _cli(root, broker, kinesis_endpoint, "destroy", "--auto-approve")
    for name in ("pageviews_kinesis", "pageviews_enriched"):
        assert admin.describe_stream(kinesis, f"{prefix}{name}") is None
    for name in ("users_kafka", "pageviews_kafka"):
        assert describe_topic(broker, f"{prefix}{name}") is None


def _codes(tmp_path, sources: str, queries: str) -> list[str]:
    from dsflow.load.project import check_project

    root = _project(tmp_path, sources, queries)
    result = check_project(root, None, {"bootstrap": "127.0.0.1:9", "kinesis": "http://127.0.0.1:9"})
    return sorted(d.code for d in result.diagnostics)


def test_inference_rules(tmp_path):
    # into Kafka from Kinesis: partitions and replicas are required
    assert _codes(tmp_path / "a", SOURCES, "CREATE STREAM k WITH ('store' = 'kafka_store') AS "
                                           "SELECT * FROM pageviews_kinesis;") == ["DSF-E111"]
    assert _codes(tmp_path / "b", SOURCES, "CREATE STREAM k WITH ('store' = 'kafka_store', 'topic.partitions' = 1) "
                                           "AS SELECT * FROM pageviews_kinesis;") == ["DSF-E111"]
    # into Kinesis from Kafka only: topic.shards is required
    assert _codes(tmp_path / "c", SOURCES, "CREATE STREAM s WITH ('store' = 'kinesis_store') AS "
                                           "SELECT * FROM users_kafka;") == ["DSF-E112"]
    # properties of the other store type
    assert _codes(tmp_path / "d", SOURCES.replace("'topic.shards' = 2", "'topic.partitions' = 2"), "") == ["DSF-E110"]
    assert _codes(tmp_path / "e", SOURCES, "CREATE STREAM k WITH ('topic.shards' = 2) AS "
                                           "SELECT * FROM users_kafka;") == ["DSF-E110"]
    # every value format fits a Kinesis stream (avro needs the store's registry); partition keys are text
    assert _codes(tmp_path / "h", SOURCES.replace("'value.format' = 'json', 'topic.shards'",
                                                  "'value.format' = 'avro', 'topic.shards'"), "")[:1] == ["DSF-E122"]
    assert _codes(tmp_path / "i", SOURCES.replace("'value.format' = 'json', 'topic.shards'",
                                                  "'value.format' = 'long', 'topic.shards'"), "") == ["DSF-E124"]
    assert _codes(tmp_path / "j", SOURCES.replace("'value.format' = 'json', 'topic.shards'",
                                                  "'value.format' = 'json', 'key.format' = 'long', 'topic.shards'"),
                  "") == ["DSF-E114"]
    assert _codes(tmp_path / "f", SOURCES, QUERIES) == []
    root = _project(tmp_path / "g", SOURCES, "")
    (root / "gen.yml").write_text("datagen:\n  - name: feed\n    relation: pageviews_kinesis\n")
    from dsflow.load.project import check_project

    found = check_project(root, None, {"bootstrap": "127.0.0.1:9", "kinesis": "http://127.0.0.1:9"}).diagnostics
    assert [d.code for d in found] == ["DSF-E113"]


def test_inferred_sizes(tmp_path):
    from dsflow.load.project import load_project

    queries = QUERIES + """\
CREATE STREAM users_copy AS SELECT * FROM users_kafka;
CREATE STREAM pv_copy AS SELECT * FROM pageviews_kinesis WHERE pageid <> 'Page_1';
CREATE STREAM pv_sized WITH ('store' = 'kinesis_store', 'topic.shards' = 4) AS SELECT * FROM pageviews_kinesis;
"""
    root = _project(tmp_path, SOURCES.replace("'topic.partitions' = 1", "'topic.partitions' = 3"), queries)
    project = load_project(root, variables={"bootstrap": "127.0.0.1:9", "kinesis": "http://127.0.0.1:9"})
    sizes = {r.name: (r.store, r.partitions, r.replicas) for r in project.relations}
    assert sizes["users_copy"] == ("kafka_store", 3, 1)  # inferred from the Kafka source
    assert sizes["pv_copy"] == ("kinesis_store", 2, 1)  # same store as its source, shards inferred
    assert sizes["pv_sized"] == ("kinesis_store", 4, 1)
    assert sizes["pageviews_enriched"] == ("kinesis_store", 2, 1)


def test_apply_drift_and_destroy_of_kinesis_streams(tmp_path, broker, kinesis_endpoint):
    """apply creates streams with their shards; refresh finds a missing stream and another shard count;
    destroy deletes what dsflow created and leaves a stream that existed before."""
    from dsflow.core.plan import Action

    prefix = f"d{uuid.uuid4().hex[:6]}_"
    kinesis = {"endpoint": kinesis_endpoint, "region": "us-east-1"}
    assert admin.ensure_stream(kinesis, f"{prefix}kept", 1)  # exists before dsflow
    sources = """\
CREATE STREAM made (id BIGINT) WITH ('store' = 'kinesis_store', 'value.format' = 'json', 'topic.shards' = 2);
CREATE STREAM kept (id BIGINT) WITH ('store' = 'kinesis_store', 'value.format' = 'json');
"""
    root = _project(tmp_path, sources, "", prefix=prefix)
    options = operations.Options(root, None, {"bootstrap": broker, "kinesis": kinesis_endpoint})
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    assert admin.describe_stream(kinesis, f"{prefix}made").open_shards == 2
    assert [c.address for c in operations.plan(loaded).actionable] == []

    admin.delete_stream(kinesis, f"{prefix}made")
    drift = {c.address: (c.action, c.reason) for c in operations.plan(loaded).actionable}
    assert drift == {"relation.tutorial.public.made": (Action.UPDATE, "drift: Kinesis stream is missing")}
    assert operations.apply(loaded, operations.plan(loaded)).ok
    assert admin.describe_stream(kinesis, f"{prefix}made").open_shards == 2  # recreated

    client = admin.new_client(kinesis)
    shard = admin.list_shards(client, f"{prefix}kept")[0]
    client.split_shard(StreamName=f"{prefix}kept", ShardToSplit=shard["ShardId"], NewStartingHashKey=str(2 ** 127))
    admin.wait_active(kinesis, f"{prefix}kept")
    drift = {c.address: (c.action, c.reason) for c in operations.plan(loaded).actionable}
    assert drift == {
        "relation.tutorial.public.kept": (Action.UPDATE, "drift: stream has 2 open shards, the project declares 1")}
    result = operations.apply(loaded, operations.plan(loaded))
    assert not result.ok and result.failed[1].code == "DSF-E769"  # resharded by hand: not reverted

    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    assert admin.describe_stream(kinesis, f"{prefix}made") is None
    assert admin.describe_stream(kinesis, f"{prefix}kept") is not None  # dsflow did not create it
    admin.delete_stream(kinesis, f"{prefix}kept")
