"""The supervisor's look at a query of a shared Spark application (`runtime.isolation: shared`).

Several queries share the host's PID; the state records which application (`app`, `app_dir`) hosts each. Two
ways a shared query stops running, two restarts, both recorded in its runtime.json like a driver's:
- the query failed inside a live host (host.json says so for its current generation): after the backoff the
  supervisor raises its generation in queries.json and the host starts that query alone again from its checkpoint;
  its PID (the host's) is unchanged and the other queries are not touched;
- the host is gone (killed, out of memory): after the backoff the supervisor starts the host again, which starts
  every query queries.json lists from its checkpoint, and records the new PID of each query.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dsflow.adapters import process
from dsflow.core.engines import engine
from dsflow.core.state import DeployedResource
from dsflow.runtime.records import STABLE_SECONDS, RuntimeRecord, backoff, last_error, write_record


def watch(supervisor: Any, deployed: DeployedResource, run_dir: Path, record: RuntimeRecord) -> None:
    """One look at one shared query: running, failed in its host, or its host gone."""
    app_dir, name = Path(deployed.outputs["app_dir"]), deployed.outputs["app_query"]
    apps = engine().shared
    pid, identity = deployed.outputs.get("pid"), apps.host_identity(deployed.outputs["app_dir"])
    code = supervisor._reap(pid)
    alive = process.is_running(pid, identity)
    error = apps.failure(app_dir, name) if alive else None
    if alive and error is None:
        assert pid is not None  # is_running: a PID
        _running(run_dir, record, pid, apps.reported(app_dir).get(name) or {})
    elif record.next_retry is None or record.pid != pid:
        _failed(run_dir, record, pid, app_dir, error, code)
        supervisor.emit(record.address, "crash", pid=pid, exit=record.last_exit, error=record.last_error,
                        failures=record.failures, restart_in_seconds=backoff(record.failures))
    elif time.time() >= record.next_retry and not alive:
        supervisor._restart(run_dir, record, deployed, identity)
    elif time.time() >= record.next_retry and _restart_in_host(run_dir, record, app_dir, name, deployed.address):
        supervisor.emit(deployed.address, "restart", pid=pid, restarts=record.restarts,
                        how=f"in its shared application {app_dir.name}")


def _running(run_dir: Path, record: RuntimeRecord, pid: int, seen: dict[str, Any]) -> None:
    """As a driver's, but a crash loop ends when the query (not its host) has run STABLE_SECONDS."""
    changed = record.pid != pid or record.next_retry is not None
    record.pid, record.next_retry = pid, None
    running = seen.get("state") == "running" and seen.get("started_at") is not None
    if record.failures and running and time.time() - float(seen["started_at"]) >= STABLE_SECONDS:
        record.failures, changed = 0, True
    if changed or not (run_dir / "runtime.json").exists():
        record.updated_at = time.time()
        write_record(run_dir, record)


def _failed(run_dir: Path, record: RuntimeRecord, pid: int | None, app_dir: Path, error: str | None,
            code: int | None) -> None:
    now = time.time()
    record.pid, record.failures, record.died_at = pid, record.failures + 1, now
    if error is not None:
        record.last_exit = f"failed in the shared application {app_dir.name} (its other queries go on)"
        record.last_error = last_error(run_dir, "driver.log") or error
    else:
        how = f"killed by signal {-code}" if code is not None and code < 0 else "gone"
        record.last_exit = f"its shared application {app_dir.name} (pid {pid}) is {how}"
        record.last_error = None
    record.next_retry, record.updated_at = now + backoff(record.failures), now
    write_record(run_dir, record)
    _log(f"{record.address}: {record.last_exit}; restart in {backoff(record.failures):.0f} s "
         f"(failure {record.failures} in a row)")


def _restart_in_host(run_dir: Path, record: RuntimeRecord, app_dir: Path, name: str, address: str) -> bool:
    if not engine().shared.restart(app_dir, name):
        return False  # apply removed it meanwhile
    record.restarts, record.next_retry, record.updated_at = record.restarts + 1, None, time.time()
    write_record(run_dir, record)
    _log(f"{address} restarted in its shared application {app_dir.name} (restart {record.restarts})")
    return True


def relaunch(deployed: DeployedResource) -> int:
    """The supervisor's start of a dead host: the host's PID (one already started for another of its queries is
    reused)."""
    return engine().shared.ensure_host(Path(deployed.outputs["app_dir"]))


def _log(message: str) -> None:
    """A line of the supervisor's log (it runs in the supervisor's process)."""
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())}Z {message}", flush=True)
