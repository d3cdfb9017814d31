"""The supervisor's warm standby driver (`runtime.standby: true`; the process: the engine's `standbys`,
adapters/spark/standby.py for Spark).

While the setting is on and the state records at least one query in `query` isolation on a local master, the
supervisor keeps one standby per environment under `<run>/standby/sb-<id>/`, started with the master and Spark
conf most of those queries' recorded specs have. When such a query's driver is dead and its backoff has passed,
the restart (under the state lock, supervisor._restart_locked) hands the standby the query's spec instead of
starting a cold driver; the standby's PID is recorded in the state as any restart's. A spec the standby cannot
run as it is (another master or Spark conf, unreadable) and a restart while no standby is ready start cold, as
before. A standby (the first, or the next after a handoff) starts only while no query in its own driver is before
its first progress (for at most SETTLE_SECONDS), so its JVM start does not compete with a query's start or with
the first batch of the query the last standby became. A standby that dies before it is ready is started again
after the supervisor's backoff (records.backoff), never in a hot loop.

A cluster master (`spark://`, `k8s://`) gets no standby (DSF-E259): it would hold the cluster's cores while it
waits. The keeper's own record, `<run>/standby/keeper.json` (why none runs, failures, last error, handoffs), is
what `dsflow runtime status` shows beside the waiting standby.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from dsflow.adapters import process
from dsflow.core.address import Address, Kind
from dsflow.core.engines import StandbyDriver, engine
from dsflow.core.state import State
from dsflow.runtime.records import backoff

RECORD_FILE = "keeper.json"
SETTLE_SECONDS = 60.0
"""The longest a standby's start waits for the queries in their own drivers to make their first progress."""
KEPT_CHILDREN = 200


def isolated_specs(state: State) -> list[Path]:
    """The spec files of the deployed queries that run in their own driver (`query` isolation); not a paused one
    (nothing restarts it: no standby is kept for it)."""
    found = []
    for key, deployed in sorted(state.resources.items()):
        outputs = deployed.outputs
        if Address.parse(key).kind is Kind.QUERY and outputs.get("run_dir") and not outputs.get("app_dir") \
                and not outputs.get("paused"):
            found.append(Path(outputs["run_dir"]) / "spec.json")
    return found


def wanted_session(specs: list[Path]) -> tuple[str, dict[str, str]] | None:
    """The local master and Spark conf most of the specs have (the first in address order among equals), or None
    when no readable spec runs on a local master."""
    seen: list[str] = []
    for path in specs:
        try:
            spec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        master = spec.get("master") or "" if isinstance(spec, dict) else ""
        if master.startswith("local"):
            seen.append(json.dumps([master, spec.get("spark_conf") or {}], sort_keys=True))
    if not seen:
        return None
    counts = Counter(seen)
    best = max(seen, key=lambda key: (counts[key], -seen.index(key)))
    master, conf = json.loads(best)
    return master, conf


class Keeper:
    """One environment's standby, kept by its supervisor (`tick` at every look, `take` at a driver's restart)."""

    def __init__(self, root: Path, enabled: bool, log=print):
        self.root = root
        self.enabled = enabled
        self.log = log
        self.current: StandbyDriver | None = None
        self.failures = 0
        self.next_start = 0.0
        self.settle_by: float | None = None
        """Since a query in its own driver was seen before its first progress: when a standby starts anyway."""
        self.kept: list[Any] = []
        """Popen objects of adopted standbys: kept, so only the supervisor's own waitpid reaps them (their exit
        code is the driver's, supervisor._reap)."""
        self._wanted: tuple[int, str, tuple[str, dict[str, str]] | None, str | None] | None = None
        self.record: dict[str, Any] = {"enabled": enabled, "note": None, "failures": 0, "last_error": None,
                                       "next_start": None, "handoffs": 0, "last_handoff": None}
        if root.is_dir():
            engine().standbys.sweep(root)

    def info(self) -> dict[str, Any]:
        """What `dsflow runtime status` shows of the standby (control.standby_info), from the keeper itself."""
        return {"enabled": self.enabled, "standby": engine().standbys.describe(self.root),
                "standby_keeper": self.record}

    def tick(self, state: State) -> None:
        """Start, replace or stop the standby as the state and the setting want."""
        wanted = self.wanted(state)
        self._note(self._wanted[3] if self._wanted else None)
        current = self.current
        if current is not None and not current.alive():
            self._died(current)
        elif current is not None and (wanted is None or (current.master, current.spark_conf) != wanted):
            self.stop("no longer wanted" if wanted is None else "the queries' Spark master or conf changed")
        elif current is not None and self.failures and current.ready():
            self.failures = 0
            self._save(failures=0)
        if self.current is None and wanted is not None and time.time() >= self.next_start and self._settled(state):
            self.start(*wanted)

    def wanted(self, state: State) -> tuple[str, dict[str, str]] | None:
        if not self.enabled:
            self._wanted = None
            return None
        key = (state.serial, state.lineage)
        if self._wanted is None or self._wanted[:2] != key:
            specs = isolated_specs(state)
            session = wanted_session(specs)
            note = None if session else "no query runs in its own driver" if not specs else (
                "DSF-E259: no query in its own driver runs on a local Spark master (a standby on a cluster would "
                "hold the cluster's cores while it waits)")
            self._wanted = (*key, session, note)
        return self._wanted[2]

    def start(self, master: str, conf: dict[str, str]) -> None:
        folder = self.root / f"sb-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
        engine().standbys.sweep(self.root)
        self.current = engine().standbys.start(folder, master, conf)
        self.log(f"standby driver starting (pid {self.current.pid}, {master}) in {folder}")
        self._save(next_start=None)

    def take(self, spec_path: Path, env: dict[str, str], log_path: Path) -> tuple[int | None, str]:
        """Hand the spec to the ready standby: its PID and how the query was started ('standby ...'), or None
        and why it starts cold."""
        current = self.current
        if current is None or not current.ready():
            return None, "cold start (no standby ready)" if self.enabled else "cold start"
        try:
            spec = json.loads(spec_path.read_text())
            reason = engine().standbys.misfit(current.master, current.spark_conf, spec.get("master") or "",
                                         spec.get("spark_conf") or {})
        except (OSError, ValueError, AttributeError) as err:
            reason = f"its spec cannot be read: {err}"
        if reason is not None:
            return None, f"cold start ({reason})"
        ready_for = time.time() - float(engine().standbys.read_status(current.folder).get("ready_at") or time.time())
        answer = current.hand_over(spec_path, env, log_path)
        if answer.get("ok") and answer.get("pid") == current.pid:
            current.release()
            self.kept = [*self.kept[-KEPT_CHILDREN:], current.popen]
            self.current = None
            note = f"standby (pid {current.pid}, ready for {ready_for:.0f} s)"
            self._save(handoffs=self.record["handoffs"] + 1,
                       last_handoff={"pid": current.pid, "spec": str(spec_path), "at": time.time()})
            return current.pid, note
        if not answer.get("answered"):
            current.stop(timeout=0)  # it may have begun to run the query: never two drivers on one checkpoint
            self.current = None
        return None, f"cold start (DSF-E258: the standby did not take it: {answer.get('reason')})"

    def stop(self, why: str = "stopping") -> None:
        current, self.current = self.current, None
        if current is not None:
            current.stop()
            self.log(f"standby driver stopped (pid {current.pid}): {why}")
            self._save()

    def _died(self, current: StandbyDriver) -> None:
        self.current = None
        current.release()
        self.failures += 1
        self.next_start = time.time() + backoff(self.failures)
        error = engine().standbys.read_status(current.folder).get("error")
        message = (f"DSF-E257: the standby driver (pid {current.pid}) ended with exit code "
                   f"{current.popen.returncode} before a query was handed to it{': ' + error if error else ''}")
        self.log(f"{message}; another in {backoff(self.failures):.0f} s")
        self._save(failures=self.failures, last_error=message, next_start=self.next_start)

    def _note(self, note: str | None) -> None:
        if note != self.record["note"] or self.enabled != self.record["enabled"]:
            self._save(note=note, enabled=self.enabled)

    def _save(self, **changes: Any) -> None:
        """The keeper's record, for `dsflow runtime status` (atomically: read at any moment)."""
        self.record.update(changes, updated_at=time.time())
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{RECORD_FILE}.tmp"
        tmp.write_text(json.dumps(self.record, indent=2))
        tmp.replace(self.root / RECORD_FILE)

    def _settled(self, state: State) -> bool:
        """No query in its own driver is starting or before its first progress (or SETTLE_SECONDS passed since one
        was seen so)."""
        if not any(_before_first_progress(path.parent / "status.json") for path in isolated_specs(state)):
            self.settle_by = None
            return True
        self.settle_by = self.settle_by or time.time() + SETTLE_SECONDS
        return time.time() >= self.settle_by


def _before_first_progress(status_path: Path) -> bool:
    """The driver is starting, or running without a progress yet (a dead one, or no status file: not waited for)."""
    try:
        status = json.loads(status_path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(status, dict) or not (status.get("state") == "starting" or
                                            (status.get("state") == "running" and status.get("batch_id") is None)):
        return False
    return process.is_running(status.get("pid"), engine().driver_identity(status_path.parent))
