"""The runtime supervisor's rules on a real state file and lock, without Spark: it leaves alone what apply or
destroy is changing, and status shows what it recorded (dsflow/runtime)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from dsflow.engine import operations
from dsflow.core.state import DeployedResource, PendingChange, State
from dsflow.adapters.spark.spec import DRIVER_MODULE
from dsflow.runtime import control, endpoint
from dsflow.runtime.records import read_record
from dsflow.runtime.supervisor import Supervisor
from support.projects import make_project

SQL = """\
CREATE STREAM events (id BIGINT) WITH ('value.format' = 'json');
CREATE STREAM copy AS SELECT id FROM events;
"""
ADDRESS = "query.analytics.public.copy"


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def _deployed(run_dir, pid: int) -> DeployedResource:
    return DeployedResource(address=ADDRESS, depends_on=[], data_hash="h", metadata_hash="m", data={}, metadata={},
                            outputs={"pid": pid, "version": "h", "run_dir": str(run_dir), "checkpoint": "unused"})


def _setup(tmp_path):
    root = make_project(tmp_path, {"sql/all.sql": SQL})
    options = operations.Options(root, None, None)
    loaded = operations.load(options)
    run_dir = loaded.workspace.query_dir("analytics.public.copy")
    backend = loaded.workspace.state_backend()
    state = State().with_lineage().with_resource(_deployed(run_dir, _dead_pid()))
    backend.write(state)
    return options, loaded, backend, run_dir


def test_nothing_is_touched_while_apply_holds_the_lock_or_a_change_is_pending(tmp_path):
    options, loaded, backend, run_dir = _setup(tmp_path)
    supervisor = Supervisor(options)
    with backend.lock("apply"):
        assert supervisor.tick()
    assert read_record(run_dir) is None
    state = backend.read()
    backend.write(state.with_pending(PendingChange(address=ADDRESS, action="update")), expected_serial=state.serial)
    assert supervisor.tick()
    assert read_record(run_dir) is None

    state = backend.read()
    backend.write(state.with_pending(None), expected_serial=state.serial)
    assert supervisor.tick()  # now the dead driver is seen: recorded, a restart planned after the backoff
    record = read_record(run_dir)
    assert record is not None and record.failures == 1 and record.next_retry is not None and record.restarts == 0
    assert record.last_exit.startswith("gone without recording a failure")
    entry = next(e for e in operations.status(loaded, with_dead_letters=False) if e["address"] == ADDRESS)
    assert entry["state"] == "restarting" and entry["next_retry"] and entry["restarts"] == 0


def test_a_query_replaced_or_destroyed_meanwhile_is_not_restarted(tmp_path):
    options, loaded, backend, run_dir = _setup(tmp_path)
    supervisor = Supervisor(options)
    seen = backend.read().resources[ADDRESS]
    state = backend.read()  # apply replaced it: another PID is recorded now
    backend.write(state.with_resource(_deployed(run_dir, _dead_pid())), expected_serial=state.serial)
    assert supervisor._restart_locked(seen, DRIVER_MODULE) is None
    state = backend.read()  # destroy removed it
    backend.write(state.without(ADDRESS), expected_serial=state.serial)
    assert supervisor._restart_locked(seen, DRIVER_MODULE) is None
    assert ADDRESS not in backend.read().resources


def test_apply_starts_no_supervisor_when_told_not_to(tmp_path, monkeypatch):
    options, loaded, _, _ = _setup(tmp_path)
    monkeypatch.setenv(control.DISABLE_ENV, "off")
    assert control.ensure_started(loaded, options) is None
    assert control.info(loaded) is None


def test_apply_waits_out_a_restart_but_not_another_holder(tmp_path):
    import threading

    import pytest

    from dsflow.errors import DsflowError
    from dsflow.runtime.locking import RESTART_OPERATION, lock_patiently

    _, _, backend, _ = _setup(tmp_path)
    with backend.lock("apply"):
        with pytest.raises(DsflowError) as refused:
            with lock_patiently(backend, "destroy"):
                pass
    assert refused.value.code == "DSF-E802"

    held, release = threading.Event(), threading.Event()

    def restart() -> None:
        with backend.lock(RESTART_OPERATION):
            held.set()
            release.wait(60)

    worker = threading.Thread(target=restart)
    worker.start()
    held.wait(60)
    threading.Timer(0.5, release.set).start()
    with lock_patiently(backend, "apply") as info:
        assert info.operation == "apply"
    worker.join()


def test_a_stop_signal_taken_by_another_thread_ends_the_pause_long_before_the_tick():
    """The kernel may hand SIGTERM to any thread; its Python handler runs only when the main thread runs bytecode
    again, so the supervisor's pause between looks must not be one long wait (CI saw a 60 s hang)."""
    stop, looks = threading.Event(), endpoint.Looks()
    previous = signal.signal(signal.SIGUSR1, lambda *_: (stop.set(), looks.wake()))
    try:
        other = threading.Thread(target=lambda: (time.sleep(0.3), signal.pthread_kill(threading.get_ident(),
                                                                                      signal.SIGUSR1)))
        other.start()
        started = time.monotonic()
        looks.pause(60, stop)
        other.join()
        assert stop.is_set() and time.monotonic() - started < 30
    finally:
        signal.signal(signal.SIGUSR1, previous)
