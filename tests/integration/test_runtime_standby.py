"""The runtime supervisor's warm standby driver (`runtime.standby`, on by default; dsflow/runtime/standby.py and
dsflow/adapters/spark/standby.py) against a real supervisor process, real drivers and the test broker.

A project that says nothing of the standby (so it is on) runs one stateless query in its own driver. Once the
supervisor's standby is ready, the query's driver is killed with SIGKILL while records keep arriving: the supervisor
must hand the query to the standby, so the state's PID becomes the standby's (a process that now reads as that
query's driver), a new standby must start, and every id produced before, during and after the kill must reach the
sink (counted by id in the sink topic against the produced ids: at-least-once, so an id may appear twice, none may
be missing). The store's bootstrap address comes from env_var(), a secret: the recorded spec names it only as
`@env:...`, so the adopted query reaches the broker only if the handoff passed the secret (over the pipe, never on
disk). The adopted standby's command line is the one it was started with (it holds the query's identity instead,
adapters/process.py). Destroy with the supervisor up must leave no standby. Without Spark: the standby's choice of
master and conf (a take-over without Spark: tests/unit/test_process_identity.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from dsflow.adapters import process
from dsflow.adapters.spark import standby as standby_process
from dsflow.engine import operations
from dsflow.adapters.spark.spec import driver_identity
from dsflow.runtime import control
from dsflow.runtime.standby import wanted_session
from support.projects import make_project
from support.streaming import CONFIG, produce, records
from support.waiting import wait_for

SQL = """\
CREATE STREAM events (id BIGINT, ts BIGINT) WITH ('value.format' = 'json', 'topic.partitions' = 2);
CREATE STREAM copy WITH ('trigger.interval' = '500 ms') AS SELECT id, ts FROM events;
"""
COPY = "query.analytics.public.copy"
SECRET_STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ env_var('DSF_STANDBY_BOOTSTRAP') }}"
"""


def _events(first: int, count: int) -> list[dict]:
    return [{"id": i, "ts": 1_700_000_000_000 + i} for i in range(first, first + count)]


def _waiting(loaded) -> dict | None:
    return control.standby_info(loaded)["standby"]


def _status(root, broker) -> dict[str, dict]:
    done = subprocess.run([sys.executable, "-m", "dsflow.cli", "-C", str(root), "--var", f"bootstrap={broker}",
                           "status", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return {e["address"]: e for e in json.loads(done.stdout)}


class Feeder(threading.Thread):
    """Produces ids from `first` on, 50 every 0.1 s, until stopped; `produced` is the next id."""

    def __init__(self, broker, project, first: int):
        super().__init__(daemon=True)
        self.broker, self.project, self.produced = broker, project, first
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            produce(self.broker, self.project, "events", _events(self.produced, 50))
            self.produced += 50
            self.stop.wait(0.1)


@pytest.mark.integration
def test_a_killed_driver_is_handed_to_the_standby_and_loses_nothing(tmp_path, broker, monkeypatch):
    monkeypatch.setenv("DSFLOW_RUNTIME_TICK", "0.5")
    monkeypatch.setenv("DSF_STANDBY_BOOTSTRAP", broker)  # the supervisor inherits it, as from a shell
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"sb{os.getpid()}_"),
                                   "stores/kafka.yml": SECRET_STORE, "sql/all.sql": SQL})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    assert "standby" not in CONFIG and loaded.project.runtime.standby  # the default
    assert operations.apply(loaded, operations.plan(loaded)).ok
    feeder = None
    try:
        control.up(loaded, options)
        project = loaded.project
        produce(broker, project, "events", _events(0, 500))
        ready = wait_for(lambda: (w := _waiting(loaded)) and w["state"] == "ready" and w, 240, "a ready standby")
        wait_for(lambda: len(set(_ids(broker, project))) == 500, 240, "the first ids")
        backend = loaded.workspace.state_backend()
        deployed = backend.read().resources[COPY]
        old_pid, run_dir = deployed.outputs["pid"], deployed.outputs["run_dir"]
        spec_text = open(os.path.join(run_dir, "spec.json")).read()
        assert "@env:" in spec_text and broker not in spec_text  # the secret is not on disk
        assert ready["pid"] != old_pid and not process.is_running(ready["pid"], driver_identity(run_dir))
        before = _standby_metrics(loaded)
        assert (before["dsflow_standby_enabled"], before["dsflow_standby_ready"]) == (1.0, 1.0), before
        assert before["dsflow_standby_handoffs_total"] == 0.0 and before["dsflow_standby_rss_bytes"] > 100e6, before

        feeder = Feeder(broker, project, 500)
        feeder.start()
        time.sleep(1.5)
        killed = time.time()
        os.kill(old_pid, signal.SIGKILL)
        new_pid = wait_for(lambda: (p := backend.read().resources[COPY].outputs["pid"]) != old_pid and p, 60,
                           "the supervisor to restart copy")
        assert new_pid == ready["pid"], "the query was not handed to the standby"
        assert process.is_running(new_pid, driver_identity(run_dir))  # it is now that query's driver
        assert not process.is_running(new_pid, standby_process.standby_identity(ready["folder"]))
        with open(f"/proc/{new_pid}/cmdline", "rb") as cmdline:  # its own, untouched: no driver's disguise
            argv = cmdline.read().split(b"\0")
        assert standby_process.STANDBY_MODULE.encode() in argv and standby_process.DRIVER_MODULE.encode() not in argv
        wait_for(lambda: _first_progress(run_dir, new_pid), 60, "the adopted query's first progress")
        print(f"back (first progress in the standby) {time.time() - killed:.1f} s after the kill")
        time.sleep(1.5)
        feeder.stop.set()
        feeder.join(30)

        entry = _status(root, broker)[COPY]
        assert entry["state"] == "running" and entry["pid"] == new_pid and entry["restarts"] == 1
        assert entry["last_restart"].startswith(f"standby (pid {new_pid}"), entry
        assert _standby_metrics(loaded)["dsflow_standby_handoffs_total"] == 1.0
        expected = set(range(feeder.produced))
        found = wait_for(lambda: expected <= set(c := Counter(_ids(broker, project)))
                         and c, 120, "every id in the sink")
        assert set(found) == expected, "an id the sink should not hold"
        print(f"{len(expected)} ids, 0 lost, {sum(found.values()) - len(found)} written twice (at-least-once)")

        fresh = wait_for(lambda: (w := _waiting(loaded)) and w["pid"] != new_pid and w, 120, "a new standby")
        assert fresh["state"] in ("starting", "ready")
        _destroy_stops_the_standby(options, loaded, fresh["pid"])
    finally:
        if feeder is not None:
            feeder.stop.set()
        loaded = operations.load(options)
        operations.apply(loaded, operations.plan(loaded, destroy=True))
        control.down(loaded)
        assert control.info(loaded) is None and _waiting(loaded) is None


