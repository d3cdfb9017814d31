"""A process dsflow starts is known by its identity (adapters/process.py): a record of its PID and start time in
its own folder, and a lock it holds while it lives. Never by its command line.

pid_max is 32768 on the CI machine, and a test session starts hundreds of drivers: a PID recorded for one query is
reused by another process. A record whose start time is not the live process's is that case: the process is neither
running for dsflow nor ever stopped. A standby that takes a query over claims the query's identity and leaves its
command line as it was started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsflow.adapters import process
from dsflow.adapters.spark import standby as standby_process
from dsflow.adapters.spark.spec import DRIVER_MODULE, driver_identity
from dsflow.engine.executors import DATAGEN_MODULE, _stop_orphan, datagen_identity, query_identity
from dsflow.errors import DsflowError
from support.waiting import wait_for

STAND_IN = "standin_process"
"""A module that sleeps (or, told so, takes a query over as a standby does): started like dsflow's processes."""
STAND_IN_CODE = """\
import sys, time
from pathlib import Path

if len(sys.argv) > 2 and sys.argv[1] == "--take-over":
    from dsflow.adapters.spark import standby
    print(standby.take_over(Path(sys.argv[2]), Path(sys.argv[3])), flush=True)
time.sleep(120)
"""


@pytest.fixture
def stand_in(tmp_path):
    """Start the stand-in module as `identity` with `process.spawn`; stopped at the end."""
    (tmp_path / f"{STAND_IN}.py").write_text(STAND_IN_CODE)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    started: list[subprocess.Popen] = []

    def start(identity: process.Identity, *args: str) -> subprocess.Popen:
        popen = process.spawn(STAND_IN, list(args), tmp_path / "logs" / f"{len(started)}.log", identity, env)
        started.append(popen)
        return popen

    yield start
    for popen in started:
        popen.kill()
        popen.wait(10)


def test_a_spawned_process_is_recorded_by_pid_and_start_time_and_holds_its_lock(tmp_path, stand_in):
    identity = driver_identity(tmp_path / "q")
    child = stand_in(identity)
    record = process.read_record(identity)
    assert record is not None and record["pid"] == child.pid and record["module"] == STAND_IN
    assert record["start"] == process.start_time(child.pid)
    assert process.is_running(child.pid, identity) and process.holder(identity) == child.pid
    assert process.is_running(child.pid, query_identity({"run_dir": str(tmp_path / "q")}))  # status and refresh
    assert not process.is_running(child.pid, driver_identity(tmp_path / "other"))
    assert not process.is_running(child.pid, datagen_identity(tmp_path / "q"))  # another role, same folder
    assert process.stop(child.pid, identity, timeout=5) is True
    assert child.wait(10) is not None and not process.is_running(child.pid, identity)
    assert process.holder(identity) is None


def test_a_reused_pid_is_neither_running_nor_stopped(tmp_path, stand_in):
    """The record names a PID that a process started later holds now: its start time differs."""
    identity = driver_identity(tmp_path / "q")
    child = stand_in(identity)
    record = process.read_record(identity)
    assert record is not None
    identity.record.write_text(json.dumps({**record, "start": "ticks:1"}))  # the process it was started for
    assert not process.is_running(child.pid, identity)
    assert process.holder(identity) is None
    assert process.stop(child.pid, identity, timeout=1) is False
    assert child.poll() is None, "a process on a reused PID was stopped"


def test_a_live_process_that_does_not_hold_the_lock_is_not_the_identity(tmp_path, stand_in):
    """A record copied onto another live process (its PID and own start time) still needs the lock."""
    mine, other = driver_identity(tmp_path / "mine"), driver_identity(tmp_path / "other")
    stand_in(mine)
    bystander = stand_in(other)
    assert mine.record is not None
    mine.record.write_text(json.dumps({"pid": bystander.pid, "start": process.start_time(bystander.pid)}))
    (tmp_path / "mine" / "driver.process.lock").unlink()
    assert not process.is_running(bystander.pid, mine)
    assert process.stop(bystander.pid, mine, timeout=1) is False and bystander.poll() is None


def test_a_spawned_process_that_claims_its_identity_keeps_it(tmp_path, stand_in):
    """The supervisor claims its identity at its start: started by `spawn` (`runtime up`), it holds it already, even
    before its parent wrote the record."""
    identity = process.Identity(tmp_path / "run", "supervisor")
    code = ("import sys\nfrom pathlib import Path\nfrom dsflow.adapters import process\n"
            "identity = process.Identity(Path(sys.argv[1]), 'supervisor')\nprocess.claim(identity, 'x', wait=0.5)\n"
            "print(process.is_running(process.os.getpid(), identity), flush=True)\n")
    (tmp_path / "claimer.py").write_text(code)
    child = process.spawn("claimer", [str(tmp_path / "run")], tmp_path / "claimer.log", identity,
                          {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})
    assert child.wait(60) == 0 and (tmp_path / "claimer.log").read_text().strip() == "True"


