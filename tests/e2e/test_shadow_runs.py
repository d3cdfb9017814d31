"""Shadow runs on the real broker and Spark (issue 44 item 2): the changed versions of two deployed queries run on
the same 10,000 source records into their own `__shadow` topics, beside the live ones, in one shared application.

A stream whose change does not alter its rows diffs empty over all 10,000; a changelog whose change does alters
exactly the keys a plain-Python reference of the input says (one key gone, the others' counts). The plan shows the
queries' own changes and nothing of the shadows; `shadow promote` applies the stream's change (every id once across
it) and removes its shadow; the changelog's replay through blue/green, with a catch-up bound of 0 s no new version
meets, fails and leaves production and the shadow as they were; `shadow stop` deletes the shadow's topic and
checkpoint and forgets it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsflow.adapters.kafka.admin import list_topics
from dsflow.adapters.kafka.client import produce_json_lines
from dsflow.engine import operations, shadow
from dsflow.errors import DsflowError
from test_data_loss import _project, _wait_ids

pytestmark = pytest.mark.integration

CONFIG = ("name: {name}\ndefault:\n  store: k\nruntime:\n  isolation: shared\n"
          "environments:\n  dev:\n    vars: {{bootstrap: 'unset:1'}}\n")
SOURCE = ("CREATE STREAM events (id BIGINT, k VARCHAR, amount BIGINT) WITH ('topic' = '{p}_events', "
          "'value.format' = 'json', 'topic.partitions' = 2);\n")
LIVE = (SOURCE + "CREATE STREAM copied WITH ('topic' = '{p}_copied') AS SELECT id, k, amount FROM events;\n"
        "CREATE CHANGELOG per_k WITH ('topic' = '{p}_per_k') AS SELECT k, COUNT(*) AS n FROM events GROUP BY k;\n")
CANDIDATE = (SOURCE + "CREATE STREAM copied WITH ('topic' = '{p}_copied') AS "
             "SELECT id, k, amount FROM events WHERE amount >= 0;\n"  # every amount is: the same rows
             "CREATE CHANGELOG per_k WITH ('topic' = '{p}_per_k') AS SELECT k, COUNT(*) AS n FROM events "
             "WHERE amount >= 10 AND k <> 'u5' GROUP BY k;\n")
ROLES = """\
roles:
  - name: reader
    grants:
      - {privilege: USAGE, on: database.default}
      - {privilege: USAGE, on: schema.default.public}
      - {privilege: SELECT, on: relation.default.public.per_k}
  - name: operator
    grants:
      - {privilege: USAGE, on: database.default}
      - {privilege: USAGE, on: schema.default.public}
      - {privilege: MANAGE, on: query.default.public.per_k}
users:
  - name: erin
    roles: [reader]
  - name: alice
    roles: [operator]
