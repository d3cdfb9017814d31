"""Readers outside the project (docs/plan.md, 'Contracts and readers of a changed relation'): the refresh asks the
real Apache Kafka broker which consumer groups are registered on the topic of a relation the plan changes, and the
plan names them. A group that committed offsets on the topic is named, one that read another topic is not, and
dsflow's own groups (an exactly-once writer's ledger, `dsflow.<query>...`) are left out. No query runs (a
relations-only project)."""

from __future__ import annotations

import uuid

import pytest

from dsflow.adapters.kafka.client import produce_json_lines
from dsflow.cli.render import plan_text
from dsflow.core.plan import Action
from dsflow.engine import operations
from dsflow.errors import ProjectError
from support.projects import make_project

pytestmark = pytest.mark.integration

ORDERS = "relation.analytics.public.orders"


def _sql(topic: str, columns: str = "id BIGINT") -> str:
    return (f"CREATE STREAM orders ({columns}) WITH ('topic' = '{topic}', 'value.format' = 'json', "
            "'contract' = 'enforced');\n"
            f"CREATE STREAM other (id BIGINT) WITH ('topic' = '{topic}_other', 'value.format' = 'json');\n")


def _commit(broker: str, group: str, topic: str, records: int) -> None:
    """A consumer of group `group` reads `records` records of `topic` and commits its offsets, as a service would."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        seen = 0
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen += 1
            if seen >= records:
                break
        assert seen >= records, f"{group} read {seen} of {records} records of {topic}"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def test_plan_names_the_consumer_groups_on_a_changed_relations_topic(tmp_path, broker):
    topic = f"orders_{uuid.uuid4().hex[:8]}"
    root = make_project(tmp_path, {"sql/all.sql": _sql(topic)})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    produce_json_lines(broker, topic, [f'{{"id": {i}}}' for i in range(3)])
    produce_json_lines(broker, f"{topic}_other", ['{"id": 1}'])
    billing, audit = f"billing-{topic}", f"audit-{topic}"
    _commit(broker, billing, topic, 3)
    _commit(broker, audit, f"{topic}_other", 1)
    _commit(broker, f"dsflow.{topic}.ledger.0", topic, 1)

    (root / "sql/all.sql").write_text(_sql(topic, "id BIGINT, amount DOUBLE"))  # a column added: in place
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    [change] = plan.actionable
    assert (change.address, change.action) == (ORDERS, Action.UPDATE)
    assert change.consumers == [billing]
    assert plan.observations.consumer_groups == {ORDERS: [billing]}
    assert f"consumers: {billing} (consumer groups on its log, outside the project)" in \
        plan_text(plan.model_dump(mode="json"))

    (root / "sql/all.sql").write_text(_sql(topic, "amount DOUBLE"))  # its contract broken: refused before refresh
    loaded = operations.load(options)
    with pytest.raises(ProjectError) as refused:
        operations.plan(loaded)
    assert [d.code for d in refused.value.diagnostics] == ["DSF-E896"]
    assert "column 'id' dropped or renamed" in refused.value.diagnostics[0].message