def test_two_processes_never_run_as_one_identity(tmp_path, stand_in, monkeypatch):
    identity = datagen_identity(tmp_path / "g")
    first = stand_in(identity)
    monkeypatch.setattr(process, "LOCK_WAIT_SECONDS", 0.3)
    with pytest.raises(DsflowError) as raised:
        stand_in(identity)
    assert raised.value.code == "DSF-E274" and str(first.pid) in raised.value.message
    assert process.is_running(first.pid, identity)
    process.stop(first.pid, identity, timeout=5)
    second = stand_in(identity)  # the lock went with the first process
    assert process.is_running(second.pid, identity) and not process.is_running(first.pid, identity)


def test_an_orphan_driver_nothing_recorded_is_stopped_by_its_identity(tmp_path, stand_in):
    """An apply interrupted between starting a query's driver and recording its PID leaves a driver that nothing
    names, maybe before its status file: the next apply that starts the query stops the process its run folder's
    identity names, so one driver runs, not two. Another query's driver is left alone."""
    orphan = stand_in(driver_identity(tmp_path / "q"))
    bystander = stand_in(driver_identity(tmp_path / "other"))
    _stop_orphan(tmp_path / "q")
    assert orphan.wait(30) is not None, "the unrecorded driver was left running"
    assert bystander.poll() is None, "a driver of another query was stopped"


def test_a_standby_takes_a_query_over_without_touching_its_command_line(tmp_path, stand_in):
    """What an adopted standby does (standby.take_over): it claims the query's driver identity and gives up its
    standby identity; /proc/PID/cmdline stays what it was started with, and stop and status find it."""
    folder, run_dir = tmp_path / "sb-1", tmp_path / "q a"  # a space in the path
    run_dir.mkdir()
    as_started = ["--take-over", str(folder), str(run_dir), standby_process.STANDBY_MODULE,
                  str(folder / standby_process.CONFIG_FILE)]  # what a standby's command line holds, too
    child = stand_in(standby_process.standby_identity(folder), *as_started)
    argv = [sys.executable, "-m", STAND_IN, *as_started]
    wait_for(lambda: process.is_running(child.pid, driver_identity(run_dir)), 30, "the take-over")
    assert Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")[:-1] == [os.fsencode(a) for a in argv]
    assert not process.is_running(child.pid, standby_process.standby_identity(folder))
    assert standby_process.describe(tmp_path) is None and standby_process.stop_all(tmp_path) == []
    assert process.is_running(child.pid, query_identity({"run_dir": str(run_dir)}))
    kept = standby_process.standby_identity(folder).scratch
    assert kept.is_dir(), "the standby's scratch folder is the driver's TMPDIR now: kept while it runs"
    assert process.stop(child.pid, driver_identity(run_dir), timeout=5) is True
    assert child.wait(10) is not None
    assert not kept.exists(), "removed with the process that used it"


def test_a_standby_does_not_take_a_query_whose_driver_lives(tmp_path, stand_in):
    folder, run_dir = tmp_path / "sb-1", tmp_path / "q"
    driver = stand_in(driver_identity(run_dir))
    child = stand_in(standby_process.standby_identity(folder), "--take-over", str(folder), str(run_dir))
    log = tmp_path / "logs" / "1.log"
    wait_for(lambda: "DSF-E274" in log.read_text(), 30, "the refusal")
    assert process.is_running(driver.pid, driver_identity(run_dir))
    assert process.is_running(child.pid, standby_process.standby_identity(folder))  # still a standby


