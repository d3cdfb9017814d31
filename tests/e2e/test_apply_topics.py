"""Apply and destroy of topics on a real broker: ownership, partition mismatch, locking, saved plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.engine import operations
from dsflow.adapters.kafka.admin import TopicSpec, describe_topic, ensure_topic, list_topics
from dsflow.cli import cli
from dsflow.core.plan import Action
from dsflow.errors import DsflowError, ProjectError

pytestmark = pytest.mark.integration


def _project(tmp_path: Path, prefix: str, sql: str) -> Path:
    root = tmp_path / prefix
    root.mkdir()
    (root / "dsflow.yml").write_text(f"name: {prefix}\ndefault:\n  store: k\n"
                                     "environments:\n  dev:\n    vars: {bootstrap: 'unset:1'}\n")
    (root / "stores.yml").write_text("stores:\n  - name: k\n    type: kafka\n"
                                     "    bootstrap_servers: \"{{ var('bootstrap') }}\"\n")
    (root / "rel.sql").write_text(sql)
    return root


def _options(root: Path, broker: str) -> operations.Options:
    return operations.Options(root, None, {"bootstrap": broker})


def test_destroy_never_deletes_a_topic_dsflow_did_not_create(tmp_path: Path, broker: str) -> None:
    ensure_topic(broker, TopicSpec("own_pre_existing", 1, 1))
    root = _project(tmp_path, "own", """
        CREATE STREAM a (id BIGINT) WITH ('topic' = 'own_pre_existing', 'value.format' = 'json');
        CREATE STREAM b (id BIGINT) WITH ('topic' = 'own_new', 'value.format' = 'json', 'topic.partitions' = 3);
    """)
    options = _options(root, broker)
    loaded = operations.load(options)
    assert operations.apply(loaded, operations.plan(loaded)).ok
    assert describe_topic(broker, "own_new").partitions == 3
    state = loaded.workspace.state_backend().read()
    assert state.resources["relation.default.public.a"].outputs["created_by_dsflow"] is False
    assert state.resources["relation.default.public.b"].outputs["created_by_dsflow"] is True

    destroy = operations.plan(loaded, destroy=True)
    assert [c.action for c in destroy.actionable] == [Action.DELETE] * len(destroy.actionable)
    assert operations.apply(loaded, destroy).ok
    topics = set(list_topics(broker))
    assert "own_pre_existing" in topics and "own_new" not in topics


def test_topic_made_between_plan_and_apply_with_other_partitions_fails_apply_and_keeps_what_succeeded(
        tmp_path: Path, broker: str) -> None:
    """A topic that exists when `plan` runs is refused there (DSF-E420, tests/e2e/test_existing_logs.py); one created
    by someone else after the plan is found by apply: before anything when the plan saw it absent (DSF-E827, the
    plan's observations), else by the executor, and apply keeps what it applied before."""
    root = _project(tmp_path, "mismatch", """
        CREATE STREAM a_ok (id BIGINT) WITH ('topic' = 'mismatch_ok', 'value.format' = 'json');
        CREATE STREAM b_bad (id BIGINT)
          WITH ('topic' = 'mismatch_topic', 'value.format' = 'json', 'topic.partitions' = 4);
    """)
    loaded = operations.load(_options(root, broker))
    plan = operations.plan(loaded)
    unseen = operations.plan(loaded, do_refresh=False)  # made without looking: apply has nothing to check it against
    ensure_topic(broker, TopicSpec("mismatch_topic", 2, 1))
    with pytest.raises(DsflowError) as stale:
        operations.apply(loaded, plan)
    assert stale.value.code == "DSF-E827"
    assert "relation.default.public.b_bad (create): kafka topic " in str(stale.value)
    assert "/mismatch_topic was absent when the plan was made, and is there with 2 partitions now" in str(stale.value)
    assert loaded.workspace.state_backend().read().resources == {}, "refused before anything was applied"
    result = operations.apply(loaded, unseen)
    assert not result.ok
    change, error = result.failed
    assert change.address == "relation.default.public.b_bad"
    assert isinstance(error, DsflowError) and error.code == "DSF-E701"
    state = loaded.workspace.state_backend().read()
    assert "relation.default.public.a_ok" in state.resources
    assert "relation.default.public.b_bad" not in state.resources
    with pytest.raises(ProjectError) as again:  # planned again: refused before anything is applied
        operations.plan(loaded)
    assert [(d.code, d.location.line) for d in again.value.diagnostics] == [("DSF-E420", 3)]


def test_saved_plan_applies_once_and_a_stale_plan_is_refused(tmp_path: Path, broker: str) -> None:
    root = _project(tmp_path, "saved",
                    "CREATE STREAM s (id BIGINT) WITH ('topic' = 'saved_s', 'value.format' = 'json');")
    runner = CliRunner()
    args = ["-C", str(root), "--var", f"bootstrap={broker}"]
    planfile = tmp_path / "plan.json"
    result = runner.invoke(cli, [*args, "plan", "--out", str(planfile), "--detailed-exitcode"])
    assert result.exit_code == 3, result.output
    assert json.loads(planfile.read_text())["changes"]
    result = runner.invoke(cli, [*args, "apply", str(planfile)])
    assert result.exit_code == 0, result.output
    assert "saved_s" in list_topics(broker)
    loaded = operations.load(_options(root, broker))
    from dsflow.core.plan import Plan

    stale = Plan.model_validate_json(planfile.read_text())
    with pytest.raises(DsflowError) as err:
        operations.apply(loaded, stale)
    assert err.value.code == "DSF-E820"
    result = runner.invoke(cli, [*args, "plan", "--detailed-exitcode"])
    assert result.exit_code == 0 and "No changes" in result.output


def test_second_apply_fails_fast_while_state_is_locked(tmp_path: Path, broker: str) -> None:
    root = _project(tmp_path, "locked",
                    "CREATE STREAM s (id BIGINT) WITH ('topic' = 'locked_s', 'value.format' = 'json');")
    loaded = operations.load(_options(root, broker))
    backend = loaded.workspace.state_backend()
    with backend.lock("apply") as held:
        with pytest.raises(DsflowError) as err:
            operations.apply(loaded, operations.plan(loaded))
        assert err.value.code == "DSF-E802"
        assert held.id in str(err.value.hint) and "apply" in err.value.message
    assert operations.apply(loaded, operations.plan(loaded)).ok


def test_dead_broker_is_a_clear_error(tmp_path: Path) -> None:
    from dsflow.adapters.kafka.devbroker import free_port

    root = _project(tmp_path, "dead", "CREATE STREAM s (id BIGINT) WITH ('value.format' = 'json');")
    loaded = operations.load(_options(root, f"127.0.0.1:{free_port()}"))
    result = operations.apply(loaded, operations.plan(loaded))
    assert not result.ok
    assert isinstance(result.failed[1], DsflowError) and result.failed[1].code == "DSF-E702"


def test_topic_produce_and_print_through_the_cli(tmp_path: Path, broker: str) -> None:
    root = _project(tmp_path, "cliio", "CREATE STREAM clicks (id BIGINT, page VARCHAR) "
                                       "WITH ('topic' = 'cliio_clicks', 'value.format' = 'json');")
    runner = CliRunner()
    args = ["-C", str(root), "--var", f"bootstrap={broker}"]
    assert runner.invoke(cli, [*args, "apply", "--auto-approve"]).exit_code == 0
    lines = "\n".join(json.dumps({"id": i, "page": f"p{i}"}) for i in range(5)) + "\n"
    result = runner.invoke(cli, [*args, "topic", "produce", "clicks", "--key-field", "page"], input=lines)
    assert result.exit_code == 0 and "Produced 5" in result.output, result.output
    result = runner.invoke(cli, [*args, "topic", "print", "clicks", "--limit", "5", "--timeout", "10"])
    printed = [json.loads(line) for line in result.output.splitlines()]
    assert sorted(r["value"]["id"] for r in printed) == list(range(5))  # decoded with the relation's format
    assert {r["key"] for r in printed} == {f"p{i}" for i in range(5)}
    bad = runner.invoke(cli, [*args, "topic", "produce", "clicks"], input='{"id": 1}\n{oops\n')
    assert bad.exit_code == 1 and "line 2" in (bad.output + str(bad.exception))


def test_drift_missing_topic_is_shown_and_repaired(tmp_path: Path, broker: str) -> None:
    from dsflow.adapters.kafka.admin import delete_topic

    root = _project(tmp_path, "drift", """
        CREATE STREAM a (id BIGINT) WITH ('topic' = 'drift_a', 'value.format' = 'json', 'topic.partitions' = 2);
        CREATE STREAM b (id BIGINT) WITH ('topic' = 'drift_b', 'value.format' = 'json');
    """)
    loaded = operations.load(_options(root, broker))
    assert operations.apply(loaded, operations.plan(loaded)).ok
    delete_topic(broker, "drift_a")
    delete_topic(broker, "drift_b")
    ensure_topic(broker, TopicSpec("drift_b", 3, 1))
    plan = operations.plan(loaded)
    drift = {c.address: (c.action, c.drift, c.reason) for c in plan.actionable}
    assert drift == {
        "relation.default.public.a": (Action.UPDATE, True, "drift: topic is missing"),
        "relation.default.public.b": (Action.UPDATE, True, "drift: topic has 3 partitions, the project declares 1"),
    }
    refresh_only = operations.plan(loaded, refresh_only=True)
    assert {c.address for c in refresh_only.actionable} == set(drift)
    result = operations.apply(loaded, plan)
    assert describe_topic(broker, "drift_a").partitions == 2
    assert not result.ok and result.failed[1].code == "DSF-E701"


def test_saved_plan_is_refused_when_the_project_changed_since(tmp_path: Path, broker: str) -> None:
    root = _project(tmp_path, "edited",
                    "CREATE STREAM s (id BIGINT) WITH ('topic' = 'edited_s', 'value.format' = 'json');")
    loaded = operations.load(_options(root, broker))
    saved = operations.plan(loaded)
    (root / "more.sql").write_text("CREATE STREAM t (id BIGINT) WITH ('topic' = 'edited_t', 'value.format' = 'json');")
    with pytest.raises(DsflowError) as err:
        operations.apply(operations.load(_options(root, broker)), saved)
    assert err.value.code == "DSF-E821"
    assert "edited_s" not in list_topics(broker)


def test_restarted_generator_continues_its_ids(tmp_path: Path, broker: str) -> None:
    from dsflow.adapters.kafka.client import read_to_end

    root = _project(tmp_path, "gen", "CREATE STREAM gen_events (id BIGINT, kind VARCHAR) "
                                     "WITH ('topic' = 'gen_events', 'value.format' = 'json');")
    (root / "gen.yml").write_text("datagen:\n  - name: feed\n    relation: gen_events\n    generator: columns\n"
                                  "    rate: 0\n    count: 30\n")
    loaded = operations.load(_options(root, broker))
    assert operations.apply(loaded, operations.plan(loaded)).ok
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(read_to_end(broker, "gen_events")) < 30:
        time.sleep(0.5)
    (root / "gen.yml").write_text((root / "gen.yml").read_text().replace("count: 30", "count: 50"))
    loaded = operations.load(_options(root, broker))
    plan = operations.plan(loaded)
    assert [(c.address, c.action) for c in plan.actionable] == [("datagen.feed", Action.REPLACE)]
    assert operations.apply(loaded, plan).ok
    ids: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(ids) < 50:
        time.sleep(0.5)
        ids = [json.loads(r["value"])["id"] for r in read_to_end(broker, "gen_events")]
    assert sorted(ids) == list(range(50)), "a restarted generator must continue its ids, not repeat them"
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok
