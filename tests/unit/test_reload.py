"""The restart-in-place protocol between apply and a query's driver (adapters/spark/reload.py), both sides in
this process: the driver side is driver._await_resume and reload's own pending/answer, on real files and signals.
The restart itself, on Spark and a broker, is checked by tests/e2e/test_e2e_example.py (same PID, a new run,
every id once) and tests/e2e/test_restart_exactly_once.py (by id)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from dsflow.adapters.spark import driver, reload
from dsflow.adapters.spark.spec import QuerySpec, SinkSpec, SourceSpec, restart_env
from dsflow.errors import DsflowError


@pytest.fixture(autouse=True)
def _sigusr1_ignored():
    """reload signals the driver's PID (here, this process) with SIGUSR1: ignored in the test."""
    before = signal.signal(signal.SIGUSR1, lambda *_: None)
    yield
    signal.signal(signal.SIGUSR1, before)


def _spec(run_dir: Path, conf: dict[str, str] | None = None, secret: str | None = None) -> QuerySpec:
    client = {"bootstrap.servers": "127.0.0.1:9"} | ({"sasl.password": f"@env:{secret}"} if secret else {})
    return QuerySpec(name="analytics.public.q", version="v2", master="local[2]", spark_conf=conf or {},
                     checkpoint=str(run_dir / "cp"), status_path=str(run_dir / "status.json"),
                     trigger_interval="1 second",
                     sources=[SourceSpec(view="s", topic="in", client_config=client, schema_ddl="id BIGINT")],
                     sink=SinkSpec(topic="out", client_config=client, columns=["id"]), select_sql="SELECT id FROM s")


def _driver_answering(run_dir: Path, op: str, **reply) -> threading.Thread:
    def serve() -> None:
        for _ in range(200):
            request = reload.pending(run_dir, op)
            if request is not None:
                reload.answer(run_dir, request, **reply)
                return
            threading.Event().wait(0.01)

    thread = threading.Thread(target=serve)
    thread.start()
    return thread


def test_a_driver_that_parks_answers_and_its_reply_is_returned(tmp_path: Path) -> None:
    thread = _driver_answering(tmp_path, "park", parked=True, stopped_between_batches=True)
    reply = reload.park(tmp_path, os.getpid(), lambda: True, timeout=5)
    thread.join()
    assert reply is not None and reply["stopped_between_batches"] is True
    assert not (tmp_path / reload.REQUEST_FILE).exists(), "an answered request is removed"


def test_no_park_without_a_live_driver_or_an_answer(tmp_path: Path) -> None:
    assert reload.park(tmp_path, None, lambda: True, timeout=1) is None
    assert reload.park(tmp_path, os.getpid(), lambda: False, timeout=1) is None
    assert reload.park(tmp_path, os.getpid(), lambda: True, timeout=0.3) is None, "an old driver never answers"


def test_a_reply_to_another_request_is_not_taken(tmp_path: Path) -> None:
    (tmp_path / reload.REPLY_FILE).write_text('{"id": "stale", "parked": true}')
    assert reload.park(tmp_path, os.getpid(), lambda: True, timeout=0.3) is None


def _resume(tmp_path: Path, spec: QuerySpec, built: QuerySpec, secrets: dict[str, str],
            code: str | None = None) -> tuple[str | None, object]:
    """Apply's resume against the driver's _await_resume in a thread: (apply's answer, the driver's next spec)."""
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.model_dump_json())
    found: dict[str, object] = {}
    waiting = threading.Thread(target=lambda: found.update(
        spec=driver._await_resume(built, built, threading.Event(), threading.Event(), code)))
    waiting.start()
    why = reload.resume(tmp_path, os.getpid(), spec_path, secrets, lambda: True, timeout=10)
    waiting.join()
    return why, found["spec"]


def test_a_parked_driver_runs_a_spec_of_its_master_and_conf(tmp_path: Path) -> None:
    built = _spec(tmp_path, {"spark.sql.shuffle.partitions": "2"})
    why, resumed = _resume(tmp_path, _spec(tmp_path, {"spark.sql.shuffle.partitions": "2"}), built, {})
    assert why is None
    assert isinstance(resumed, QuerySpec) and resumed.select_sql == "SELECT id FROM s"


def test_a_spec_of_another_spark_conf_is_refused_and_the_driver_exits(tmp_path: Path) -> None:
    built = _spec(tmp_path, {"spark.sql.shuffle.partitions": "2"})
    why, resumed = _resume(tmp_path, _spec(tmp_path, {"spark.sql.shuffle.partitions": "4"}), built, {})
    assert why == "its Spark conf is not the one this session was built with" and resumed is None


