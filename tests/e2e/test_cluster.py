"""The same project on a Spark standalone cluster (runtime.spark_master: spark://...): a real master and two workers
started from pyspark's own spark-class (tests/support/cluster.py), real applications started by `dsflow apply`: the
project runs `runtime.isolation: shared` (its stateless query in a shared application, the host) and its stateful
query overrides it with `'runtime.isolation' = 'query'` (its own driver), so both ways of running are on the cluster.

Spark's REST API shows both applications ran tasks on the workers' executors. Then one worker is killed with SIGKILL
(with its executor JVMs) while a task of the aggregation runs on it and records keep arriving (a producer thread):
both applications go on with the other worker's executors, the stateful changelog ends equal to a plain Python
reference (counts and id sums by user: nothing lost, nothing counted twice) and the stateless stream holds every id
(at-least-once: duplicates allowed).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from support.changelogs import changelog_content
from support.cluster import standalone_cluster
from dsflow.engine import operations
from support.projects import make_project
from support.servers import free_port
from support.streaming import produce, records
from support.waiting import wait_for

pytestmark = pytest.mark.integration

CONFIG = """\
name: clustertest
default:
  database: analytics
  schema: public
  store: kafka_main
runtime:
  trigger_interval: 1 second
  isolation: shared
  spark_master: "{master}"
  spark_conf:
    spark.sql.shuffle.partitions: "2"
    spark.executor.memory: 512m
    spark.executor.cores: "1"
    spark.cores.max: "2"
    spark.ui.enabled: "true"
    spark.ui.port: "{ui_port}"
default_environment: dev
environments:
  dev:
    topic_prefix: "{prefix}"
    vars:
      bootstrap: 127.0.0.1:9092
"""

SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'viewtime', 'topic.partitions' = 2);

CREATE CHANGELOG user_totals WITH ('trigger.interval' = '500 ms', 'runtime.isolation' = 'query') AS
  SELECT userid, COUNT(*) AS views, SUM(id) AS id_sum FROM pageviews GROUP BY userid;
CREATE STREAM page_one WITH ('trigger.interval' = '500 ms') AS
  SELECT id, userid FROM pageviews WHERE pageid = 'Page_1';
"""
STATEFUL = "dsflow:analytics.public.user_totals"
"""The aggregation's own driver (its application is named after the query)."""
HOST = "dsflow:app-1"
"""The shared application running page_one."""
APPS = {STATEFUL, HOST}


@pytest.fixture(scope="session")
def cluster():
    """A standalone master and two workers (2 core slots, 1 GiB each) for the test run, stopped by PID."""
    folder = Path(tempfile.mkdtemp(prefix="dsflow-cluster-"))
    with standalone_cluster(folder) as running:
        yield running
    shutil.rmtree(folder, ignore_errors=True)


def _events(first: int, count: int, rng: random.Random) -> list[dict]:
    return [{"id": i, "viewtime": 1_700_000_000_000 + rng.randrange(0, 600_000), "userid": f"User_{rng.randrange(20)}",
             "pageid": f"Page_{rng.randrange(1, 5)}"} for i in range(first, first + count)]


def _reference(events: list[dict]) -> dict[str, dict]:
    totals: dict[str, dict] = defaultdict(lambda: {"views": 0, "id_sum": 0})
    for event in events:
        totals[event["userid"]]["views"] += 1
        totals[event["userid"]]["id_sum"] += event["id"]
    return {user: {"userid": user, **total} for user, total in totals.items()}


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


def _applications(ui_port: int) -> dict[str, str]:
    """{application name: UI URL} of the drivers' UIs on ui_port and the ports after it (Spark takes the next
    free port when one is taken). A port there may belong to another server of the test run (a broker answers
    HTTP with bytes that are no status line): only a Spark REST answer counts."""
    found = {}
    for port in range(ui_port, ui_port + 8):
        try:
            for app in _get(f"http://127.0.0.1:{port}/api/v1/applications"):
                found[app["name"]] = f"http://127.0.0.1:{port}/api/v1/applications/{app['id']}"
        except (OSError, http.client.HTTPException, ValueError, TypeError, KeyError):
            continue
    return found if APPS <= set(found) else {}


def _executor_tasks(app_url: str) -> dict[str, int]:
    """{executor host:port: tasks completed} of an application's executors (alive or dead), the driver left out."""
    return {e["hostPort"]: e["completedTasks"] for e in _get(f"{app_url}/allexecutors") if e["id"] != "driver"}


