"""What the supervisor records of each supervised resource, beside its run files (`runtime.json`).

The record is the supervisor's own file: apply and destroy never write it, status only reads it. It is about one
deployed version of a resource: a new version (apply replaced or updated it) starts a fresh record.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ConfigDict

RECORD_FILE = "runtime.json"
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 60.0
STABLE_SECONDS = 60.0
"""A process up this long after a restart ends a crash loop: the next failure waits BACKOFF_BASE_SECONDS again."""
CRASH_LOOP_FAILURES = 3
"""Failures in a row (none of them up STABLE_SECONDS) from which status calls the resource a crash loop."""


class RuntimeRecord(BaseModel):
    """The supervisor's record of one deployed resource version."""

    model_config = ConfigDict(extra="forbid")

    address: str
    version: str = ""
    """The deployed version the record is about (a query's data hash; empty for generators)."""
    pid: int | None = None
    """The process the supervisor last saw or started for it."""
    restarts: int = 0
    """Restarts by the supervisor of this version."""
    failures: int = 0
    """Deaths in a row without a stable run between them; drives the backoff."""
    last_exit: str | None = None
    """How the last process ended: 'exit code 1', 'killed by signal 9', or 'gone' (not the supervisor's child)."""
    last_error: str | None = None
    """The driver's recorded error, or the last line of its log."""
    died_at: float | None = None
    last_restart: str | None = None
    """How the supervisor last started it again: 'standby (pid N, ready for S s)' when a warm standby driver became
    it, 'cold start (why)' otherwise (a query in its own driver; None for others)."""
    next_retry: float | None = None
    """When the supervisor restarts it (epoch seconds); None while it runs."""
    gaps_seen: int = 0
    """Lines of the query's gaps.jsonl already logged as 'gap' events (runtime/observed.py)."""
    dead_letters_seen: int | None = None
    """Records of its dead-letter topic at the last look (None: not looked yet)."""
    dead_letters_looked: float | None = None
    """When the supervisor last counted its dead letters (epoch seconds)."""
    failed_seen: dict[str, int] = Field(default_factory=dict)
    """Per expectation rule, the rows its driver had counted failed at the last look (runtime/observed.py)."""
    updated_at: float = 0.0


def backoff(failures: int, base: float = BACKOFF_BASE_SECONDS, cap: float = BACKOFF_CAP_SECONDS) -> float:
    """Seconds to wait before the restart that follows `failures` deaths in a row: 1, 2, 4, ... capped."""
    return min(cap, base * (2 ** max(0, failures - 1)))


def record_path(run_dir: Path) -> Path:
    return run_dir / RECORD_FILE


def read_record(run_dir: Path) -> RuntimeRecord | None:
    try:
        return RuntimeRecord.model_validate_json(record_path(run_dir).read_text())
    except (OSError, ValueError):
        return None


def write_record(run_dir: Path, record: RuntimeRecord) -> None:
    """Atomically: status may read it at any moment."""
    run_dir.mkdir(parents=True, exist_ok=True)
    target = record_path(run_dir)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(record.model_dump_json(indent=2))
    os.replace(tmp, target)


def status_fields(run_dir: Path | None, pid: int | None, running: bool, version: str = "") -> dict[str, Any]:
    """What `dsflow status --json` adds per query or generator: uptime, restarts, last exit and error, how the last
    restart started it (from the standby or cold), next retry,
    and as its state 'restarting' while the supervisor waits to restart it, or 'crash_loop' after
    CRASH_LOOP_FAILURES deaths in a row (until a run stays up STABLE_SECONDS)."""
    record = read_record(run_dir) if run_dir is not None else None
    if record is not None and record.version != version:
        record = None  # about an earlier version
    fields: dict[str, Any] = {"uptime_seconds": uptime(pid) if running else None,
                              "restarts": record.restarts if record else 0,
                              "last_exit": record.last_exit if record else None,
                              "last_error": record.last_error if record else None,
                              "last_restart": record.last_restart if record else None,
                              "next_retry": _iso(record.next_retry) if record and not running else None}
    if record is not None and record.failures >= CRASH_LOOP_FAILURES:
        fields["runtime_state"] = "crash_loop"  # also while the next attempt starts: until it stays up
    elif record is not None and not running and record.next_retry is not None:
        fields["runtime_state"] = "restarting"
    return fields


def uptime(pid: int | None) -> float | None:
    import psutil

    try:
        return round(time.time() - psutil.Process(pid).create_time(), 1)
    except (psutil.Error, TypeError, ValueError):
        return None


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    from datetime import datetime, timezone

    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def recorded_state(run_dir: Path) -> str | None:
    """The state the driver last wrote to its status file ('running', 'failed', ...), or None."""
    try:
        return json.loads((run_dir / "status.json").read_text()).get("state")
    except (OSError, ValueError, AttributeError):
        return None


PY4J_GENERIC = "An error occurred while calling"
EXCEPTION_LINE = re.compile(r"^(DSF-E\d+|[\w$.]*(Error|Exception)\b)")


def last_error(run_dir: Path, log_name: str) -> str | None:
    """The driver's failure as its status file records it (with the JVM exception from the log when that is only
    Py4J's 'An error occurred while calling ...'), else the last exception line of the log."""
    recorded = None
    try:
        status = json.loads((run_dir / "status.json").read_text())
        if status.get("state") == "failed" and status.get("error"):
            recorded = str(status["error"])[:2000]
    except (OSError, ValueError, AttributeError):
        pass
    if recorded and not recorded.startswith(PY4J_GENERIC):
        return recorded
    found = _exception_line(run_dir / log_name)
    if recorded:
        return f"{recorded} {found}"[:2000] if found else recorded
    return found


def _exception_line(log_path: Path) -> str | None:
    try:
        with open(log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 65536))
            lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    found = next((line for line in reversed(lines) if EXCEPTION_LINE.match(line)), None)
    return (found or (lines[-1] if lines else ""))[:2000] or None
