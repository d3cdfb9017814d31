"""Blue/green replays (issue 44, item 1) on Apache Kafka and Spark, through real driver processes.

`scaled` multiplies each event's value; `scaled_copy` and `scaled_copy_b` read it. `scaled`, `scaled_copy` and
`events_copy` (another query of the source) run in one shared Spark application, `scaled_copy_b` in a driver of its
own: the new version is built in a driver of its own beside the deployed one and, after the switch, runs in the
application on its own checkpoint; the shared reader is switched inside the application; `events_copy` is never
restarted (the host reports the same run id throughout) and its output holds every id exactly once.

The factor changes and the query is asked to replay from the earliest offset, applied with --blue-green. First with
a catch-up bound of 0 s, which no new version can meet: apply fails with DSF-E961 and production is untouched (the
same drivers run, the state entry is the same, and new events still flow through the old factor). Then with a real
bound, while events keep arriving: the old topic keeps being written until the switch, the new topic holds the full
recomputed output (every id once, the new factor), and the reader's output holds every id exactly once: the old
factor for events before the cut the deployment recorded, the new one after it (a plain-Python reference from the
source's offsets). The next apply removes the kept old version: the old topic is deleted and the old checkpoint
removed.

A `dsflow apply --blue-green` is killed (SIGKILL) in the catch up of that deployment while events arrive: the
plan made after it says the deployment resumes, and the apply that follows (in a process of its own) stops the new
version's driver the kill left running and restarts it on its own checkpoint and log. That apply is killed in its
turn in the switch, once the first of the two readers (`scaled_copy`) started on the new topic and the other
(`scaled_copy_b`) had not moved; the first reader is then stopped inside its application. The plan made after it
says the deployment rolls forward, and its apply switches the second reader, starts the first again on its new
checkpoint, and finishes: the assertions above hold for both readers after it.

A next deployment (factor 4) is killed once it has compared its new version with the deployed one (so the deployed
version is stopped at the cut), and its SQL is reverted: the plan restarts the deployed version on its checkpoint
(its driver is not running: drift) and says the deployment is rolled back first; after the apply the new version
is gone, its topic deleted, the deployed version runs again in its application (the same checkpoint), and the events
produced after it reach both readers' outputs, every id exactly once with its factor.

The same for a query writing a PostgreSQL table (the session's server, a database of the test's own): a plain view
over it and a materialized view of PostgreSQL's own first make apply refuse (DSF-E965, nothing built, production
untouched), then a catch-up bound of 0 s fails (DSF-E961: the new version's table dropped, production untouched).
Then the new version writes `scaled_v4` beside the table, and one transaction of renames makes it the production
table. That switch is killed twice: an apply (a process of its own) once the switch is noted, before the renames;
the next one, rolling forward, once it renamed and started the new version again (the state not written); the plan
after it rolls forward again, finds the renames committed, and its apply stops the driver the kill left writing
the table. Throughout, a client polling the table and the view reads every id exactly once at every read, never
fewer ids than the read before, one factor per read, the old factor and then the new; after it, the table (and the
view) hold the new version's rows (a plain-Python reference) and the kept `scaled_v3` exactly the events before the
cut. The next apply drops the kept table.

The same for an Iceberg table (a catalog swap: one transaction of the SQL catalog renames both tables) and Delta
tables on S3 and on ADLS (Azurite) (the relation moves to the new version's path in one state write), all in one
project: a catch-up bound of 0 s fails with production untouched; then an apply is killed once the S3 table's new
version was started again on its new path (the state not written), and the next apply rolls it forward (that
driver stopped) and carries out the two others: every id is in each new table exactly once with the new SQL, each
kept old table holds exactly the events before its cut, and the next apply deletes them. A
query of the project reads the Iceberg and the S3 Delta table as a stream into a topic: the deployment moves it to
the new table (the new path; the production Iceberg name after the renames) right after the table's version or
snapshot at the cut (for the S3 table, by the roll forward's apply), and its topic holds every id exactly once, the
old SQL's value before the cut and the new one after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path

import psycopg2
import pytest

from conftest import AZURITE_ACCOUNT
from dsflow.adapters import process
from dsflow.adapters.kafka.admin import describe_topic
from dsflow.adapters.kafka.client import read_to_end
from dsflow.adapters.spark import apps
from dsflow.cli.render import blue_green_cell, plan_text
from dsflow.engine import operations
from dsflow.engine.executors import driver_identity, query_identity
from dsflow.engine.failpoints import PAUSE_AT, REACHED_FILE
from support import pgserver
from support.background import Producer
from support.projects import make_project
from support.streaming import CONFIG, produce, topic
from support.waiting import wait_for

pytestmark = pytest.mark.integration

SHARED = "'runtime.isolation' = 'shared'"
SQL = """\
CREATE STREAM events (id BIGINT, v BIGINT) WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE STREAM scaled WITH ('trigger.interval' = '2 seconds', """ + SHARED + """{start}) AS
  SELECT id, v * {factor} AS w FROM events;
CREATE STREAM scaled_copy WITH ('trigger.interval' = '2 seconds', """ + SHARED + """) AS SELECT id, w FROM scaled;
CREATE STREAM scaled_copy_b WITH ('trigger.interval' = '2 seconds') AS SELECT id, w FROM scaled;
CREATE STREAM events_copy WITH ('trigger.interval' = '2 seconds', """ + SHARED + """) AS SELECT id, v FROM events;
"""
QUERY, READER = "query.analytics.public.scaled", "query.analytics.public.scaled_copy"
READER_B, OTHER = "query.analytics.public.scaled_copy_b", "query.analytics.public.events_copy"


def _events(first: int, count: int) -> list[dict]:
    return [{"id": i, "v": i % 97 + 1} for i in range(first, first + count)]


def _values(broker: str, log: str) -> list[dict]:
    return [json.loads(r["value"]) for r in read_to_end(broker, log)]


def _at_least(broker: str, log: str, count: int) -> list[dict] | None:
    found = _values(broker, log)
    return found if len(found) >= count else None


def _source_offsets(broker: str, log: str) -> dict[int, tuple[str, int]]:
    """id -> (partition, offset) of its event in the source log."""
    return {json.loads(r["value"])["id"]: (str(r["partition"]), r["offset"]) for r in read_to_end(broker, log)}


def _commit(broker: str, group: str, log: str) -> None:
    """A consumer outside the project (group `group`) reads a record of `log` and commits its offsets."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([log])
        found = next((m for _ in range(60) if (m := consumer.poll(1.0)) is not None and m.error() is None), None)
        assert found is not None, f"{group} read nothing of {log}"
        consumer.commit(message=found, asynchronous=False)
    finally:
        consumer.close()