def test_processes_started_before_identity_records_are_read_by_their_command_line(tmp_path):
    """No record (a driver or generator an older dsflow started): the command line is read, never written."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", DRIVER_MODULE,
                              str(tmp_path / "other" / "spec.json")], start_new_session=True)
    try:
        assert process.is_running(other.pid, driver_identity(tmp_path / "other"))
        assert process.is_running(other.pid, driver_identity(None))  # a state written before run_dir was recorded
        assert not process.is_running(other.pid, driver_identity(tmp_path / "mine"))
        assert not process.is_running(other.pid, datagen_identity(tmp_path / "other"))
        assert datagen_identity(None).legacy == (DATAGEN_MODULE,)
        assert process.stop(other.pid, driver_identity(tmp_path / "mine"), timeout=1) is False
        assert other.poll() is None
        assert process.stop(other.pid, driver_identity(tmp_path / "other"), timeout=5) is True
        assert other.wait(timeout=10) is not None
    finally:
        other.kill()
        other.wait(10)


def test_a_member_of_a_shared_application_is_found_only_while_its_live_host_reports_it_running(tmp_path, stand_in):
    """An import of a query running in a shared application (core/imports.py) finds it by its host's identity and
    the host's report of it in the generation queries.json lists (adapters/spark/apps.py `member`)."""
    from dsflow.adapters.spark import apps

    root, spec = tmp_path / "run" / "apps", tmp_path / "run" / "queries" / "db.s.q" / "spec.json"
    app_dir = root / "app-1"
    app_dir.mkdir(parents=True)
    apps.write_json(app_dir / "queries.json", {"queries": {"db.s.q": {"spec": str(spec), "generation": 2}}})
    assert apps.member(root, spec) is None, "no host"
    host = stand_in(apps.host_identity(app_dir))

    def report(**seen) -> None:
        apps.write_json(app_dir / "host.json", {"pid": seen.pop("pid", host.pid), "queries": {
            "db.s.q": {"generation": 2, "state": "running", **seen}}})

    report()
    assert apps.member(root, spec) == {"app": "app-1", "app_dir": str(app_dir), "app_query": "db.s.q", "pid": host.pid}
    assert apps.member(root, spec.parent.parent / "db.s.other" / "spec.json") is None, "not listed"
    for stale in ({"state": "failed"}, {"state": "stopped"}, {"generation": 1}, {"pid": host.pid + 1}):
        report(**stale)
        assert apps.member(root, spec) is None, stale
    report()
    host.kill()
    host.wait(10)
    assert apps.member(root, spec) is None, "its host is gone"


def _environment(pid: int) -> dict[str, str]:
    """The environment the process was started with, once it runs the program it was started for (before its exec,
    /proc shows its parent's)."""
    def read() -> dict[str, str] | None:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        found = dict(entry.decode().split("=", 1) for entry in raw if b"=" in entry)
        return found if process.RECORD_ENV in found else None

    return wait_for(read, 30, "the process to start", interval=0.01)


def test_a_spawned_process_keeps_its_temporary_files_in_a_scratch_folder_that_its_next_start_and_stop_remove(
        tmp_path, stand_in):
    """A driver killed with SIGKILL leaves Spark's local files (RocksDB working copies, block files) behind: in its
    identity's scratch folder, emptied by the next start, removed by stop; never in the system's /tmp itself."""
    identity = driver_identity(tmp_path / "q")
    scratch = identity.scratch
    assert scratch is not None and scratch.parent == process.scratch_root()
    assert len(str(scratch)) - len(str(scratch.parent)) <= 20, "a short path: Spark makes Unix sockets in it"
    child = stand_in(identity)
    environ = _environment(child.pid)
    assert environ["TMPDIR"] == str(scratch) and environ[process.SCRATCH_ROOT_ENV] == str(scratch.parent)
    assert environ["JDK_JAVA_OPTIONS"].endswith(f"-Djava.io.tmpdir={scratch}")
    assert scratch.is_dir() and scratch.stat().st_mode & 0o777 == 0o700
    (scratch / "spark-1234").mkdir()  # what a JVM left when it was killed
    child.kill()
    child.wait(10)
    assert (scratch / "spark-1234").exists()
    second = stand_in(identity)
    assert scratch.is_dir() and not any(scratch.iterdir()), "the next start empties it"
    assert _environment(second.pid)["TMPDIR"] == str(scratch)
    assert process.stop(second.pid, identity, timeout=5) is True
    assert not scratch.exists(), "stop removes it"
    assert process.stop(second.pid, identity) is False and not scratch.exists()


def test_a_scratch_path_that_is_not_a_folder_of_this_user_is_refused(tmp_path, stand_in):
    identity = driver_identity(tmp_path / "q")
    target = tmp_path / "elsewhere"
    target.mkdir()
    identity.scratch.symlink_to(target)
    try:
        with pytest.raises(DsflowError) as err:
            stand_in(identity)
        assert err.value.code == "DSF-E276" and str(identity.scratch) in err.value.message
        assert target.is_dir() and process.holder(identity) is None
    finally:
        identity.scratch.unlink()


def test_a_process_that_ends_by_itself_removes_its_own_scratch_folder(tmp_path):
    """The supervisor exits once nothing is deployed: nobody stops it, so it removes its scratch folder itself."""
    identity = process.Identity(tmp_path / "run", "supervisor")
    (tmp_path / "ender.py").write_text("import os, pathlib\nfrom dsflow.adapters import process\n"
                                       "pathlib.Path(os.environ['TMPDIR'], 'left').write_text('x')\n"
                                       "process.remove_own_scratch()\n")
    child = process.spawn("ender", [], tmp_path / "ender.log", identity,
                          {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})
    assert child.wait(60) == 0, (tmp_path / "ender.log").read_text()
    assert identity.scratch is not None and not identity.scratch.exists()