def _standby_metrics(loaded) -> dict[str, float]:
    """The supervisor's dsflow_standby_* samples, scraped from its Prometheus endpoint."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    port = control.info(loaded)["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name.startswith("dsflow_standby_")}


def _ids(broker, project) -> list[int]:
    """The id of every record the sink topic holds."""
    return [json.loads(r["value"])["id"] for r in records(broker, project, "copy")]


def _first_progress(run_dir: str, pid: int) -> bool:
    try:
        status = json.loads(open(os.path.join(run_dir, "status.json")).read())
    except (OSError, ValueError):
        return False
    return status.get("pid") == pid and status.get("batch_id") is not None


def _destroy_stops_the_standby(options, loaded, pid: int) -> None:
    fresh = operations.load(options)
    assert operations.apply(fresh, operations.plan(fresh, destroy=True)).ok
    wait_for(lambda: not process.is_running(pid, standby_process.standby_identity(_folder(loaded, pid))), 60,
             "the standby to stop after destroy")
    assert _waiting(loaded) is None


def _folder(loaded, pid: int):
    root = control.standby_root(loaded)
    return next((f for f in root.glob("sb-*") if standby_process.read_status(f).get("pid") == pid), root / "none")


def test_the_standby_takes_the_master_and_conf_most_queries_have(tmp_path):
    def spec(name: str, master: str, conf: dict) -> object:
        path = tmp_path / name / "spec.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"master": master, "spark_conf": conf}))
        return path

    a = spec("a", "local[2]", {"x": "1"})
    b = spec("b", "local[2]", {"x": "2"})
    c = spec("c", "local[2]", {"x": "2"})
    cluster = spec("d", "spark://h:7077", {})
    broken = tmp_path / "e" / "spec.json"
    assert wanted_session([a, b, c, cluster, broken]) == ("local[2]", {"x": "2"})
    assert wanted_session([a, b]) == ("local[2]", {"x": "1"})  # a tie: the first in address order
    assert wanted_session([cluster, broken]) is None  # a cluster master gets no standby
    assert standby_process.misfit("local[2]", {"x": "1"}, "local[2]", {"x": "2"}) == \
        "its Spark conf is not the one this session was built with"
    assert standby_process.misfit("local[2]", {}, "local[2]", {}) is None
