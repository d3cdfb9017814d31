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


def test_an_import_adopts_a_topic_made_outside_dsflow_and_grows_it_to_the_declaration(tmp_path, broker):
    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic

    topic = f"import_{uuid.uuid4().hex[:8]}"
    ensure_topic(broker, TopicSpec(name=topic, partitions=1))
    produce_json_lines(broker, topic, [f'{{"id": {i}}}' for i in range(3)])
    entries = f"import:\n  - to: keep\n    id: {topic}\n"
    root = make_project(tmp_path, {"sql/all.sql": _sql(topic), "import.yml": entries})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    [change] = [c for c in plan.actionable if c.address == KEEP]
    assert (change.action, change.imported) == (Action.UPDATE, topic)
    assert "exists with 1 partition); partitions raised 1 -> 2 (in place" in change.reason
    assert operations.apply(loaded, plan).ok

    state = operations.load(options).workspace.state_backend().read()
    entry = state.resources[KEEP]
    assert entry.outputs["created_by_dsflow"] is False and entry.outputs["imported"] == topic
    spec = describe_topic(broker, topic)
    assert spec is not None and spec.partitions == 2 and _held(broker, topic) == 3
    loaded = operations.load(options)
    assert not operations.plan(loaded).actionable, "imported and grown: nothing left to do"
    destroy = operations.plan(loaded, destroy=True)
    [gone] = [c for c in destroy.actionable if c.address == KEEP]
    assert gone.destroys is None and "kept: dsflow did not create it" in (gone.effect or "")


def test_dsflow_import_records_a_matching_topic_as_it_is(tmp_path, broker):
    from click.testing import CliRunner

    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
    from dsflow.cli import cli

    topic = f"import_{uuid.uuid4().hex[:8]}"
    ensure_topic(broker, TopicSpec(name=topic, partitions=2))
    root = make_project(tmp_path, {"sql/all.sql": _sql(topic)})
    args = ["-C", str(root), "--var", f"bootstrap={broker}"]
    refused = CliRunner().invoke(cli, [*args, "import", "keep", "not_the_topic", "--auto-approve"])
    assert refused.exit_code == 1 and "DSF-E867" in str(getattr(refused.exception, "code", refused.output))
    result = CliRunner().invoke(cli, [*args, "import", "keep", topic, "--auto-approve"])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert f"<= {KEEP}  (import {topic})" in result.output and "1 to import" in result.output
    state = operations.load(operations.Options(root, None, {"bootstrap": broker})).workspace.state_backend().read()
    assert state.resources[KEEP].outputs["created_by_dsflow"] is False


def test_an_import_of_a_topic_that_does_not_exist_is_refused_before_anything_is_applied(tmp_path, broker):
    from dsflow.errors import DsflowError

    topic = f"absent_{uuid.uuid4().hex[:8]}"
    root = make_project(tmp_path, {"sql/all.sql": _sql(topic), "import.yml": "import:\n  - to: keep\n"})
    loaded = operations.load(operations.Options(root, None, {"bootstrap": broker}))
    with pytest.raises(DsflowError) as raised:
        operations.plan(loaded)
    [problem] = raised.value.diagnostics
    assert problem.code == "DSF-E868" and "does not exist" in problem.message
    assert problem.location is not None and problem.location.file.endswith("all.sql")
    assert describe_topic(broker, topic) is None
