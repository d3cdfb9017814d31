"""A plan that deletes records says so (DESTROYS ~N, counted on the broker) and apply refuses it unless the user
allowed it; 'lifecycle.prevent_destroy' refuses even then; a topic dsflow did not create is never deleted.
Every promise is checked against the topic's records on the real broker, not against the plan text."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from dsflow.engine import operations
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic, list_topics
from dsflow.adapters.kafka.client import produce_json_lines, read_to_end
from dsflow.core.plan import Action
from dsflow.core.safety import Allowance
from dsflow.errors import DsflowError
from support import drivers
from support.brokers import both_brokers

pytestmark = pytest.mark.integration

CONFIG = "name: {name}\ndefault:\n  store: k\nenvironments:\n  dev:\n    vars: {{bootstrap: 'unset:1'}}\n"
STORES = "stores:\n  - name: k\n    type: kafka\n    bootstrap_servers: \"{{ var('bootstrap') }}\"\n"


def _project(tmp_path: Path, sql: str, broker: str) -> tuple[Path, operations.Options, str]:
    prefix = f"dl{uuid.uuid4().hex[:6]}"
    root = tmp_path / prefix
    root.mkdir()
    (root / "dsflow.yml").write_text(CONFIG.format(name=prefix))
    (root / "stores.yml").write_text(STORES)
    (root / "rel.sql").write_text(sql.replace("{p}", prefix))
    return root, operations.Options(root, None, {"bootstrap": broker}), prefix


def _apply(options: operations.Options, allowance: Allowance | None = None):
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    result = operations.apply(loaded, plan, allowance=allowance)
    assert result.ok, result.failed
    return plan


def _dsflow(root: Path, broker: str, *args: str) -> subprocess.CompletedProcess:
    """The real `dsflow` executable (its exit codes and messages), without a terminal."""
    return subprocess.run(["dsflow", "-C", str(root), "--var", f"bootstrap={broker}", *args], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=300)


def _held(broker: str, topic: str) -> list[str]:
    return [r["value"] for r in read_to_end(broker, topic)]


def _fill(broker: str, topic: str, count: int) -> list[str]:
    produce_json_lines(broker, topic, [json.dumps({"id": i}) for i in range(count)])
    return _held(broker, topic)


def test_replacing_a_topic_with_records_is_refused_until_allowed(tmp_path: Path, broker: str) -> None:
    sql = ("CREATE CHANGELOG events (id BIGINT, PRIMARY KEY (id)) WITH ('topic' = '{p}_events', "
           "'value.format' = 'json', 'topic.partitions' = 2);\n")
    root, options, prefix = _project(tmp_path, sql, broker)
    _apply(options)
    before = _fill(broker, f"{prefix}_events", 37)
    # more partitions of a changelog: its keys would move to other partitions, so the topic is replaced
    (root / "rel.sql").write_text(sql.replace("'topic.partitions' = 2", "'topic.partitions' = 3")
                                 .replace("{p}", prefix))

    loaded = operations.load(options)
    plan = operations.plan(loaded)
    [change] = plan.actionable
    assert change.action is Action.REPLACE and change.destroys is not None
    assert change.destroys.records == len(before) == 37, "the plan counts what the topic holds"
    assert change.destroys.object == f"kafka topic k/{prefix}_events"
    serial = loaded.workspace.state_backend().read().serial
    with pytest.raises(DsflowError) as refused:
        operations.apply(loaded, plan)
    assert refused.value.code == "DSF-E822" and "--allow-destroy relation.default.public.events" in str(refused.value)
    assert _held(broker, f"{prefix}_events") == before, "a refused plan deleted records"
    assert loaded.workspace.state_backend().read().serial == serial, "a refused plan changed state"

    shown = _dsflow(root, broker, "apply", "--auto-approve")
    assert shown.returncode == 1 and "DSF-E822" in shown.stderr and "DESTROYS: ~37 records" in shown.stdout
    assert _held(broker, f"{prefix}_events") == before, "--auto-approve alone deleted records"

    shown = _dsflow(root, broker, "apply", "--auto-approve", "--allow-destroy", "relation.default.public.events")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert _held(broker, f"{prefix}_events") == [], "the allowed replacement did what its plan said"


def test_prevent_destroy_refuses_a_delete_and_destroy_even_when_allowed(tmp_path: Path, broker: str) -> None:
    sql = ("CREATE STREAM keep (id BIGINT) WITH ('topic' = '{p}_keep', 'value.format' = 'json', "
           "'lifecycle.prevent_destroy' = 'true');\n")
    root, options, prefix = _project(tmp_path, sql, broker)
    _apply(options)
    before = _fill(broker, f"{prefix}_keep", 12)
    (root / "rel.sql").write_text("")
    loaded = operations.load(options)
    with pytest.raises(DsflowError) as refused:
        operations.plan(loaded)
    assert refused.value.code == "DSF-E823"
    shown = _dsflow(root, broker, "destroy", "--auto-approve")
    assert shown.returncode == 1 and "DSF-E823" in shown.stderr
    shown = _dsflow(root, broker, "apply", "--auto-approve", "--allow-data-loss")
    assert shown.returncode == 1 and "DSF-E823" in shown.stderr
    assert _held(broker, f"{prefix}_keep") == before

    (root / "rel.sql").write_text(sql.replace("'true'", "'false'").replace("{p}", prefix))
    plan = _apply(options)
    assert [(c.action, c.reason) for c in plan.actionable] == [(Action.UPDATE, "prevent_destroy changed (in place)")]
    (root / "rel.sql").write_text("")
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert [c.destroys.records for c in plan.actionable] == [12]
    assert operations.apply(loaded, plan, allowance=Allowance(addresses=frozenset({"default.public.keep"}))).ok
    assert f"{prefix}_keep" not in list_topics(broker)


def test_a_topic_dsflow_did_not_create_is_kept_and_needs_no_allowance(tmp_path: Path, broker: str) -> None:
    root, options, prefix = _project(tmp_path, "CREATE STREAM theirs (id BIGINT) WITH ('topic' = '{p}_theirs', "
                                               "'value.format' = 'json');\n", broker)
    ensure_topic(broker, TopicSpec(f"{prefix}_theirs", 1, 1))
    before = _fill(broker, f"{prefix}_theirs", 5)
    _apply(options)
    (root / "rel.sql").write_text("")
    plan = _apply(options)
    [change] = plan.actionable
    assert change.action is Action.DELETE and change.destroys is None and "kept" in change.effect
    assert _held(broker, f"{prefix}_theirs") == before


def _ids(broker: str, topic: str) -> list[int]:
    return [json.loads(v)["id"] for v in _held(broker, topic)]


def _wait_ids(broker: str, topic: str, expected: set[int], timeout: float = 240) -> list[int]:
    from support.waiting import wait_for

    def complete() -> list[int] | None:
        ids = _ids(broker, topic)
        return ids if expected <= set(ids) else None

    return wait_for(complete, timeout, f"ids {min(expected)}-{max(expected)} in {topic}", interval=2)


def test_renaming_a_relation_on_the_same_topic_is_a_move_that_keeps_records_and_offsets(
        tmp_path: Path, broker: str) -> None:
    sql = ("CREATE STREAM {name} (id BIGINT) WITH ('topic' = '{p}_raw', 'value.format' = 'json', "
           "'topic.partitions' = 2);\n"
           "CREATE STREAM copied WITH ('topic' = '{p}_copied') AS SELECT id FROM {name};\n")
    root, options, prefix = _project(tmp_path, sql.replace("{name}", "events"), broker)
    try:
        _apply(options)
        produce_json_lines(broker, f"{prefix}_raw", [json.dumps({"id": i}) for i in range(100)])
        _wait_ids(broker, f"{prefix}_copied", set(range(100)))

        (root / "rel.sql").write_text(sql.replace("{name}", "events_raw").replace("{p}", prefix))
        loaded = operations.load(options)
        plan = operations.plan(loaded)
        changes = {c.address: c for c in plan.actionable}
        moved = changes["relation.default.public.events_raw"]
        assert (moved.action, moved.moved_from) == (Action.UPDATE, "relation.default.public.events")
        assert "relation.default.public.events" not in changes and not plan.destroying
        assert changes["query.default.public.copied"].category.value == "keep_checkpoint", \
            "its source only changed its name (core/moves.py): the same checkpoint on the same topic"
        assert operations.apply(loaded, plan).ok, "a move needs no allowance: nothing is destroyed"

        assert sorted(_ids(broker, f"{prefix}_raw")) == list(range(100)), "the moved topic lost records"
        produce_json_lines(broker, f"{prefix}_raw", [json.dumps({"id": i}) for i in range(100, 150)])
        copied = _wait_ids(broker, f"{prefix}_copied", set(range(150)))
        assert sorted(copied) == list(range(150)), "the plan promised nothing reprocessed or skipped"
        state = loaded.workspace.state_backend().read()
        assert "relation.default.public.events" not in state.resources
        assert state.resources["relation.default.public.events_raw"].outputs["created_by_dsflow"] is True
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def test_adding_a_column_to_a_query_sink_keeps_its_topic_and_checkpoint(tmp_path: Path, broker: str) -> None:
    """A column added to a query's output, and a field added to a STRUCT column of its source (compatible, as a
    nullable column is): both relations updated in place, the query keeps its checkpoint."""
    sql = ("CREATE STREAM events (id BIGINT, name VARCHAR, info STRUCT<a VARCHAR{field}>) "
           "WITH ('topic' = '{p}_events', 'value.format' = 'json');\n"
           "CREATE STREAM copied WITH ('topic' = '{p}_copied') AS SELECT {columns} FROM events;\n")
    root, options, prefix = _project(tmp_path, sql.replace("{columns}", "id, info").replace("{field}", ""), broker)

    def event(i: int) -> str:
        return json.dumps({"id": i, "name": f"n{i}", "info": {"a": f"a{i}", "b": i}})
    try:
        _apply(options)
        produce_json_lines(broker, f"{prefix}_events", [event(i) for i in range(20)])
        _wait_ids(broker, f"{prefix}_copied", set(range(20)))
        before = _held(broker, f"{prefix}_copied")

        (root / "rel.sql").write_text(sql.replace("{columns}", "id, name, info").replace("{field}", ", b BIGINT")
                                      .replace("{p}", prefix))
        loaded = operations.load(options)
        plan = operations.plan(loaded)
        changes = {c.address: c for c in plan.actionable}
        assert changes["relation.default.public.events"].action is Action.UPDATE, changes
        assert "info retyped STRUCT<a VARCHAR> -> STRUCT<a VARCHAR, b BIGINT>" in \
            changes["relation.default.public.events"].reason
        assert changes["relation.default.public.copied"].action is Action.UPDATE
        assert changes["query.default.public.copied"].category.value == "keep_checkpoint"
        assert not plan.destroying
        assert operations.apply(loaded, plan).ok, "adding a column needs no allowance: nothing is destroyed"

        produce_json_lines(broker, f"{prefix}_events", [event(i) for i in range(20, 30)])
        ids = _wait_ids(broker, f"{prefix}_copied", set(range(30)))
        assert sorted(ids) == list(range(30)), "the plan promised nothing reprocessed or skipped"
        held = _held(broker, f"{prefix}_copied")
        assert set(before) <= set(held), "records written before the change were kept"
        old = [json.loads(v) for v in before]
        assert all(r["info"] == {"a": f"a{r['id']}"} and "name" not in r for r in old), old
        new = [json.loads(v) for v in held if json.loads(v)["id"] >= 20]
        assert all(r["name"] == f"n{r['id']}" and r["info"] == {"a": f"a{r['id']}", "b": r["id"]} for r in new), \
            "records written after the change carry the column and the struct's new field"
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


@both_brokers
def test_raising_a_sources_partitions_keeps_the_topic_sized_from_it(tmp_path: Path, broker: str) -> None:
    """Issue 20, defect 3, and partitions added in place (issue 39): raising a source's partitions adds them to its
    topic where the broker has CreatePartitions (Apache Kafka). The plan says so and destroys nothing; the source's
    records and the topic sized from it stay (same topic id, same records, same size); the running query is not
    restarted and reads the new partitions: every id reaches the sink once. Where the broker cannot (tansu), the
    source is replaced, with an allowance."""
    from dsflow.adapters.kafka import client
    from dsflow.adapters.kafka.admin import describe_topic, topic_ids

    sql = ("CREATE STREAM events (id BIGINT) WITH ('topic' = '{p}_events', 'value.format' = 'json', "
           "'topic.partitions' = 2);\n"
           "CREATE STREAM copied WITH ('topic' = '{p}_copied') AS SELECT id FROM events;\n")
    root, options, prefix = _project(tmp_path, sql, broker)
    events, copied = f"{prefix}_events", f"{prefix}_copied"
    try:
        _apply(options)
        produce_json_lines(broker, events, [json.dumps({"id": i}) for i in range(40)])
        _wait_ids(broker, copied, set(range(40)))
        before, source_before = _held(broker, copied), _held(broker, events)
        ids_before = topic_ids(broker, [events, copied])
        drivers = _driver_pids(options)

        (root / "rel.sql").write_text(sql.replace("'topic.partitions' = 2", "'topic.partitions' = 4")
                                      .replace("{p}", prefix))
        loaded = operations.load(options)
        plan = operations.plan(loaded)
        changes = {c.address: c for c in plan.actionable}
        assert "relation.default.public.copied" not in changes, "the topic sized from the source is kept"
        grown = changes["relation.default.public.events"]
        if grown.action is Action.REPLACE:  # a broker without CreatePartitions
            assert [c.address for c in plan.destroying] == ["relation.default.public.events"]
            allowed = Allowance(addresses=frozenset({"relation.default.public.events"}))
            assert operations.apply(loaded, plan, allowance=allowed).ok
            start = 40
        else:
            assert (grown.action, grown.reason) == (Action.UPDATE, "partitions raised 2 -> 4 (in place: partitions "
                                                                   "added)"), grown
            assert plan.destroying == [] and set(changes) == {"relation.default.public.events"}
            assert operations.apply(loaded, plan).ok
            assert _held(broker, events) == source_before, "adding partitions changed the source's records"
            assert topic_ids(broker, [events, copied]) == ids_before, "a topic was created again"
            assert _driver_pids(options) == drivers, "the running query was restarted"
            start = 40

        assert _held(broker, copied) == before, "the kept topic lost or gained records"
        assert describe_topic(broker, copied).partitions == 2
        assert describe_topic(broker, events).partitions == 4
        errors = client.DeliveryErrors()
        producer = client.new_producer(client.client_config(broker), errors)
        for i in range(start, start + 40):  # ten to each partition, the new ones too
            client.produce_one(producer, events, json.dumps({"id": i}), None, i % 4)
        client.flush_or_raise(producer, events, 40, errors)
        ids = _wait_ids(broker, copied, set(range(start + 40)))
        assert sorted(ids) == list(range(start + 40)), "every id reached the sink exactly once"
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def _driver_pids(options: operations.Options) -> dict[str, tuple[int, str | None]]:
    """Each query's process and run (a restart in its own driver keeps the PID, not the run)."""
    return drivers.runs(options)
