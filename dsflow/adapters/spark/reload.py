"""Restarting a query in its running driver: the JVM and SparkSession stay, only the streaming query is new.

A planned restart (a change in place, a replacement on a new checkpoint) used to stop the driver process and
start a cold one: a JVM, a SparkSession and Spark's Python daemons, ~10-15 s and ~9 s of CPU before the first
batch. Now apply asks the running driver first, in two steps, through two files in the query's run folder and a
SIGUSR1 that wakes the driver:

1. **park**: the driver stops its query between two micro-batches (driver.stop_between_batches, the same planned
   stop as before), answers, and waits for the next spec. Apply then
   has what a cold stop gave it: a stopped query whose last commit is where its sink stopped.
2. **resume**: apply writes the new spec (spec.json, as for a cold start) and asks the parked driver to run it. The
   driver runs it in a new session of its SparkContext (temporary views and SQL conf of its own, as a shared
   application's queries have) and answers `ok`; it stays the query's driver, with its identity (PID, start time,
   lock). It refuses a spec it cannot run as it is (another master or Spark conf, secrets it was not started with,
   dsflow code changed on disk since it started, an unreadable spec) and exits; apply then starts a cold driver.

A driver that does not answer (an old dsflow, a query that failed meanwhile, a driver busy past the timeout) is
stopped and a cold one started, as before. A parked driver that is not resumed within PARK_SECONDS exits (an
interrupted apply leaves a stopped query, which the next plan restarts, as a stop did).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

REQUEST_FILE = "control.json"
REPLY_FILE = "control.reply.json"
PARK_SECONDS = 60.0
"""How long a parked driver waits for the spec to resume with before it exits."""
RESUME_TIMEOUT_SECONDS = 10.0


def code_fingerprint() -> str:
    """The dsflow code on disk (each module's path, size and modification time): a driver started before dsflow was
    upgraded or edited runs the code it loaded then, so it takes no spec from a newer one."""
    import dsflow

    package = Path(dsflow.__file__).resolve().parent
    entries = sorted((str(path.relative_to(package)), path.stat().st_size, path.stat().st_mtime_ns)
                     for path in package.rglob("*.py"))
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def secrets_digest(secrets: dict[str, str]) -> str:
    """What a driver compares with its own environment to know it holds the spec's secrets, without them on disk."""
    return hashlib.sha256(json.dumps(sorted(secrets.items())).encode()).hexdigest()


# The apply side


def park(run_dir: Path, pid: int | None, alive, timeout: float) -> dict[str, Any] | None:
    """Ask the driver `pid` of run_dir to stop its query and wait; its reply ({"parked": True,
    "stopped_between_batches": bool}) or None when it did not park (not running, too old, busy past `timeout`).
    `alive()` tells whether the driver process still runs. Once parked, the checkpoint's last commit is final."""
    if pid is None or not alive():
        return None
    reply = _ask(run_dir, pid, {"op": "park"}, alive, timeout)
    return reply if reply is not None and reply.get("parked") else None


def resume(run_dir: Path, pid: int, spec_path: Path, secrets: dict[str, str], alive,
           timeout: float = RESUME_TIMEOUT_SECONDS) -> str | None:
    """Ask the parked driver to run the spec at spec_path; None when it does, else why not (it then exits)."""
    request = {"op": "resume", "spec": str(spec_path), "secret_names": sorted(secrets),
               "secrets_digest": secrets_digest(secrets), "code": code_fingerprint()}
    reply = _ask(run_dir, pid, request, alive, timeout)
    if reply is None:
        return "it did not answer"
    return None if reply.get("ok") else str(reply.get("reason") or "it refused")


def _ask(run_dir: Path, pid: int, request: dict[str, Any], alive, timeout: float) -> dict[str, Any] | None:
    """Write the request, wake the driver, wait for its reply. A request left unanswered is taken back: the next
    driver of this run folder (a cold one, started next) must not find it and park itself."""
    request = {**request, "id": uuid.uuid4().hex}
    reply_path = run_dir / REPLY_FILE
    reply_path.unlink(missing_ok=True)
    _write_json(run_dir / REQUEST_FILE, request)
    try:
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            return None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = _read_json(reply_path)
            if reply is not None and reply.get("id") == request["id"]:
                return reply
            if not alive():
                return None
            time.sleep(0.05)
        return None
    finally:
        forget(run_dir)


def forget(run_dir: Path) -> None:
    """Remove a request no driver answered (a driver starting in run_dir removes any it finds: none is for it)."""
    (run_dir / REQUEST_FILE).unlink(missing_ok=True)


# The driver side


def pending(run_dir: Path, op: str) -> dict[str, Any] | None:
    """The request of kind `op` waiting in run_dir, if any."""
    request = _read_json(run_dir / REQUEST_FILE)
    return request if request is not None and request.get("op") == op and request.get("id") else None


def answer(run_dir: Path, request: dict[str, Any], **reply: Any) -> None:
    (run_dir / REQUEST_FILE).unlink(missing_ok=True)
    _write_json(run_dir / REPLY_FILE, {"id": request["id"], **reply})


def holds_secrets(request: dict[str, Any]) -> bool:
    """Whether this process's environment holds the secrets the request's spec names, with the same values."""
    names = request.get("secret_names") or []
    mine = {name: os.environ.get(name, "") for name in names}
    return secrets_digest(mine) == request.get("secrets_digest")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(data))
    os.replace(partial, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
