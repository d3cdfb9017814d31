"""A `removed:` entry against the test broker (docs/plan.md, 'Forgetting without destroying'): a topic dsflow
created and that holds records is forgotten, not deleted. The plan counts the records that stay; apply takes it out
of the state and records it as forgotten; the topic and every record are still there afterwards, and declaring it
again adopts it as it is. No query runs (a relations-only project)."""

from __future__ import annotations

import uuid

import pytest

from dsflow.adapters.kafka.admin import describe_topic
from dsflow.adapters.kafka.client import produce_json_lines
from dsflow.core.plan import Action
from dsflow.engine import operations
from support.projects import make_project

pytestmark = pytest.mark.integration

KEEP = "relation.analytics.public.keep"


def _sql(topic: str) -> str:
    return f"CREATE STREAM keep (id BIGINT) WITH ('topic' = '{topic}', 'value.format' = 'json', " \
           "'topic.partitions' = 2);\n"


def _held(broker: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker, "group.id": f"t{uuid.uuid4().hex}"})
    try:
        return sum(high - low for low, high in (consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                                                for p in range(2)))
    finally:
        consumer.close()


def test_a_removed_topic_is_forgotten_with_its_records_and_adopted_again(tmp_path, broker):
    topic = f"forget_{uuid.uuid4().hex[:8]}"
    root = make_project(tmp_path, {"sql/all.sql": _sql(topic)})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    produce_json_lines(broker, topic, [f'{{"id": {i}}}' for i in range(5)])

    (root / "sql" / "all.sql").write_text("-- keep left the project\n")
    (root / "removed.yml").write_text(f"removed:\n  - address: {KEEP}\n")
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    [change] = plan.actionable
    assert (change.address, change.action, change.destroys) == (KEEP, Action.FORGET, None)
    assert change.effect == "topic kept, ~5 records stay; dsflow no longer manages it"
    assert operations.apply(loaded, plan).ok  # no --allow-destroy: nothing is destroyed

    state = operations.load(options).workspace.state_backend().read()
    assert KEEP not in state.resources
    [forgotten] = state.forgotten
    assert (forgotten.address, forgotten.kept, forgotten.object) == (KEEP, "kept", change.physical)
    spec = describe_topic(broker, topic)
    assert spec is not None and spec.partitions == 2 and _held(broker, topic) == 5

    (root / "sql" / "all.sql").write_text(_sql(topic))
    (root / "removed.yml").unlink()
    loaded = operations.load(options)
    again = operations.plan(loaded)
    [create] = again.actionable
    assert create.action is Action.CREATE and "adopted as it is" in (create.effect or "")