def _intent(backend) -> dict:
    """The pending intent of a change under way, read as another process does."""
    pending = backend.read().pending
    return pending.intent if pending is not None else {}


def _noted_phase(backend) -> str | None:
    """The phase a blue/green deployment under way noted last."""
    return (_intent(backend).get("blue_green") or {}).get("phase")


def _switched_readers(backend) -> dict:
    """The readers an interrupted switch noted as moved to the new log."""
    return _intent(backend).get("blue_green_switched") or {}


def _killed_apply(root: Path, broker: str, point: str, reached: Path | None = None) -> subprocess.Popen:
    """`dsflow apply --blue-green` in a process of its own, pausing at the failpoint `point` for its kill (and
    creating `reached` as it pauses)."""
    env = {**os.environ, PAUSE_AT: point, **({REACHED_FILE: str(reached)} if reached else {})}
    return subprocess.Popen([sys.executable, "-m", "dsflow.cli", "-C", str(root), "--var", f"bootstrap={broker}",
                             "apply", "--auto-approve", "--blue-green", "--catch-up-timeout", "240"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def _killed_at(root: Path, broker: str, point: str, backend) -> None:
    """`dsflow apply --blue-green` in a process of its own, killed (SIGKILL) once it paused at the failpoint `point`;
    the lock it held released."""
    reached = root / f"reached-{point}"
    killed = _killed_apply(root, broker, point, reached)
    wait_for(lambda: reached.exists() or killed.poll() is not None, 300, f"the apply to reach {point}")
    assert reached.exists(), f"the apply ended (exit {killed.returncode}) before it reached {point}"
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    reached.unlink()
    backend.force_unlock(backend.lock_holder().id)


def _running(state, address: str) -> bool:
    """Its driver runs; in a shared application: its host runs, lists the query with the recorded spec, and does not
    report it failed."""
    outputs = state.resources[address].outputs
    if not process.is_running(outputs["pid"], query_identity(outputs)):
        return False
    if not outputs.get("app_dir"):
        return True
    app_dir, name = Path(outputs["app_dir"]), outputs["app_query"]
    listed = (apps.desired(app_dir).get(name) or {}).get("spec")
    return listed == str(Path(outputs["run_dir"]) / "spec.json") and apps.failure(app_dir, name) is None


def _run_id(outputs: dict) -> str | None:
    """The Spark run id its shared application's host reports for the query (new at every start)."""
    return (apps.reported(Path(outputs["app_dir"])).get(outputs["app_query"]) or {}).get("run_id")


def _runs_spec_of(outputs: dict) -> str:
    """The checkpoint of the spec the query's run folder holds (what its driver or application runs)."""
    return json.loads((Path(outputs["run_dir"]) / "spec.json").read_text())["checkpoint"]


def _producer(broker: str, project, first: int, count: int = 10, every: float = 0.5) -> Producer:
    """Events produced in the background while an apply runs, `count` every `every` seconds."""
    return Producer(lambda start, n: produce(broker, project, "events", _events(start, n), "id"), first, count, every)


def test_a_blue_green_replay_switches_its_reader_with_every_id_once_and_a_failed_catch_up_changes_nothing(
        tmp_path, broker):
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"bg{os.getpid()}_"),
                                   "sql/all.sql": SQL.format(start="", factor=2)})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    project = loaded.project
    old_log, copy_log, source = topic(project, "scaled"), topic(project, "scaled_copy"), topic(project, "events")
    copy_b, other_log = topic(project, "scaled_copy_b"), topic(project, "events_copy")
    try:  # a first apply that fails part way is torn down too
        assert operations.apply(loaded, operations.plan(loaded)).ok
        produce(broker, project, "events", _events(0, 300), "id")
        wait_for(lambda: len(_values(broker, copy_log)) >= 300 and len(_values(broker, copy_b)) >= 300, 180,
                 "the readers to copy the first 300 events")
        shared = {a: loaded.workspace.state_backend().read().resources[a].outputs for a in (QUERY, READER, OTHER)}
        assert len({o["app_dir"] for o in shared.values()}) == 1, "the query, a reader and another in one app"
        other_run = _run_id(shared[OTHER])
        assert other_run is not None
        external = f"billing-{old_log}"
        _commit(broker, external, old_log)
        (root / "sql" / "all.sql").write_text(SQL.format(start=", 'start.position' = 'earliest'", factor=3))
        backend = loaded.workspace.state_backend()

        before = backend.read()
        loaded = operations.load(options)
        plan = operations.plan(loaded, forced=operations.Forced(blue_green=True, catch_up_seconds=0))
        change = next(c for c in plan.changes if c.address == QUERY)
        assert change.blue_green is not None and change.blue_green.readers == [READER, READER_B]
        assert change.blue_green.consumers == [external], "the plan names who must move"
        assert change.blue_green.new_log == f"{old_log}_v2"
        failed = operations.apply(loaded, plan)
        assert failed.failed is not None and getattr(failed.failed[1], "code", None) == "DSF-E961"
        assert "production untouched" in str(failed.failed[1])
        after = backend.read()
        for address in (QUERY, READER, READER_B):
            assert after.resources[address] == before.resources[address] and _running(after, address)
        assert after.deployments[QUERY].phase == "failed" and after.pending is None
        produce(broker, project, "events", _events(300, 50), "id")
        wait_for(lambda: len(_values(broker, copy_log)) >= 350, 120, "production to go on after the failure")
        assert all(r["w"] == 2 * (r["id"] % 97 + 1) for r in _values(broker, copy_log)), "the old factor"

        with _producer(broker, project, 350) as producer:
            killed = _killed_apply(root, broker, "blue_green.caught_up")
            wait_for(lambda: _noted_phase(backend) == "catch_up" and _at_least(broker, f"{old_log}_v3", 350), 180,
                     "the new version to write what came before it was built")
            assert _noted_phase(backend) == "catch_up"
            os.kill(killed.pid, signal.SIGKILL)  # in the catch up: the new version's driver is left running
            killed.wait()
            left = backend.read().pending.intent["blue_green_pid"]
            candidate = driver_identity(loaded.workspace.run_dir / "blue_green" / QUERY.split(".", 1)[1])
            assert process.is_running(left, candidate)
            backend.force_unlock(backend.lock_holder().id)
            loaded = operations.load(options)
            plan = operations.plan(loaded, forced=operations.Forced(blue_green=True, catch_up_seconds=240))
            bg = next(c for c in plan.changes if c.address == QUERY).blue_green
            new_log = bg.new_log
            assert new_log == f"{old_log}_v3", "the failed attempt's version is not taken again"
            assert bg.interrupted is not None and (bg.interrupted.version, bg.interrupted.action) == (3, "resume")

            killed = _killed_apply(root, broker, "blue_green.switched_one")  # resumes, then is killed in the switch
            wait_for(lambda: len(_switched_readers(backend)) == 1, 300, "the resumed apply to switch its first reader")
            os.kill(killed.pid, signal.SIGKILL)  # one reader on the new log, the other still on the old one
            killed.wait()
            assert not process.is_running(left, candidate), "the killed apply's new version was stopped, then resumed"
            moved, moved_at = (_switched_readers(backend)[READER][k] for k in ("outputs", "offsets"))
            assert _noted_phase(backend) == "switch" and process.is_running(moved["pid"], query_identity(moved))
            assert moved["app_dir"] == shared[READER]["app_dir"], "switched inside its shared application"
            apps.remove(Path(moved["app_dir"]), moved["app_query"])  # it ended: restarted on its new checkpoint
            backend.force_unlock(backend.lock_holder().id)
            loaded = operations.load(options)
            plan = operations.plan(loaded)  # without --blue-green: the switch is finished all the same
            bg = next(c for c in plan.changes if c.address == QUERY).blue_green
            assert bg is not None and bg.new_log == new_log and bg.readers == [READER, READER_B]
            assert (bg.interrupted.version, bg.interrupted.phase, bg.interrupted.action) == (3, "switch",
                                                                                         "roll forward")
            assert "(switch): it rolls forward: readers not yet on" in plan_text(plan.model_dump(mode="json"))
            assert [c.address for c in plan.actionable] == [QUERY], "no drift repair: the roll forward starts readers"
            result = operations.apply(loaded, plan)
        assert result.ok, result.failed
        produced = producer.next
        state = backend.read()
        record = state.deployments[QUERY]
        assert record.phase == "keep_old" and record.kept["log"] == old_log and state.pending is None
        assert set(record.switched) == {READER, READER_B}
        assert record.switched[READER] == moved_at, "left where it was switched"
        assert state.resources["relation.analytics.public.scaled"].outputs["topic"] == new_log
        assert all(_running(state, a) for a in (QUERY, READER, READER_B))
        assert state.resources[READER].outputs["checkpoint"] == moved["checkpoint"] == _runs_spec_of(moved)
        now = state.resources[QUERY].outputs
        assert now["app_dir"] == shared[QUERY]["app_dir"], "the new version runs in the shared application"
        assert _runs_spec_of(now) == now["checkpoint"] != before.resources[QUERY].outputs["checkpoint"], \
            "the application runs the new version only: the old one is stopped"
        entry = next(e for e in operations.status(operations.load(options), False) if e["address"] == QUERY)
        assert blue_green_cell(entry["blue_green"]) == "blue/green v3 keep_old"

        where = _source_offsets(broker, source)
        assert len(where) == produced
        cut, built = record.cut[source], record.built_to[source]
        before_cut = {i for i, (p, o) in where.items() if o < cut[p]}
        old = _values(broker, old_log)
        assert Counter(r["id"] for r in old) == Counter(before_cut), "the old topic: exactly the events before the cut"
        assert any(where[r["id"]][1] >= built[where[r["id"]][0]] for r in old), \
            "the old version kept writing after the new one was built"
        new = wait_for(lambda: _at_least(broker, new_log, produced), 180, "the new topic to hold every event")
        assert sorted(r["id"] for r in new) == list(range(produced))
        assert all(r["w"] == 3 * (r["id"] % 97 + 1) for r in new), "the full recomputed output"
        expected = {i: (2 if i in before_cut else 3) * (i % 97 + 1) for i in range(produced)}
        for log in (copy_log, copy_b):  # switched before the kill, and by the roll forward
            copied = wait_for(lambda log=log: _at_least(broker, log, produced), 180, f"{log} to copy every event")
            assert Counter(r["id"] for r in copied) == Counter(range(produced)), f"{log}: every id exactly once"
            assert {r["id"]: r["w"] for r in copied} == expected, log
        n = len(before_cut)  # both logs at the cut, every value other: the factor changed
        assert record.compared == {"old_records": n, "new_records": n, "only_old": n, "only_new": n}

        loaded = operations.load(options)  # the next apply removes the kept old version (no 'deploy.retention')
        plan = operations.plan(loaded)
        assert [(r.log, r.checkpoint) for r in plan.retired] == [(old_log, record.kept["checkpoint"])]
        assert not plan.actionable and operations.apply(loaded, plan).ok
        wait_for(lambda: describe_topic(broker, old_log) is None, 60, "the old topic to be deleted")
        assert not Path(record.kept["checkpoint"]).exists() and backend.read().deployments[QUERY].kept == {}
        assert describe_topic(broker, new_log) is not None and _running(backend.read(), READER)

        (root / "sql" / "all.sql").write_text(SQL.format(start=", 'start.position' = 'earliest'", factor=4))
        reached = root / "compared"
        killed = _killed_apply(root, broker, "blue_green.compared", reached)  # the deployed version stopped at the cut
        wait_for(reached.exists, 240, "the next deployment to compare its new version with the deployed one")
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        left = _intent(backend)["blue_green_pid"]
        deployed = backend.read().resources[QUERY]
        assert not _running(backend.read(), QUERY), "the deployed version was stopped at the cut"
        backend.force_unlock(backend.lock_holder().id)
        (root / "sql" / "all.sql").write_text(SQL.format(start=", 'start.position' = 'earliest'", factor=3))
        loaded = operations.load(options)  # reverted: no change of the query's own but its stopped driver
        plan = operations.plan(loaded)
        reverted = next(c for c in plan.changes if c.address == QUERY)
        assert (reverted.action.value, reverted.drift) == ("update", True), "its driver is not running: a restart"
        assert reverted.effect.startswith("restarted on the same checkpoint") and "v4 (compare)" in reverted.effect
        assert ("it is rolled back first: its new version stopped, its log deleted, its checkpoint removed; the "
                "deployed version started again on its checkpoint") in reverted.effect
        assert operations.apply(loaded, plan).ok
        state = backend.read()
        assert not process.is_running(left, candidate) and state.pending is None
        assert state.resources[QUERY].outputs == deployed.outputs and _running(state, QUERY), \
            "started again in its shared application, on the same checkpoint"
        wait_for(lambda: describe_topic(broker, f"{old_log}_v4") is None, 60, "the rolled back version's topic to go")
        produce(broker, project, "events", _events(produced, 50), "id")  # the restarted version goes on from the cut
        expected.update({i: 3 * (i % 97 + 1) for i in range(produced, produced + 50)})
        for log in (copy_log, copy_b):
            copied = wait_for(lambda log=log: _at_least(broker, log, produced + 50), 180, f"{log} to copy the rest")
            assert Counter(r["id"] for r in copied) == Counter(range(produced + 50)), f"{log}: every id exactly once"
            assert {r["id"]: r["w"] for r in copied} == expected, log
        copied = wait_for(lambda: _at_least(broker, other_log, produced + 50), 180, "the other query to copy all")
        assert Counter(r["id"] for r in copied) == Counter(range(produced + 50)), "no gap, no duplicate"
        assert _run_id(backend.read().resources[OTHER].outputs) == other_run, "never restarted in its application"
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


