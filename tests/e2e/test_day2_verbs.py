"""Day-2 verbs on one deployment, checked by id in the real broker's topics (issue 42 items 2 and 5): `dsflow pause`
stops a query on its checkpoint (plan shows it paused, not drift; status says paused; records wait), `dsflow resume`
starts it again on it (no id lost or doubled), `--replace` rebuilds it from the earliest offset (as many records as
its estimate said, every one written again into the sink the plan names), and `--reset-checkpoint` starts it at its
sources' end (refused without the acknowledgement; the records it skips, as many as the plan said, never reach the
sink, those produced after it do, and nothing earlier is written again). Both queries run in one shared application
(`runtime.isolation: shared`): the other one keeps the host up, so no step pays a JVM start."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from dsflow.adapters.kafka.client import produce_json_lines
from dsflow.core.categories import Category
from dsflow.core.safety import Allowance
from dsflow.engine import operations, pausing
from dsflow.errors import DsflowError
from test_data_loss import _ids, _project, _wait_ids

from dsflow.engine.eventlog import local_actor

pytestmark = pytest.mark.integration

CONFIG = ("name: {name}\ndefault:\n  store: k\nruntime:\n  isolation: shared\n"
          "environments:\n  dev:\n    vars: {{bootstrap: 'unset:1'}}\n")
SQL = ("CREATE STREAM events (id BIGINT) WITH ('topic' = '{p}_events', 'value.format' = 'json');\n"
       "CREATE STREAM copied WITH ('topic' = '{p}_copied') AS SELECT id FROM events;\n"
       "CREATE STREAM negatives WITH ('topic' = '{p}_negatives') AS SELECT id FROM events WHERE id < 0;\n")
QUERY = "query.default.public.copied"
SINK = "relation.default.public.copied"


def _produce(broker: str, topic: str, ids: range) -> None:
    produce_json_lines(broker, topic, [json.dumps({"id": i}) for i in ids])


def _state(options: operations.Options):
    return operations.load(options).workspace.state_backend().read()


def _counts(broker: str, topic: str) -> Counter:
    return Counter(_ids(broker, topic))


def test_pause_resume_replace_and_reset_checkpoint_keep_their_promises_in_the_data(tmp_path: Path,
                                                                                   broker: str) -> None:
    root, options, prefix = _project(tmp_path, SQL, broker)
    (root / "dsflow.yml").write_text(CONFIG.format(name=prefix))
    source, sink = f"{prefix}_events", f"{prefix}_copied"
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok
        _produce(broker, source, range(10))
        _wait_ids(broker, sink, set(range(10)))

        _pause_and_resume(options, broker, source, sink)
        _replace(options, broker, sink)
        _reset_checkpoint(options, broker, source, sink)
        _events_tell_what_happened(root, broker, options)
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def _pause_and_resume(options: operations.Options, broker: str, source: str, sink: str) -> None:
    loaded = operations.load(options)
    pausing.pause(loaded.project, loaded.workspace, QUERY)
    [entry] = [e for e in operations.status(loaded, with_dead_letters=False) if e["address"] == QUERY]
    assert entry["state"] == "paused"
    plan = operations.plan(loaded)
    assert not plan.actionable and plan.paused == [QUERY], "paused: neither drift nor a restart"
    _produce(broker, source, range(10, 20))
    time.sleep(5)
    assert set(_ids(broker, sink)) == set(range(10)), "a paused query reads nothing"

    pausing.resume(loaded.project, loaded.workspace, QUERY)
    _wait_ids(broker, sink, set(range(20)))
    assert _counts(broker, sink) == Counter(range(20)), "resumed on its checkpoint: no id lost or written twice"
    assert "paused" not in _state(options).resources[QUERY].outputs


def _replace(options: operations.Options, broker: str, sink: str) -> None:
    loaded = operations.load(options)
    plan = operations.plan(loaded, forced=operations.Forced(replace=frozenset({QUERY})))
    [change] = plan.actionable
    assert (change.category, change.forced, change.duplicates) == (Category.REPLAY, "replace", [SINK])
    assert change.estimate is not None and change.estimate.records == 20, "the source's 20 records are replayed"
    assert operations.apply(loaded, plan).ok

    def twice() -> bool:
        return _counts(broker, sink) == Counter({i: 2 for i in range(20)})

    from support.waiting import wait_for

    wait_for(twice, 240, "every replayed id a second time in the sink", interval=2)
    last = _state(options).history(QUERY)[-1]
    assert (last.forced, last.category, last.stopped_at) == ("replace", "replay", None)


def _reset_checkpoint(options: operations.Options, broker: str, source: str, sink: str) -> None:
    loaded = operations.load(options)
    pausing.pause(loaded.project, loaded.workspace, QUERY)  # what follows waits unread: the reset skips it
    _produce(broker, source, range(20, 30))
    forced = operations.Forced(reset_checkpoint=frozenset({QUERY}))
    plan = operations.plan(loaded, forced=forced)
    [change] = plan.actionable
    assert change.category is Category.RESET_CHECKPOINT and change.skips is not None
    assert change.skips.records == 10, "the ten records produced while it was paused"
    with pytest.raises(DsflowError) as refused:
        operations.apply(loaded, plan)
    assert refused.value.code == "DSF-E822"
    assert _state(options).resources[QUERY].outputs.get("paused"), "refused: nothing was touched"

    assert operations.apply(loaded, plan, allowance=Allowance(addresses=frozenset({QUERY}))).ok
    _produce(broker, source, range(30, 40))
    _wait_ids(broker, sink, set(range(30, 40)))
    counts = _counts(broker, sink)
    assert not set(counts) & set(range(20, 30)), "the skipped records never reach the sink"
    assert counts == Counter({i: 2 for i in range(20)}) + Counter(range(30, 40)), \
        "the sink keeps its data, nothing before the reset is written again, everything after it once"
    last = _state(options).history(QUERY)[-1]
    assert (last.forced, last.category, last.skipped_records) == ("reset_checkpoint", "reset_checkpoint", 10)
    assert "paused" not in _state(options).resources[QUERY].outputs


def _events_tell_what_happened(root: Path, broker: str, options: operations.Options) -> None:
    """The event log (issue 42 item 6) beside the local state: each step above as an event by this OS user, the query
    versions it started and stopped as the ledger records them, and the same log through `dsflow query` on
    sys.events, sys.queries and sys.relations."""
    from click.testing import CliRunner

    from dsflow.cli import cli

    def dsflow(*args: str):
        ran = CliRunner().invoke(cli, ["-C", str(root), "--var", f"bootstrap={broker}", *args])
        assert ran.exit_code == 0, ran.output
        return ran.stdout

    events = [json.loads(line) for line in dsflow("events", "--json").splitlines()]
    mine = [json.loads(line) for line in dsflow("events", "--json", "--object", QUERY).splitlines()]
    assert mine == [e for e in events if e["object"] == QUERY]
    named = [json.loads(line) for line in dsflow("events", "--json", "--object", "copied").splitlines()]
    assert named == [e for e in events if e["object"] in (QUERY, SINK)], "a name: the query and its sink"
    assert [e["kind"] for e in mine] == ["apply", "start", "pause", "resume", "apply", "stop", "start", "pause",
                                         "apply", "stop", "start"], [(e["kind"], e["detail"]) for e in mine]
    assert {e["actor"] for e in events} == {local_actor()} and "apply_failed" not in {e["kind"] for e in events}
    state = _state(options)
    history = state.history(QUERY)
    assert [(e["detail"]["version"], e["detail"]["checkpoint"], e["detail"].get("forced")) for e in mine
            if e["kind"] == "start"] == [(h.version, h.checkpoint, h.forced) for h in history]
    assert [e["detail"]["stop_offsets"] for e in mine if e["kind"] == "stop"] == [
        h.stop_offsets for h in history if h.stopped_at is not None]
    created = {e["object"] for e in events if e["kind"] == "apply" and e["detail"]["action"] == "create"}
    assert created == set(state.resources), "the first apply created every object"
    assert [e["detail"]["action"] for e in mine if e["kind"] == "apply"] == ["create", "replace", "replace"]
    later = dsflow("events", "--json", "--since", mine[7]["time"]).splitlines()
    assert [json.loads(line) for line in later] == [e for e in events if e["time"] > mine[7]["time"]]

    by_kind = json.loads(dsflow("query", "--json", f"SELECT kind, COUNT(*) AS n FROM sys.events WHERE object = "
                                f"'{QUERY}' GROUP BY kind ORDER BY kind"))
    assert {r["kind"]: r["n"] for r in by_kind} == Counter(e["kind"] for e in mine)
    [row] = json.loads(dsflow("query", "--json", "SELECT address, version, category, checkpoint, paused "
                              f"FROM sys.queries WHERE name = '{QUERY.removeprefix('query.')}'"))
    deployed = state.resources[QUERY]
    assert row == {"address": QUERY, "version": deployed.outputs["version"], "category": history[-1].category,
                   "checkpoint": deployed.outputs["checkpoint"], "paused": 0}
    relations = json.loads(dsflow("query", "--json", "SELECT address, topic FROM sys.relations ORDER BY address"))
    assert [r["address"] for r in relations] == sorted(a for a in state.resources if a.startswith("relation."))
    assert all(r["topic"] for r in relations)