"""
STREAM = "query.default.public.copied"
CHANGELOG = "query.default.public.per_k"
RECORDS = 10_000


def _rows() -> list[dict]:
    return [{"id": i, "k": f"u{i % 37}", "amount": (i * 7919) % 100} for i in range(RECORDS)]


def test_a_shadow_diffs_empty_when_rows_do_not_change_and_finds_exactly_the_rows_that_do(tmp_path: Path,
                                                                                        broker: str) -> None:
    root, options, prefix = _project(tmp_path, LIVE, broker)
    (root / "dsflow.yml").write_text(CONFIG.format(name=prefix))
    (root / "roles.yml").write_text(ROLES)
    rows = _rows()
    try:
        loaded = operations.load(options)
        assert operations.apply(loaded, operations.plan(loaded)).ok
        produce_json_lines(broker, f"{prefix}_events", [json.dumps(r) for r in rows], key_field="id")
        _wait_ids(broker, f"{prefix}_copied", set(range(RECORDS)))

        with pytest.raises(DsflowError) as same:
            shadow.start(loaded.project, loaded.workspace, "copied")
        assert same.value.code == "DSF-E941", "the project's version is the deployed one: no candidate"
        (root / "rel.sql").write_text(CANDIDATE.replace("{p}", prefix))
        loaded = operations.load(options)
        live = loaded.workspace.state_backend().read().resources
        for query in (STREAM, CHANGELOG):
            run = shadow.start(loaded.project, loaded.workspace, query)
            assert run.start_offsets == {f"{prefix}_events": {"0": 0, "1": 0}}, "from where the live output began"
        with pytest.raises(DsflowError) as again:
            shadow.start(loaded.project, loaded.workspace, "relation.default.public.per_k")  # by the relation it writes
        assert again.value.code == "DSF-E943"
        _plan_leaves_shadows_alone(options, prefix)
        _stream_diffs_empty(loaded, prefix)
        found = _changelog_diff_is_the_reference(root, broker, loaded, rows)
        _api_serves_it_under_the_sink_grant(root, broker, found)
        _promote(root, broker, options, prefix, rows, live)
        _stop_deletes_what_the_shadow_made(loaded, broker, prefix)
        resources = loaded.workspace.state_backend().read().resources
        assert resources[CHANGELOG] == live[CHANGELOG], "the changelog's failed promotion left it as it was"
    finally:
        loaded = operations.load(options)
        for query in loaded.workspace.state_backend().read().shadows:
            shadow.stop(loaded.project, loaded.workspace, query)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def _plan_leaves_shadows_alone(options: operations.Options, prefix: str) -> None:
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    changed = {c.address for c in plan.actionable}
    assert {a for a in changed if not a.startswith("grant.")} == {STREAM, CHANGELOG}, "the queries' own changes"
    assert changed - {STREAM, CHANGELOG} <= {"grant.operator.manage.query.default.public.per_k"}, "and the grant on one"
    assert "__shadow" not in json.dumps(plan.model_dump(mode="json"))
    state = loaded.workspace.state_backend().read()
    assert set(state.shadows) == {STREAM, CHANGELOG} and not [a for a in state.resources if "shadow" in a]


def _stream_diffs_empty(loaded: operations.Loaded, prefix: str) -> None:
    found = shadow.diff(loaded.project, loaded.workspace, "copied", wait=300)
    assert found.empty, found.model_dump()
    assert (found.live_records, found.shadow_records, found.same) == (RECORDS, RECORDS, RECORDS)
    [(topic, parts)] = found.offsets.items()
    assert topic == f"{prefix}_events" and sorted(parts) == ["0", "1"] and sum(map(int, parts.values())) == RECORDS


def _changelog_diff_is_the_reference(root: Path, broker: str, loaded: operations.Loaded, rows: list[dict]) -> None:
    live = Counter(r["k"] for r in rows)
    candidate = Counter(r["k"] for r in rows if r["amount"] >= 10 and r["k"] != "u5")
    found = shadow.diff(loaded.project, loaded.workspace, CHANGELOG, wait=300)
    assert [r.value for r in found.only_live] == [{"k": "u5", "n": live["u5"]}]
    assert found.only_shadow == []
    assert {d.live["k"]: (d.live["n"], d.shadow["n"]) for d in found.differ} == \
        {k: (live[k], candidate[k]) for k in candidate if candidate[k] != live[k]}
    assert (found.live_rows, found.shadow_rows) == (37, 36)
    assert found.same == sum(1 for k in candidate if candidate[k] == live[k])

    cli = CliRunner().invoke(_cli(), ["-C", str(root), "--var", f"bootstrap={broker}", "shadow", "diff", "per_k",
                                      "--json", "--wait", "60"])
    assert cli.exit_code == 3, cli.output  # they differ
    shown = json.loads(cli.stdout)
    assert (shown["only_live"], len(shown["differ"])) == ([{"key": found.only_live[0].key,
                                                             "value": {"k": "u5", "n": live["u5"]}, "count": 1}],
                                                           len(found.differ))
    return found


def _api_serves_it_under_the_sink_grant(root: Path, broker: str, found) -> None:
    """GET /queries/{name}/shadow/diff: SELECT on the sink (erin) answers the diff; MANAGE on the query without it
    (alice) is 403 naming SELECT."""
    import requests
    from support.serving import LiveServer, add_users

    with LiveServer(root, variables={"bootstrap": broker}) as server:
        tokens = add_users(server, ("erin", "alice"))
        url = f"{server.url}/api/v1/queries/per_k/shadow/diff?wait=60"
        answer = requests.get(url, headers={"Authorization": f"Bearer {tokens['erin']}"}, timeout=120)
        assert answer.status_code == 200, answer.text
        served = answer.json()
        assert (served["only_live"], served["differ"]) == (found.model_dump(mode="json")["only_live"],
                                                           found.model_dump(mode="json")["differ"])
        refused = requests.get(url, headers={"Authorization": f"Bearer {tokens['alice']}"}, timeout=120)
        assert refused.status_code == 403 and "SELECT" in refused.json()["error"]["message"], refused.text


def _cli():
    from dsflow.cli import cli

    return cli


def _promote(root: Path, broker: str, options: operations.Options, prefix: str, rows: list[dict], live) -> None:
    """`shadow promote`: refused for a project whose version is not the shadowed one; the stream's in-place change
    applied (its checkpoint kept: every id once, before and after) and its shadow removed; the changelog's replay
    failed by blue/green (DSF-E961: a catch-up bound of 0 s) with production untouched and its shadow kept."""
    sql = root / "rel.sql"
    shadowed = sql.read_text()
    sql.write_text(shadowed.replace("WHERE amount >= 0", "WHERE amount >= 1"))
    moved = CliRunner().invoke(_cli(), ["-C", str(root), "--var", f"bootstrap={broker}", "shadow", "promote",
                                        "copied", "--auto-approve"])
    assert isinstance(moved.exception, DsflowError) and moved.exception.code == "DSF-E945", moved.output
    sql.write_text(shadowed)
    candidate = operations.load(options).workspace.state_backend().read().shadows[STREAM].candidate_version
    done = CliRunner().invoke(_cli(), ["-C", str(root), "--var", f"bootstrap={broker}", "shadow", "promote",
                                       "copied", "--auto-approve", "--catch-up-timeout", "120"])
    assert done.exit_code == 0, done.output
    assert f"Shadow of {STREAM} stopped" in done.output
    state = operations.load(options).workspace.state_backend().read()
    assert state.resources[STREAM].data_hash == candidate != live[STREAM].data_hash and STREAM not in state.shadows
    more = [{"id": i, "k": "u1", "amount": 50} for i in range(RECORDS, RECORDS + 200)]
    produce_json_lines(broker, f"{prefix}_events", [json.dumps(r) for r in more], key_field="id")
    copied = _wait_ids(broker, f"{prefix}_copied", set(range(RECORDS + 200)))
    assert sorted(copied) == list(range(RECORDS + 200)), "each id once across the promotion"
    refused = CliRunner().invoke(_cli(), ["-C", str(root), "--var", f"bootstrap={broker}", "shadow", "promote",
                                          "per_k", "--auto-approve", "--catch-up-timeout", "0"])
    assert refused.exit_code == 1, refused.output
    state = operations.load(options).workspace.state_backend().read()
    assert state.resources[CHANGELOG] == live[CHANGELOG] and CHANGELOG in state.shadows
    failed = state.deployments[CHANGELOG]
    assert failed.phase == "failed" and "DSF-E961" in (failed.error or ""), failed


def _stop_deletes_what_the_shadow_made(loaded: operations.Loaded, broker: str, prefix: str) -> None:
    runs = loaded.workspace.state_backend().read().shadows
    assert set(runs) == {CHANGELOG}, "the stream's promotion removed its shadow"
    run = shadow.stop(loaded.project, loaded.workspace, CHANGELOG)
    assert not Path(run.checkpoint).exists()
    assert not [t for t in list_topics(broker) if t.startswith(prefix) and t.endswith("__shadow")]
    assert loaded.workspace.state_backend().read().shadows == {}
    assert run.topic == f"{prefix}_per_k__shadow"
    with pytest.raises(DsflowError) as none:
        shadow.diff(loaded.project, loaded.workspace, STREAM, wait=0)
    assert none.value.code == "DSF-E943"
