"""A stream declared over a topic or Kinesis stream the user already has (issue 40, item 3), against Apache Kafka
and kinesalite: without a declared count it is adopted with the count it has (the plan says so, apply records it,
its records are kept and read, destroy leaves it); a declared count that differs is DSF-E420 from `plan`, at the
statement's file:line, before anything is applied."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.adapters.kafka.admin import TopicSpec, delete_topic, describe_topic, ensure_topic
from dsflow.adapters.kafka.client import produce_json_lines, read_to_end
from dsflow.adapters.kinesis import admin
from dsflow.adapters.kinesis.client import list_shards, new_client
from dsflow.adapters.kinesis.objects import count_records
from dsflow.adapters.kinesis.records import put_json_lines
from dsflow.cli import cli
from dsflow.core.plan import Action
from dsflow.engine import operations, topics
from dsflow.errors import DsflowError, ProjectError
from support.projects import KAFKA_KINESIS_STORES as STORES, make_project

pytestmark = pytest.mark.integration

CONFIG = """\
name: existing
default:
  database: tutorial
  schema: public
  store: kafka_store
"""

# the seed tutorial's source, over a stream the user already has; and a Kafka source over a topic they have
SOURCES = """\
CREATE STREAM pageviews_kinesis (viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('store' = 'kinesis_store', 'topic' = '{stream}', 'value.format' = 'json'{shards});

CREATE STREAM users_kafka (registertime BIGINT, userid VARCHAR, regionid VARCHAR)
  WITH ('store' = 'kafka_store', 'topic' = '{topic}', 'value.format' = 'json'{partitions});
"""

ROWS = [{"viewtime": 1000 + i, "userid": f"User_{i}", "pageid": f"Page_{i % 3}"} for i in range(12)]
USERS = [{"registertime": 2000 + i, "userid": f"User_{i}", "regionid": f"Region_{i % 4}"} for i in range(12)]


def _project(tmp_path: Path, name: str, sources: str) -> Path:
    return make_project(tmp_path / name, {"dsflow.yml": CONFIG, "stores/kafka.yml": STORES, "sql/sources.sql": sources})


def _user_owned(broker: str, kinesis: dict[str, str]) -> tuple[str, str]:
    """A 2-shard Kinesis stream and a 3-partition topic made outside dsflow, with records on every shard and
    partition (keys spread by hash)."""
    stream, topic = f"pv{uuid.uuid4().hex[:8]}", f"users{uuid.uuid4().hex[:8]}"
    assert admin.ensure_stream(kinesis, stream, 2)
    assert put_json_lines(kinesis, stream, [json.dumps(r) for r in ROWS], key_field="userid") == len(ROWS)
    ensure_topic(broker, TopicSpec(topic, 3, 1))
    assert produce_json_lines(broker, topic, [json.dumps(u) for u in USERS], key_field="userid") == len(USERS)
    shards = list_shards(new_client(kinesis), stream)
    assert len(shards) == 2
    assert len({r["partition"] for r in read_to_end(broker, topic)}) == 3  # records on every partition
    return stream, topic


def test_existing_stream_and_topic_are_adopted_with_their_counts(tmp_path: Path, broker: str,
                                                                 kinesis_endpoint: str) -> None:
    kinesis = {"endpoint": kinesis_endpoint, "region": "us-east-1"}
    stream, topic = _user_owned(broker, kinesis)
    root = _project(tmp_path, "adopt", SOURCES.format(stream=stream, topic=topic, shards="", partitions=""))
    loaded = operations.load(operations.Options(root, None, {"bootstrap": broker, "kinesis": kinesis_endpoint}))

    plan = operations.plan(loaded)
    changes = {c.address: c for c in plan.actionable if c.address.startswith("relation.")}
    pv, users = changes["relation.tutorial.public.pageviews_kinesis"], changes["relation.tutorial.public.users_kafka"]
    assert (pv.action, pv.after["partitions"], users.action, users.after["partitions"]) == \
        (Action.CREATE, 2, Action.CREATE, 3)
    assert (pv.physical, users.physical) == \
        (f"kinesis stream kinesis_store/{stream}", f"kafka topic kafka_store/{topic}")
    assert pv.effect.startswith("stream adopted as it is (2 shards): its records are kept and read")
    assert users.effect.startswith("topic adopted as it is (3 partitions): its records are kept and read")

    shown = CliRunner().invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", "--var",
                                     f"kinesis={kinesis_endpoint}", "plan"])
    assert shown.exit_code == 0, shown.output
    assert f"object: kinesis stream kinesis_store/{stream}\n      effect: stream adopted as it is (2 shards)" \
        in shown.output

    result = operations.apply(loaded, plan)
    assert result.ok, result.failed
    state = loaded.workspace.state_backend().read()
    for address, size in ((pv.address, 2), (users.address, 3)):
        deployed = state.resources[address]
        assert (deployed.data["partitions"], deployed.outputs["created_by_dsflow"]) == (size, False)
    # the logs as they were: same counts, every record kept, and read through the relations
    assert admin.describe_stream(kinesis, stream).open_shards == 2 and describe_topic(broker, topic).partitions == 3
    assert count_records(kinesis, stream) == len(ROWS)
    project = loaded.project
    for name, expected in (("pageviews_kinesis", ROWS), ("users_kafka", USERS)):
        read = list(topics.records(topics.resolve(project, name), True, len(expected), 10.0))
        assert sorted((r["value"] for r in read), key=json.dumps) == sorted(expected, key=json.dumps), name
    assert operations.plan(loaded).actionable == []  # planned again: nothing to do, no replacement

    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
    assert admin.describe_stream(kinesis, stream).open_shards == 2  # dsflow did not create them: kept
    assert count_records(kinesis, stream) == len(ROWS) and len(read_to_end(broker, topic)) == len(USERS)
    admin.delete_stream(kinesis, stream, wait=False)


def test_a_declared_count_that_differs_is_refused_by_plan(tmp_path: Path, broker: str,
                                                          kinesis_endpoint: str) -> None:
    kinesis = {"endpoint": kinesis_endpoint, "region": "us-east-1"}
    stream, topic = _user_owned(broker, kinesis)
    sources = SOURCES.format(stream=stream, topic=topic, shards=", 'topic.shards' = 1",
                             partitions=", 'topic.partitions' = 4")
    root = _project(tmp_path, "differs", sources)
    loaded = operations.load(operations.Options(root, None, {"bootstrap": broker, "kinesis": kinesis_endpoint}))

    with pytest.raises(ProjectError) as refused:
        operations.plan(loaded)
    found = {(d.code, d.location.file, d.location.line): d.message for d in refused.value.diagnostics}
    assert set(found) == {("DSF-E420", "sql/sources.sql", 1), ("DSF-E420", "sql/sources.sql", 4)}
    assert f"declares 'topic.shards' = 1, but the kinesis stream kinesis_store/{stream} exists already with 2 " \
           "shards" in found[("DSF-E420", "sql/sources.sql", 1)]
    assert f"declares 'topic.partitions' = 4, but the kafka topic kafka_store/{topic} exists already with 3 " \
           "partitions" in found[("DSF-E420", "sql/sources.sql", 4)]
    # nothing applied: no state, the logs untouched
    assert loaded.workspace.state_backend().read().resources == {}
    assert admin.describe_stream(kinesis, stream).open_shards == 2 and describe_topic(broker, topic).partitions == 3
    assert count_records(kinesis, stream) == len(ROWS) and len(read_to_end(broker, topic)) == len(USERS)

    fixed = sources.replace(", 'topic.shards' = 1", ", 'topic.shards' = 2").replace(" = 4", " = 3")
    (root / "sql/sources.sql").write_text(fixed)  # the count the logs have: adopted as they are
    loaded = operations.load(operations.Options(root, None, {"bootstrap": broker, "kinesis": kinesis_endpoint}))
    assert operations.apply(loaded, operations.plan(loaded)).ok
    assert admin.describe_stream(kinesis, stream).open_shards == 2 and count_records(kinesis, stream) == len(ROWS)
    admin.delete_stream(kinesis, stream, wait=False)


KAFKA_ONLY = """\
stores:
  - name: kafka_store
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
"""


def test_apply_refuses_a_plan_whose_observed_logs_changed_since(tmp_path: Path, broker: str) -> None:
    """Issue 41, item 1: the plan carries what the refresh saw, and apply looks again at the facts its changes rely
    on. A topic created outside after the plan (which would create it) and one deleted after the plan (which would
    adopt it) are DSF-E827, naming what changed, before anything is applied; planned again, both converge."""
    made, adopted = f"made{uuid.uuid4().hex[:8]}", f"adopted{uuid.uuid4().hex[:8]}"
    ensure_topic(broker, TopicSpec(adopted, 2, 1))
    sources = "\n".join(f"CREATE STREAM {name}_s (id BIGINT) WITH ('topic' = '{name}', 'value.format' = 'json');"
                        for name in (made, adopted))
    root = make_project(tmp_path / "stale", {"dsflow.yml": CONFIG, "stores/kafka.yml": KAFKA_ONLY,
                                            "sql/sources.sql": sources + "\n"})
    base = ["-C", str(root), "--var", f"bootstrap={broker}"]
    saved = tmp_path / "plan.json"
    assert CliRunner().invoke(cli, [*base, "plan", "--out", str(saved)]).exit_code == 0
    recorded = json.loads(saved.read_text())["observations"]
    assert recorded["refreshed"] is True
    assert recorded["log_sizes"] == {f"relation.tutorial.public.{made}_s": None,
                                     f"relation.tutorial.public.{adopted}_s": 2}

    ensure_topic(broker, TopicSpec(made, 3, 1))  # someone else's, made since: the plan would call it dsflow's
    assert delete_topic(broker, adopted)  # gone since: the plan would adopt what is no longer there
    result = CliRunner().invoke(cli, [*base, "apply", str(saved)])
    assert result.exit_code == 1 and isinstance(result.exception, DsflowError), result.output
    assert result.exception.code == "DSF-E827"
    assert f"relation.tutorial.public.{made}_s (create): kafka topic kafka_store/{made} was absent when the plan " \
           "was made, and is there with 3 partitions now" in str(result.exception)
    assert f"relation.tutorial.public.{adopted}_s (create): kafka topic kafka_store/{adopted} was there with 2 " \
           "partitions when the plan was made, and is absent now" in str(result.exception)
    loaded = operations.load(operations.Options(root, None, {"bootstrap": broker}))
    assert loaded.workspace.state_backend().read().resources == {}, "nothing applied"
    assert describe_topic(broker, adopted) is None

    plan = operations.plan(loaded)  # from what the systems show now: the new topic adopted, the other created
    assert operations.apply(loaded, plan).ok
    state = loaded.workspace.state_backend().read()
    assert state.resources[f"relation.tutorial.public.{made}_s"].outputs["created_by_dsflow"] is False
    assert describe_topic(broker, adopted) is not None