def test_secrets_the_driver_was_not_started_with_are_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DSFLOW_SECRET_0", "old-password")
    spec = _spec(tmp_path, secret="DSFLOW_SECRET_0")
    why, resumed = _resume(tmp_path, spec, spec, {"DSFLOW_SECRET_0": "new-password"})
    assert why == "its secrets are not the ones this driver was started with" and resumed is None
    why, resumed = _resume(tmp_path, spec, spec, {"DSFLOW_SECRET_0": "old-password"})
    assert why is None and isinstance(resumed, QuerySpec)
    assert resumed.sources[0].client_config["sasl.password"] == "old-password", "secrets resolved from its env"


def test_an_unreadable_spec_is_refused(tmp_path: Path) -> None:
    built = _spec(tmp_path)
    waiting = threading.Thread(target=driver._await_resume, args=(built, built, threading.Event(), threading.Event()))
    waiting.start()
    why = reload.resume(tmp_path, os.getpid(), tmp_path / "missing.json", {}, lambda: True, timeout=10)
    waiting.join()
    assert why is not None and why.startswith("its spec cannot be read")


def test_a_parked_driver_asked_to_park_again_answers_at_once(tmp_path: Path) -> None:
    """An apply interrupted between park and resume, run again, parks the driver again: it answers that it is parked
    (the checkpoint's last commit is final) and goes on waiting for the spec."""
    built = _spec(tmp_path)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(built.model_dump_json())
    found: dict[str, object] = {}
    waiting = threading.Thread(target=lambda: found.update(
        spec=driver._await_resume(built, built, threading.Event(), threading.Event())))
    waiting.start()
    assert reload.park(tmp_path, os.getpid(), lambda: True, timeout=5) is not None
    assert reload.resume(tmp_path, os.getpid(), spec_path, {}, lambda: True, timeout=10) is None
    waiting.join()
    assert isinstance(found["spec"], QuerySpec)


def test_an_unanswered_request_is_taken_back(tmp_path: Path) -> None:
    """A driver that was exiting when asked (its query failed) never answers: the request must not stay for the cold
    driver started next in the same run folder, which would find it and park itself (found by
    tests/e2e/test_kinesis_offsets.py: a replay whose new driver stopped at its first status)."""
    assert reload.park(tmp_path, os.getpid(), lambda: True, timeout=0.2) is None
    assert reload.pending(tmp_path, "park") is None
    alive = iter([True, False])
    assert reload.park(tmp_path, os.getpid(), lambda: next(alive, False), timeout=5) is None
    assert not (tmp_path / reload.REQUEST_FILE).exists()


def test_a_driver_started_before_dsflow_changed_refuses_the_spec(tmp_path: Path) -> None:
    """An upgrade (or an edit) of dsflow's code after the driver started: it would run the new spec with the code it
    loaded then, so it refuses and a cold driver runs it."""
    built = _spec(tmp_path)
    assert reload.code_fingerprint() == reload.code_fingerprint()
    why, resumed = _resume(tmp_path, built, built, {}, code="before the upgrade")
    assert why == "dsflow's code changed since this driver started" and resumed is None


def test_a_supervisor_restart_takes_each_secret_from_the_same_setting_of_the_project_now(tmp_path: Path) -> None:
    """spec.restart_env: a recorded spec's '@env:NAME' gets the value the project gives now at the same place (not
    by number: a store that gained a secret setting since the apply numbers its secrets otherwise); DSF-E275 naming
    the store and the setting when the project gives none."""
    recorded = _spec(tmp_path, secret="DSFLOW_SECRET_1")
    now = {"bootstrap.servers": "127.0.0.1:9", "ssl.key.password": "other", "sasl.password": "now-secret"}
    fresh = recorded.model_copy(update={
        "sources": [recorded.sources[0].model_copy(update={"client_config": now})],
        "sink": recorded.sink.model_copy(update={"client_config": now})})
    stores = ["kafka_main", "kafka_out"]
    assert restart_env(recorded, fresh, stores, "analytics.public.q") == {"DSFLOW_SECRET_1": "now-secret"}
    changed = fresh.model_copy(update={"sink": recorded.sink.model_copy(update={"client_config": {}})})
    with pytest.raises(DsflowError) as refused:
        restart_env(recorded, changed, stores, "analytics.public.q")
    assert refused.value.code == "DSF-E275" and "store 'kafka_out' setting sasl.password" in refused.value.message
    assert "kafka_main" not in refused.value.message and "now-secret" not in refused.value.message
    with pytest.raises(DsflowError, match="no longer in the project files"):
        restart_env(recorded, None, [], "analytics.public.q")