PG_STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
  - name: pg
    type: postgresql
    properties: {host: 127.0.0.1, port: """ + pgserver.PORT + """, user: postgres, database: %s}
"""
PG_SQL = """\
CREATE STREAM events (id BIGINT, v BIGINT) WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE TABLE scaled WITH ('store' = 'pg', 'trigger.interval' = '1 second'{start}) AS SELECT id, v * {factor} AS w
  FROM events;
"""
TABLE = "relation.analytics.public.scaled"


@pytest.fixture
def pgdb():
    name = f"dsflow_bg_{uuid.uuid4().hex[:10]}"
    pgserver.sql("postgres", f"CREATE DATABASE {name}")
    yield name
    pgserver.sql("postgres", f"DROP DATABASE {name} WITH (FORCE)")


def _rows(pgdb: str, statement: str) -> list[tuple]:
    return pgserver.sql(pgdb, statement)


class _TableReader:
    """A client polling the production table and a view over it, one read after the other, each read kept whole."""

    def __init__(self, pgdb: str):
        self.reads: list[list[tuple[int, int]]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.conn = psycopg2.connect(dbname=pgdb, **pgserver.SERVER)
        self.conn.autocommit = True
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.conn.cursor() as cur:
            while not self.stop.is_set():
                for source in ("scaled", "scaled_big"):
                    try:
                        cur.execute(f"SELECT id, w FROM {source}")
                    except psycopg2.Error as err:  # the table or view missing, even for a moment
                        self.errors.append(str(err))
                        continue
                    self.reads.append(cur.fetchall())
                self.stop.wait(0.02)

    def __enter__(self) -> _TableReader:
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        self.thread.join()
        self.conn.close()


def _factor(read: list[tuple[int, int]]) -> int:
    """The one factor every row of a read was computed with (2 or 3); 0 if they mix."""
    found = {w // (i % 97 + 1) for i, w in read if w % (i % 97 + 1) == 0}
    return found.pop() if len(found) == 1 and all(w in (2 * (i % 97 + 1), 3 * (i % 97 + 1)) for i, w in read) else 0


def test_a_blue_green_replay_of_a_postgres_table_switches_in_one_transaction_of_renames(tmp_path, broker, pgdb):
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"bgt{os.getpid()}_"), "stores/kafka.yml":
                                   PG_STORES % pgdb, "sql/all.sql": PG_SQL.format(start="", factor=2)})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    project, backend = loaded.project, loaded.workspace.state_backend()
    source = topic(project, "events")
    try:
        assert operations.apply(loaded, operations.plan(loaded)).ok
        produce(broker, project, "events", _events(0, 300), "id")
        wait_for(lambda: _rows(pgdb, "SELECT COUNT(*) FROM scaled")[0][0] >= 300, 180, "the table to hold 300 rows")
        _rows(pgdb, "CREATE VIEW scaled_big AS SELECT id, w FROM scaled WHERE w > 0")
        _rows(pgdb, "CREATE MATERIALIZED VIEW scaled_count AS SELECT COUNT(*) AS n FROM scaled")
        (root / "sql" / "all.sql").write_text(PG_SQL.format(start=", 'start.position' = 'earliest'", factor=3))

        before = backend.read()
        loaded = operations.load(options)
        plan = operations.plan(loaded, forced=operations.Forced(blue_green=True, catch_up_seconds=240))
        change = next(c for c in plan.changes if c.address == QUERY)
        assert change.blue_green is not None and change.blue_green.sink == TABLE
        assert (change.blue_green.old_log, change.blue_green.new_log, change.blue_green.kept_as) == (
            f"{pgdb}.public.scaled", f"{pgdb}.public.scaled_v2", f"{pgdb}.public.scaled_v1")
        failed = operations.apply(loaded, plan)
        assert failed.failed is not None and getattr(failed.failed[1], "code", None) == "DSF-E965", failed.failed
        assert "scaled_count" in str(failed.failed[1]) and "production untouched" in str(failed.failed[1])
        after = backend.read()
        assert after.resources[QUERY] == before.resources[QUERY] and _running(after, QUERY)
        assert after.deployments[QUERY].phase == "failed"
        assert _rows(pgdb, "SELECT to_regclass('scaled_v2')") == [(None,)], "nothing was built"

        _rows(pgdb, "DROP MATERIALIZED VIEW scaled_count")
        loaded = operations.load(options)
        plan = operations.plan(loaded, forced=operations.Forced(blue_green=True, catch_up_seconds=0))
        failed = operations.apply(loaded, plan)
        assert failed.failed is not None and getattr(failed.failed[1], "code", None) == "DSF-E961", failed.failed
        after = backend.read()
        assert after.resources[QUERY] == before.resources[QUERY] and _running(after, QUERY)
        assert _rows(pgdb, "SELECT to_regclass('scaled_v3')") == [(None,)], "the new version's table dropped"
        assert sorted(_rows(pgdb, "SELECT id, w FROM scaled")) == [(i, 2 * (i % 97 + 1)) for i in range(300)]

        loaded = operations.load(options)
        plan = operations.plan(loaded, forced=operations.Forced(blue_green=True, catch_up_seconds=240))
        kept = f"{pgdb}.public.scaled_v3"
        assert next(c for c in plan.changes if c.address == QUERY).blue_green.kept_as == kept
        tables = "SELECT to_regclass('scaled_v3') IS NOT NULL, to_regclass('scaled_v4') IS NOT NULL"
        writer = driver_identity(loaded.workspace.query_dir(QUERY.split(".", 1)[1]))
        with _TableReader(pgdb) as reader, _producer(broker, project, 300, count=2, every=0.25) as producer:
            _killed_at(root, broker, "blue_green.switching", backend)  # the switch noted, nothing renamed
            assert _noted_phase(backend) == "switch" and _rows(pgdb, tables) == [(False, True)]
            _killed_at(root, broker, "blue_green.resumed", backend)  # rolled forward: renamed, new version started
            left = _intent(backend)["pid"]
            assert _rows(pgdb, tables) == [(True, False)] and process.is_running(left, writer)
            loaded = operations.load(options)
            plan = operations.plan(loaded)  # without --blue-green: the switch is finished all the same
            bg = next(c for c in plan.changes if c.address == QUERY).blue_green
            assert bg is not None and bg.kept_as == kept
            assert (bg.interrupted.version, bg.interrupted.phase, bg.interrupted.action) == (4, "switch",
                                                                                         "roll forward")
            result = operations.apply(loaded, plan)  # the catalog says committed: nothing renamed again
            reader.stop.wait(1.0)  # a few reads after the switch
        assert result.ok, result.failed
        produced = producer.next
        assert not process.is_running(left, writer), "the driver the killed apply started was stopped"

        assert not reader.errors, reader.errors[:3]
        seen: set[int] = set()
        factors = []
        for read in reader.reads:
            ids = Counter(i for i, _ in read)
            assert all(n == 1 for n in ids.values()), "an id read twice"
            assert seen <= set(ids), "a read held fewer ids than the read before it: an empty or partial table"
            seen, factor = set(ids), _factor(read)
            assert factor in (2, 3), "a read mixed the old and new versions' rows"
            factors.append(factor)
        assert factors == sorted(factors) and factors[0] == 2 and factors[-1] == 3, "old, then new, never back"

        state = backend.read()
        record = state.deployments[QUERY]
        assert record.phase == "keep_old" and record.kept["log"] == kept and record.views == ["public.scaled_big"]
        assert _running(state, QUERY)
        entry = next(e for e in operations.status(operations.load(options), False) if e["address"] == QUERY)
        assert blue_green_cell(entry["blue_green"]) == "blue/green v4 keep_old"
        where = _source_offsets(broker, source)
        assert len(where) == produced
        cut = record.cut[source]
        before_cut = {i for i, (p, o) in where.items() if o < cut[p]}
        assert Counter(i for i, w in _rows(pgdb, "SELECT id, w FROM scaled_v3")) == Counter(before_cut)
        assert all(w == 2 * (i % 97 + 1) for i, w in _rows(pgdb, "SELECT id, w FROM scaled_v3")), "the old version"
        expected = sorted((i, 3 * (i % 97 + 1)) for i in range(produced))
        wait_for(lambda: len(_rows(pgdb, "SELECT id FROM scaled")) >= produced, 180, "every event in the table")
        assert sorted(_rows(pgdb, "SELECT id, w FROM scaled")) == expected, "the new version's rows"
        assert sorted(_rows(pgdb, "SELECT id, w FROM scaled_big")) == expected, "the view reads the new table"
        n = len(before_cut)
        assert record.compared == {"old_records": n, "new_records": n, "only_old": n, "only_new": n}

        loaded = operations.load(options)
        plan = operations.plan(loaded)
        assert [(r.log, r.checkpoint) for r in plan.retired] == [(kept, record.kept["checkpoint"])]
        assert operations.apply(loaded, plan).ok
        assert _rows(pgdb, "SELECT to_regclass('scaled_v3'), to_regclass('scaled') IS NOT NULL") == [(None, True)]
        assert not Path(record.kept["checkpoint"]).exists() and _running(backend.read(), QUERY)
    finally:
        _rows(pgdb, "DROP VIEW IF EXISTS scaled_big")  # hand-made: a table with a view over it does not drop
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def test_the_transaction_of_renames_repoints_views_carries_grants_and_ledger_and_refuses_what_cannot_follow(pgdb):
    """The store's swap on its own (no query): a view over a view keeps working on the new table, a grant is
    carried, the batch ledger follows each table, and a foreign key to the table is refused with nothing changed."""
    from dsflow.adapters.postgres import swap

    settings = dict(pgserver.SERVER)
    for statement in ("CREATE TABLE t (id BIGINT PRIMARY KEY, w BIGINT)", "INSERT INTO t VALUES (1, 2), (2, 4)",
                      "CREATE TABLE t_v2 (id BIGINT PRIMARY KEY, w BIGINT)", "INSERT INTO t_v2 VALUES (1, 3), (2, 6)",
                      "CREATE VIEW t_big WITH (security_barrier) AS SELECT id, w FROM t WHERE w > 2",
                      "CREATE VIEW t_big_ids AS SELECT id FROM t_big", "CREATE ROLE bg_reader_" + pgdb[-10:],
                      f"GRANT SELECT ON t TO bg_reader_{pgdb[-10:]}",
                      "CREATE TABLE dsflow_mv_batches (view TEXT, checkpoint TEXT, batch_id BIGINT, "
                      "PRIMARY KEY (view, checkpoint))",
                      "INSERT INTO dsflow_mv_batches VALUES ('t', 'old', 7), ('t_v2', 'new', 3)",
                      "CREATE TABLE child (id BIGINT REFERENCES t (id))"):
        _rows(pgdb, statement)
    where = (pgdb, "public", "t")
    assert "foreign key(s) of child" in (swap.refusal(settings, where) or "")
    with pytest.raises(Exception) as refused:
        swap.swap(settings, where, "t_v2", "t_v1")
    assert getattr(refused.value, "code", None) == "DSF-E965"
    assert _rows(pgdb, "SELECT id, w FROM t ORDER BY id") == [(1, 2), (2, 4)], "rolled back: production as it was"

    _rows(pgdb, "DROP TABLE child")
    assert swap.refusal(settings, where) is None
    assert swap.swap(settings, where, "t_v2", "t_v1") == ["public.t_big"]
    assert _rows(pgdb, "SELECT id, w FROM t ORDER BY id") == [(1, 3), (2, 6)]
    assert _rows(pgdb, "SELECT id, w FROM t_v1 ORDER BY id") == [(1, 2), (2, 4)]
    assert _rows(pgdb, "SELECT id, w FROM t_big ORDER BY id") == [(1, 3), (2, 6)], "the view reads the new table"
    assert _rows(pgdb, "SELECT id FROM t_big_ids ORDER BY id") == [(1,), (2,)], "a view over the view too"
    assert _rows(pgdb, "SELECT reloptions FROM pg_class WHERE relname = 't_big'") == [(["security_barrier=true"],)]
    assert _rows(pgdb, f"SELECT has_table_privilege('bg_reader_{pgdb[-10:]}', 't', 'SELECT')") == [(True,)]
    assert sorted(_rows(pgdb, "SELECT view, checkpoint, batch_id FROM dsflow_mv_batches")) == [
        ("t", "new", 3), ("t_v1", "old", 7)]
    _rows(pgdb, "CREATE MATERIALIZED VIEW t_n AS SELECT COUNT(*) FROM t")
    assert "materialized view(s) public.t_n" in (swap.refusal(settings, where) or "")
    _rows(pgdb, f"DROP OWNED BY bg_reader_{pgdb[-10:]}")
    _rows(pgdb, f"DROP ROLE bg_reader_{pgdb[-10:]}")


def test_a_switch_killed_in_its_transaction_of_renames_is_told_committed_or_not_from_the_catalog(tmp_path, pgdb):
    """The roll forward's question to PostgreSQL's catalog (no query): not committed while the new version's table
    has its own name, committed once the renames made it the production table, and not to be told (DSF-E966) when
    both names are there."""
    from dsflow.core.bluegreen import BlueGreen
    from dsflow.engine import bluegreen_tables as tables
    from dsflow.errors import DsflowError
    from dsflow.load.project import load_project

    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix="bgc_"), "stores/kafka.yml": PG_STORES % pgdb,
                                   "sql/all.sql": PG_SQL.format(start="", factor=2)})
    project = load_project(root, variables={"bootstrap": "127.0.0.1:1"})
    plan = BlueGreen(sink=TABLE, old_log=f"{pgdb}.public.scaled", new_log=f"{pgdb}.public.scaled_v2", version=2,
                     catch_up_seconds=1, kept_as=f"{pgdb}.public.scaled_v1")
    for statement in ("CREATE TABLE scaled (id BIGINT, w BIGINT)", "INSERT INTO scaled VALUES (1, 2)",
                      "CREATE TABLE scaled_v2 (id BIGINT, w BIGINT)", "INSERT INTO scaled_v2 VALUES (1, 3)"):
        _rows(pgdb, statement)
    assert tables.swapped(project, plan) is False, "killed before the transaction committed: the switch is redone"
    assert tables.swap(project, plan) == []
    assert tables.swapped(project, plan) is True, "committed: nothing is renamed again"
    assert _rows(pgdb, "SELECT w FROM scaled") == [(3,)] and _rows(pgdb, "SELECT w FROM scaled_v1") == [(2,)]
    _rows(pgdb, "CREATE TABLE scaled_v2 (id BIGINT, w BIGINT)")
    with pytest.raises(DsflowError) as cannot:
        tables.swapped(project, plan)
    assert cannot.value.code == "DSF-E966" and "holds both" in cannot.value.message


LAKE_STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
  - name: ice
    type: iceberg
    properties: {warehouse: %s}
  - name: s3lake
    type: s3
    properties:
      bucket: %s
      prefix: tables
      endpoint_url: %s
      region: us-east-1
      access_key_id: "{{ env_var('LAKE_TEST_KEY_ID') }}"
      secret_access_key: "{{ env_var('LAKE_TEST_SECRET') }}"
  - name: azlake
    type: adls
    properties:
      account: %s
      container: %s
      prefix: tables
      endpoint: %s
      account_key: "{{ env_var('AZ_TEST_KEY') }}"
"""
LAKE_SQL = """\
CREATE STREAM events (id BIGINT, v BIGINT) WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE TABLE scaled_ice WITH ('store' = 'ice', 'trigger.interval' = '2 seconds', """ + SHARED + """{start}) AS
  SELECT id, v * {factor} AS w FROM events;
CREATE TABLE scaled_delta WITH ('store' = 's3lake', 'trigger.interval' = '2 seconds'{start}) AS
  SELECT id, v * {factor} AS w FROM events;
CREATE TABLE scaled_delta_az WITH ('store' = 'azlake', 'trigger.interval' = '2 seconds'{start}) AS
  SELECT id, v * {factor} AS w FROM events;
CREATE STREAM ice_copy WITH ('trigger.interval' = '2 seconds', """ + SHARED + """) AS SELECT id, w FROM scaled_ice;
CREATE STREAM delta_copy WITH ('trigger.interval' = '2 seconds') AS SELECT id, w FROM scaled_delta;
"""
ICE, DELTA = "query.analytics.public.scaled_ice", "query.analytics.public.scaled_delta"
AZ = "query.analytics.public.scaled_delta_az"
LAKE_READERS = {ICE: "query.analytics.public.ice_copy", DELTA: "query.analytics.public.delta_copy"}