def _keep_producing(broker: str, project, events: list[dict], rng: random.Random, stop: threading.Event) -> None:
    """Produce 200 events every 0.2 s (appended to `events`) until `stop` is set."""
    while not stop.is_set():
        more = _events(len(events), 200, rng)
        produce(broker, project, "pageviews", more, "userid")
        events += more
        stop.wait(0.2)


def _busy_on(cluster, app_url: str, worker: int) -> bool:
    """True while the application runs a task on its executor on `worker` (the worker's JSON names the executor)."""
    app_id = app_url.rsplit("/", 1)[1]
    ids = {str(e["id"]) for e in cluster.worker_state(worker)["executors"] if e["appid"] == app_id}
    return any(e["activeTasks"] for e in _get(f"{app_url}/executors") if e["id"] in ids)


def _executors_by_worker(cluster) -> list[set[str]]:
    """The application ids with an executor running on each worker (each worker's own JSON)."""
    return [{e["appid"] for e in cluster.worker_state(i)["executors"]} for i in range(len(cluster.workers))]


def test_project_runs_on_a_standalone_cluster_and_survives_a_killed_worker(tmp_path, broker, cluster):
    ui_port = free_port()
    config = CONFIG.format(master=cluster.master, ui_port=ui_port, prefix=f"cluster{os.getpid()}_")
    options = operations.Options(make_project(tmp_path, {"dsflow.yml": config, "sql/all.sql": SQL}), None,
                                 {"bootstrap": broker})
    loaded = operations.load(options)
    try:  # a first apply that fails part way is torn down too
        assert operations.apply(loaded, operations.plan(loaded)).ok
        state = loaded.workspace.state_backend().read()
        hosts = {k: r.outputs.get("app") for k, r in state.resources.items() if k.startswith("query.")}
        assert hosts == {"query.analytics.public.user_totals": None, "query.analytics.public.page_one": "app-1"}, hosts
        _run(loaded.project, broker, cluster, ui_port)
    finally:  # stop the drivers even when an assertion failed
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))


def _run(project, broker: str, cluster, ui_port: int) -> None:
    rng = random.Random(23)
    events = _events(0, 1_000, rng)
    produce(broker, project, "pageviews", events, "userid")
    wait_for(lambda: changelog_content(broker, project, "user_totals")[0], 240, "the first totals")

    apps = wait_for(lambda: _applications(ui_port), 30, "both drivers' REST APIs")
    for name in APPS:  # every application ran tasks on executors of both workers, none on the driver
        tasks = wait_for(lambda name=name: {hp: n for hp, n in _executor_tasks(apps[name]).items() if n}, 30,
                         f"tasks of {name} on executors")
        assert len(tasks) == 2, (name, tasks)
    app_ids = {a["id"] for a in cluster.state()["activeapps"] if a["name"] in APPS}
    assert len(app_ids) == 2 and all(found == app_ids for found in _executors_by_worker(cluster))

    stop = threading.Event()  # records keep arriving while a worker dies in the middle of a task
    producer = threading.Thread(target=_keep_producing, args=(broker, project, events, rng, stop), daemon=True)
    producer.start()
    try:
        wait_for(lambda: _busy_on(cluster, apps[STATEFUL], 0), 120, "a task of the aggregation on worker 0", 0.05)
        killed = cluster.kill_worker(0)
        time.sleep(1.0)
    finally:
        stop.set()
        producer.join()
    assert len(killed) >= 3, killed  # the worker and its two executor JVMs (and their Python workers)
    late = _events(len(events), 1_000, rng)
    produce(broker, project, "pageviews", late, "userid")
    events += late

    expected = _reference(events)
    wait_for(lambda: changelog_content(broker, project, "user_totals")[0] == expected, 180, "the totals to match")
    wanted = {e["id"] for e in events if e["pageid"] == "Page_1"}
    wait_for(lambda: {json.loads(r["value"])["id"] for r in records(broker, project, "page_one")} == wanted, 120,
             "every Page_1 id in the stream sink")
    alive = [w for w in cluster.state()["workers"] if w["state"] == "ALIVE"]
    assert len(alive) == 1
    for name in APPS:  # each application lost its executor on the killed worker and went on with the other one
        executors = [e for e in _get(f"{apps[name]}/allexecutors") if e["id"] != "driver"]
        assert sorted(e["isActive"] for e in executors) == [False, True], (name, executors)
        assert all(e["completedTasks"] for e in executors), (name, executors)