def _ice_rows(warehouse: Path, table: str) -> list[tuple[int, int]] | None:
    """The Iceberg table `public.<table>` read with pyiceberg itself (None: not in the catalog)."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("dsflow", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
    if not catalog.table_exists(("public", table)):
        return None
    return [(r["id"], r["w"]) for r in catalog.load_table(("public", table)).scan().to_arrow().to_pylist()]


def _delta_rows(endpoint: str, location: str) -> list[tuple[int, int]] | None:
    """The Delta table at `location` (on S3, or on Azurite: abfss://) read with delta-rs itself (None: no table
    there)."""
    from deltalake import DeltaTable

    options = {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ALLOW_HTTP": "true"}
    if location.startswith("abfss://"):
        options = {"account_name": AZURITE_ACCOUNT[0], "account_key": AZURITE_ACCOUNT[1], "endpoint": endpoint,
                   "allow_http": "true"}
    if not DeltaTable.is_deltatable(location, storage_options=options):
        return None
    return [(r["id"], r["w"]) for r in DeltaTable(location, storage_options=options).to_pyarrow_table().to_pylist()]


def test_an_iceberg_switch_killed_in_its_catalog_transaction_is_told_committed_or_not_from_the_catalog(tmp_path):
    """The roll forward's question to Iceberg's SQL catalog (no query), as for PostgreSQL above."""
    import pyarrow as pa

    from dsflow.adapters.iceberg.catalog import catalog
    from dsflow.core.bluegreen import BlueGreen
    from dsflow.engine import bluegreen_tables as tables
    from dsflow.errors import DsflowError
    from dsflow.load.project import load_project

    warehouse = tmp_path / "warehouse"
    stores = "\n".join(LAKE_STORES.splitlines()[:7]) % warehouse + "\n"  # the Kafka and Iceberg stores
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix="bgi_"), "stores/kafka.yml": stores,
                                   "sql/all.sql": "\n".join(LAKE_SQL.splitlines()[:3]).format(start="", factor=2)})
    project = load_project(root, variables={"bootstrap": "127.0.0.1:1"})
    store = catalog({"warehouse": str(warehouse)})
    store.create_namespace("public")
    for name, w in (("scaled_ice", 2), ("scaled_ice_v2", 3)):
        store.create_table(("public", name), schema=pa.schema([("id", pa.int64()), ("w", pa.int64())])).append(
            pa.table({"id": [1], "w": [w]}))
    plan = BlueGreen(sink="relation.analytics.public.scaled_ice", old_log="public.scaled_ice",
                     new_log="public.scaled_ice_v2", version=2, catch_up_seconds=1, kept_as="public.scaled_ice_v1")
    assert tables.swapped(project, plan) is False, "killed before the catalog transaction committed"
    tables.swap(project, plan)
    assert tables.swapped(project, plan) is True, "committed: nothing is renamed again"
    assert _ice_rows(warehouse, "scaled_ice") == [(1, 3)] and _ice_rows(warehouse, "scaled_ice_v1") == [(1, 2)]
    store.drop_table(("public", "scaled_ice_v1"))  # neither outcome: no kept table and no new version's name
    with pytest.raises(DsflowError) as cannot:
        tables.swapped(project, plan)
    assert cannot.value.code == "DSF-E966" and "holds neither" in cannot.value.message


def test_a_blue_green_replay_of_iceberg_and_delta_tables_swaps_the_catalog_and_moves_the_path(
        tmp_path, broker, s3_endpoint, azurite_endpoint, monkeypatch):
    from azure.storage.blob import BlobServiceClient

    from support.lake import S3_KEYS, create_bucket

    for key, value in {**S3_KEYS, "AZ_TEST_KEY": AZURITE_ACCOUNT[1]}.items():
        monkeypatch.setenv(key, value)
    bucket = f"bg-{uuid.uuid4().hex[:8]}"
    create_bucket(s3_endpoint, bucket)
    BlobServiceClient(azurite_endpoint, credential=dict(zip(("account_name", "account_key"), AZURITE_ACCOUNT,
                                                            strict=True))).create_container(bucket)
    warehouse = tmp_path / "warehouse"
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"bgl{os.getpid()}_"), "stores/kafka.yml":
                                   LAKE_STORES % (warehouse, bucket, s3_endpoint, AZURITE_ACCOUNT[0], bucket,
                                                  azurite_endpoint),
                                   "sql/all.sql": LAKE_SQL.format(start="", factor=2)})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    project, backend = loaded.project, loaded.workspace.state_backend()
    old_path = f"s3://{bucket}/tables/scaled_delta"
    az_root = f"abfss://{bucket}@{AZURITE_ACCOUNT[0]}.dfs.core.windows.net/tables"
    try:
        assert operations.apply(loaded, operations.plan(loaded)).ok
        produce(broker, project, "events", _events(0, 300), "id")
        wait_for(lambda: len(_ice_rows(warehouse, "scaled_ice") or []) >= 300
                 and len(_delta_rows(s3_endpoint, old_path) or []) >= 300
                 and len(_delta_rows(azurite_endpoint, f"{az_root}/scaled_delta_az") or []) >= 300, 180,
                 "the three tables to hold 300 rows")
        (root / "sql" / "all.sql").write_text(LAKE_SQL.format(start=", 'start.position' = 'earliest'", factor=3))

        before = backend.read()
        loaded = operations.load(options)
        plan = operations.plan(loaded, forced=operations.Forced(blue_green=True, catch_up_seconds=0))
        ice = next(c for c in plan.changes if c.address == ICE).blue_green
        delta = next(c for c in plan.changes if c.address == DELTA).blue_green
        assert (ice.readers, delta.readers) == ([LAKE_READERS[ICE]], [LAKE_READERS[DELTA]])
        az = next(c for c in plan.changes if c.address == AZ).blue_green
        assert (ice.old_log, ice.new_log, ice.kept_as, ice.relocate) == (
            "public.scaled_ice", "public.scaled_ice_v2", "public.scaled_ice_v1", False)
        assert (delta.old_log, delta.new_log, delta.kept_as, delta.relocate) == (
            "scaled_delta", "scaled_delta_v2", None, True)
        assert (az.old_log, az.new_log, az.kept_as, az.relocate) == ("scaled_delta_az", "scaled_delta_az_v2", None,
                                                                     True), "ADLS: a path, as on S3"
        failed = operations.apply(loaded, plan)
        assert failed.failed is not None and getattr(failed.failed[1], "code", None) == "DSF-E961", failed.failed
        assert failed.failed[0].address == DELTA
        loaded = operations.load(options)
        failed = operations.apply(loaded, operations.plan(loaded, targets=frozenset({ICE}), forced=operations.Forced(
            blue_green=True, catch_up_seconds=0)))
        assert failed.failed is not None and getattr(failed.failed[1], "code", None) == "DSF-E961", failed.failed
        assert failed.failed[0].address == ICE
        after = backend.read()
        for address in (ICE, DELTA, *LAKE_READERS.values()):
            assert after.resources[address] == before.resources[address] and _running(after, address)
        assert _ice_rows(warehouse, "scaled_ice_v2") is None and _delta_rows(s3_endpoint, old_path + "_v2") is None
        assert sorted(_ice_rows(warehouse, "scaled_ice") or []) == [(i, 2 * (i % 97 + 1)) for i in range(300)]

        writer = driver_identity(loaded.workspace.query_dir(DELTA.split(".", 1)[1]))
        with _producer(broker, project, 300, count=4, every=1.0) as producer:
            _killed_at(root, broker, "blue_green.resumed", backend)  # the Delta table's, first in the plan
            state = backend.read()
            left = state.pending.intent["pid"]  # its new version, started on the new path: the state not written
            assert state.pending.address == DELTA and process.is_running(left, writer)
            assert state.resources["relation.analytics.public.scaled_delta"].outputs["table"] == old_path
            loaded = operations.load(options)
            plan = operations.plan(loaded, forced=operations.Forced(blue_green=True, catch_up_seconds=240))
            versions = {c.address: c.blue_green for c in plan.changes if c.blue_green is not None}
            assert (versions[DELTA].interrupted.phase, versions[DELTA].interrupted.action) == ("switch",
                                                                                               "roll forward")
            assert versions[ICE].interrupted is None and versions[AZ].interrupted is None
            ice_kept = versions[ICE].kept_as.split(".")[1]
            new_path = f"s3://{bucket}/tables/{versions[DELTA].new_log}"
            az_new = f"{az_root}/{versions[AZ].new_log}"
            result = operations.apply(loaded, plan)
        assert result.ok, result.failed
        produce(broker, project, "events", _events(producer.next, 20), "id")  # read from the new tables only
        produced = producer.next + 20
        assert not process.is_running(left, writer), "the driver the killed apply started was stopped"
        state = backend.read()
        assert all(_running(state, a) for a in (ICE, DELTA, AZ, *LAKE_READERS.values()))
        assert state.resources["relation.analytics.public.scaled_delta"].outputs["table"] == new_path
        assert state.resources["relation.analytics.public.scaled_delta_az"].outputs["table"] == az_new
        where = _source_offsets(broker, topic(project, "events"))
        assert len(where) == produced
        expected = sorted((i, 3 * (i % 97 + 1)) for i in range(produced))
        for address, old_rows, new_rows in (
                (ICE, lambda: _ice_rows(warehouse, ice_kept), lambda: _ice_rows(warehouse, "scaled_ice")),
                (DELTA, lambda: _delta_rows(s3_endpoint, old_path), lambda: _delta_rows(s3_endpoint, new_path)),
                (AZ, lambda: _delta_rows(azurite_endpoint, f"{az_root}/scaled_delta_az"),
                 lambda: _delta_rows(azurite_endpoint, az_new))):
            record = state.deployments[address]
            assert record.phase == "keep_old", record
            before_cut = {i for i, (p, o) in where.items() if o < record.cut[topic(project, "events")][p]}
            kept = old_rows() or []
            assert sorted(kept) == sorted((i, 2 * (i % 97 + 1)) for i in before_cut), f"{address}: the old version"
            wait_for(lambda read=new_rows: len(read() or []) >= produced, 180, f"{address}: every event")
            assert Counter(i for i, _ in new_rows()) == Counter(range(produced)), f"{address}: every id once"
            assert sorted(new_rows()) == expected, f"{address}: the new version's rows"
            n = len(before_cut)
            assert record.compared == {"old_records": n, "new_records": n, "only_old": n, "only_new": n}
            reader = LAKE_READERS.get(address)
            if reader is None:  # the ADLS table has no reader
                assert not record.switched, record
                continue
            assert list(record.switched) == [reader] and state.resources[reader].outputs["checkpoint"] != \
                before.resources[reader].outputs["checkpoint"], "the reader restarted in a new checkpoint"
            out = topic(project, reader.rsplit(".", 1)[1])
            read = wait_for(lambda log=out: _at_least(broker, log, produced), 180, f"{reader}: every event")
            assert Counter(r["id"] for r in read) == Counter(range(produced)), f"{reader}: every id once"
            assert sorted((r["id"], r["w"]) for r in read) == sorted(
                (i, (2 if i in before_cut else 3) * (i % 97 + 1)) for i in range(produced)), \
                f"{reader}: the old SQL's value before the cut, the new one after it"

        loaded = operations.load(options)  # the next apply removes the kept old versions
        plan = operations.plan(loaded)
        assert sorted((r.object, r.log) for r in plan.retired) == [
            ("table", f"public.{ice_kept}"), ("table", "scaled_delta"), ("table", "scaled_delta_az")]
        assert operations.apply(loaded, plan).ok
        assert _ice_rows(warehouse, ice_kept) is None and _delta_rows(s3_endpoint, old_path) is None
        assert _delta_rows(azurite_endpoint, f"{az_root}/scaled_delta_az") is None
        assert _ice_rows(warehouse, "scaled_ice") is not None and _running(backend.read(), DELTA)
        for reader in LAKE_READERS.values():  # left on the new tables, not replayed
            assert backend.read().resources[reader].outputs == state.resources[reader].outputs
            assert _running(backend.read(), reader)
    finally:
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
