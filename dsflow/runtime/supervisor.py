"""The supervisor loop: `python -m dsflow.runtime.supervisor --project-dir DIR [--env ENV]`, started detached by
`dsflow runtime up` (or by apply), or become by `dsflow runtime up --foreground` (a systemd unit, a container).

Every tick, and at once when apply or destroy asks over its endpoint (runtime/endpoint.py), it reads the state
and, for each deployed query and generator, checks that the process the state records is alive. A dead one is
restarted from its checkpoint after a backoff (records.backoff), and the new PID is written to the state under the
state lock, so apply and destroy stop the process that really runs. It leaves
alone what apply or destroy is changing: nothing is restarted while the state lock is held by anyone else or the
state records a pending change, and a resource that left the state (destroyed) or whose PID changed under it
(replaced) is not restarted. Drivers still alive when it starts are adopted (it only starts what is dead).
With `runtime.standby: true` it also keeps a warm standby driver, handed the next dead query-isolation query
instead of a cold start (runtime/standby.py).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from dsflow.engine import operations
from dsflow.adapters import process
from dsflow.core.address import Address, Kind
from dsflow.core.engines import engine
from dsflow.core.forcing import is_paused
from dsflow.core.state import DeployedResource, State
from dsflow.errors import DsflowError
from dsflow.engine.executors import datagen_identity, launch_datagen, relaunch_driver
from dsflow.engine import eventlog
from dsflow.runtime import endpoint, observed, shared
from dsflow.runtime.locking import RESTART_OPERATION
from dsflow.runtime.standby import Keeper
from dsflow.runtime.records import (STABLE_SECONDS, RuntimeRecord, backoff, last_error, read_record, recorded_state,
                                    uptime, write_record)

MODULE = "dsflow.runtime.supervisor"
INFO_FILE = "supervisor.json"
LOG_FILE = "supervisor.log"
VARS_ENV = "DSFLOW_RUNTIME_VARS"
"""The `--var` values of the command that started the supervisor, as JSON (kept off its command line)."""
TICK_ENV = "DSFLOW_RUNTIME_TICK"


def supervised(state: State) -> list[DeployedResource]:
    """The deployed queries and generators, in address order; not a query `dsflow pause` stopped (it is left alone
    until `dsflow resume`)."""
    return [r for key, r in sorted(state.resources.items())
            if Address.parse(key).kind in (Kind.QUERY, Kind.DATAGEN) and not is_paused(r)]


def describe_exit(code: int | None, recorded: str | None) -> str:
    """How a process ended: its exit code or signal when this supervisor started it, else what its status file
    says (a driver that vanished while 'running' was killed: SIGKILL, out of memory, a reboot)."""
    if code is not None:
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    if recorded == "failed":
        return "failed (exit status unknown: not started by this supervisor)"
    return "gone without recording a failure (killed: SIGKILL, out of memory, ...)"


class Supervisor:
    """Keeps one environment's deployed queries and generators running."""

    def __init__(self, options: operations.Options, auto: bool = False):
        self.options = options
        self.loaded = operations.load(options)
        self.workspace = self.loaded.workspace
        self.backend = self.workspace.state_backend()
        self.auto = auto
        self.exits: dict[int, int | None] = {}
        """Processes this supervisor started, with their exit code once reaped."""
        self.standby = Keeper(self.workspace.run_dir / "standby", self.loaded.project.runtime.standby, log)
        self.seen_serial: tuple[str, int] | None = None
        self.start_note: str | None = None
        """How the last restart started its process (a query in its own driver: from the standby, or cold)."""

    def tick(self) -> bool:
        """One look at every supervised resource; False when there is nothing left to do (auto mode, destroyed)."""
        state = self.backend.read()
        targets = supervised(state)
        if self.auto and state.lineage and not targets:
            log("nothing deployed any more (or every query paused); exiting")
            return False
        self._keep_standby(state)
        if state.pending is not None or self.backend.lock_holder() is not None:
            return True  # apply or destroy is at work: what it stops or replaces is its business
        for deployed in targets:
            self.watch(deployed)
        return True

    def _keep_standby(self, state: State) -> None:
        """The standby as the setting (read again after each apply: a new state serial) and the state want it."""
        if self.seen_serial != (state.lineage, state.serial):
            self.seen_serial = (state.lineage, state.serial)
            try:
                self.standby.enabled = operations.load(self.options).project.runtime.standby
            except Exception:  # noqa: BLE001 - a project being edited: the setting as last read
                pass
        try:
            self.standby.tick(state)
        except Exception as err:  # noqa: BLE001 - the standby is an optimisation: watching queries goes on
            log(f"standby: {err}")

    def run_dir(self, deployed: DeployedResource) -> Path:
        address = Address.parse(deployed.address)
        if address.kind is Kind.QUERY:
            return Path(deployed.outputs.get("run_dir") or self.workspace.query_dir(address.name))
        return self.workspace.datagen_dir(address.name)

    def watch(self, deployed: DeployedResource) -> None:
        is_query = Address.parse(deployed.address).kind is Kind.QUERY
        run_dir = self.run_dir(deployed)
        identity = engine().driver_identity(deployed.outputs.get("run_dir")) if is_query else datagen_identity(run_dir)
        pid = deployed.outputs.get("pid")
        version = str(deployed.outputs.get("version", "")) if is_query else ""
        record = read_record(run_dir)
        if record is None or record.version != version or record.address != deployed.address:
            earlier = record if record is not None and record.address == deployed.address else None
            record = RuntimeRecord(address=deployed.address, version=version, pid=pid)
            if earlier is not None:  # what was seen of the same logs stays seen
                record.gaps_seen, record.dead_letters_seen = earlier.gaps_seen, earlier.dead_letters_seen
        if is_query and deployed.outputs.get("app_dir"):
            return shared.watch(self, deployed, run_dir, record)  # several queries share its host's PID
        code = self._reap(pid)
        if process.is_running(pid, identity):
            assert pid is not None  # is_running: a PID
            self._running(run_dir, record, pid)
            if is_query:
                self._observe(run_dir, record, deployed.address)
        elif not is_query and self._finished(deployed):
            return
        elif record.next_retry is None or record.pid != pid:
            self._died(run_dir, record, pid, code, "driver.log" if is_query else "datagen.log")
        elif time.time() >= record.next_retry:
            self._restart(run_dir, record, deployed, identity)

    def _running(self, run_dir: Path, record: RuntimeRecord, pid: int) -> None:
        changed = record.pid != pid or record.next_retry is not None
        record.pid, record.next_retry = pid, None
        up = uptime(pid)
        started = not (run_dir / "spec.json").exists() or recorded_state(run_dir) == "running"  # a driver: started
        if record.failures and started and up is not None and up >= STABLE_SECONDS:
            record.failures, changed = 0, True
        if changed or not (run_dir / "runtime.json").exists():
            record.updated_at = time.time()
            write_record(run_dir, record)

    def _observe(self, run_dir: Path, record: RuntimeRecord, address: str) -> None:
        """Counted gaps, dead-letter bursts and rows failing expectations of a running query, as events."""
        def emit(kind, **detail) -> None:
            self.emit(address, kind, **detail)

        try:
            changed = observed.new_gaps(run_dir, record, emit)
            changed = observed.dead_letter_burst(record, lambda: operations.dead_letters(
                self.loaded.project, Address.parse(address).name), emit) or changed
            changed = observed.failed_rows(run_dir, record, emit) or changed
        except Exception as err:  # noqa: BLE001 - watching the process goes on
            log(f"{address}: {err}")
            return
        if changed:
            write_record(run_dir, record)

    def emit(self, address: str, kind, **detail) -> None:
        eventlog.emit(self.backend, self.loaded.project.environment, address, kind, eventlog.SUPERVISOR, **detail)

    def _died(self, run_dir: Path, record: RuntimeRecord, pid: int | None, code: int | None, log_name: str) -> None:
        now = time.time()
        record.pid, record.failures, record.died_at = pid, record.failures + 1, now
        recorded = recorded_state(run_dir)
        record.last_exit = describe_exit(code, recorded)
        record.last_error = last_error(run_dir, log_name) if (code or 0) > 0 or recorded == "failed" else None
        record.next_retry = now + backoff(record.failures)
        record.updated_at = now
        write_record(run_dir, record)
        log(f"{record.address} (pid {pid}) is not running: {record.last_exit}; "
            f"restart in {backoff(record.failures):.0f} s (failure {record.failures} in a row)")
        self.emit(record.address, "crash", pid=pid, exit=record.last_exit, error=record.last_error,
                  failures=record.failures, restart_in_seconds=backoff(record.failures))

    def _restart(self, run_dir: Path, record: RuntimeRecord, deployed: DeployedResource,
                 identity: process.Identity) -> None:
        try:
            pid = self._restart_locked(deployed, identity)
        except Exception as err:  # noqa: BLE001 - recorded and retried with the next backoff
            record.failures += 1
            record.last_error = f"restart failed: {err}"[:2000]
            record.next_retry = time.time() + backoff(record.failures)
            write_record(run_dir, record)
            log(f"{deployed.address}: {record.last_error}")
            self.emit(deployed.address, "restart_failed", error=record.last_error, failures=record.failures)
            return
        if pid is None:
            return  # the state changed under us, or someone holds the lock: looked at again next tick
        record.pid, record.restarts, record.next_retry, record.updated_at = pid, record.restarts + 1, None, time.time()
        record.last_restart = self.start_note
        write_record(run_dir, record)
        log(f"{deployed.address} restarted as pid {pid} (restart {record.restarts}"
            f"{'; ' + self.start_note if self.start_note else ''})")
        self.emit(deployed.address, "restart", pid=pid, restarts=record.restarts, how=self.start_note)

    def _restart_locked(self, deployed: DeployedResource, identity: process.Identity) -> int | None:
        """Start the process again and record its PID in the state, under the state lock; None if the state no
        longer wants this very process restarted (destroyed, replaced, mid-change) or the lock is taken."""
        try:
            with self.backend.lock(RESTART_OPERATION):
                state = self.backend.read()
                current = state.resources.get(deployed.address)
                if (state.pending is not None or current is None
                        or current.outputs.get("pid") != deployed.outputs.get("pid")):
                    return None
                pid = self._launch(current)
                self.exits[pid] = None
                updated = current.model_copy(update={"outputs": {**current.outputs, "pid": pid}})
                try:
                    self.backend.write(state.with_resource(updated), expected_serial=state.serial)
                except Exception:
                    process.stop(pid, identity, timeout=5)
                    raise
                return pid
        except DsflowError as err:
            if err.code == "DSF-E802":
                return None
            raise

    def _launch(self, deployed: DeployedResource) -> int:
        address = Address.parse(deployed.address)
        self.start_note = None
        try:
            project = operations.load(self.options).project  # the secrets the process needs, as they are now
        except Exception:  # noqa: BLE001 - a project being edited: the recorded spec still runs
            project = self.loaded.project
        if address.kind is Kind.QUERY and deployed.outputs.get("app_dir"):
            return shared.relaunch(deployed)
        if address.kind is Kind.QUERY:
            return relaunch_driver(project, deployed, self._handoff)
        return launch_datagen(project, self.workspace, address.name)

    def _handoff(self, spec_path: Path, env: dict[str, str], log_path: Path) -> tuple[int | None, str]:
        """The standby offered the dead driver's spec: its PID, or None to start cold; noted for the record."""
        pid, self.start_note = self.standby.take(spec_path, env, log_path)
        return pid, self.start_note

    def _finished(self, deployed: DeployedResource) -> bool:
        """A generator with a count that wrote all of it is done, not dead."""
        from dsflow.datagen import read_progress

        count = deployed.data.get("count")
        run_dir = self.workspace.datagen_dir(Address.parse(deployed.address).name)
        return count is not None and read_progress(str(run_dir / "progress.json")) >= int(count)

    def _reap(self, pid: int | None) -> int | None:
        """The exit code of a process this supervisor started, once it ended (None if unknown)."""
        if pid is None or pid not in self.exits:
            return None
        if self.exits[pid] is None:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done == pid:
                    self.exits[pid] = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                pass
        return self.exits[pid]


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    print(f"{stamp}Z {message}", flush=True)


def write_info(path: Path, info: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2))
    os.replace(tmp, path)


def supervisor_identity(run_dir: Path, project_dir: Path) -> process.Identity:
    """The supervisor's identity (adapters/process.py), in the environment's run folder: one per environment."""
    return process.Identity(run_dir, "supervisor", (MODULE, str(project_dir.resolve())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=MODULE)
    parser.add_argument("--project-dir", required=True)
    parser.add_argument("--env", default=None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--auto", action="store_true", help="exit once nothing is deployed (started by apply)")
    args = parser.parse_args(argv)
    options = operations.Options(Path(args.project_dir), args.env, json.loads(os.environ.get(VARS_ENV) or "{}"))
    supervisor = Supervisor(options, auto=args.auto)
    stop, looks = threading.Event(), endpoint.Looks()

    def stopping(*_) -> None:
        stop.set()
        looks.wake()
    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    from dsflow.runtime.metrics import registry

    run_dir = supervisor.workspace.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        # `runtime up` spawned it as this identity already; `runtime up --foreground` exec'd it: it claims it
        process.claim(supervisor_identity(run_dir, Path(args.project_dir)), MODULE)
    except DsflowError as err:
        log(f"{err.code}: {err.message}")
        return 1
    info_path = run_dir / INFO_FILE
    info: dict = {"pid": os.getpid(), "port": 0, "started_at": time.time(), "ticks": 0,
            "project_dir": str(Path(args.project_dir).resolve()), "environment": supervisor.loaded.project.environment}
    token = endpoint.write_token(run_dir)
    metrics = registry(lambda: operations.status(supervisor.loaded, with_dead_letters=False),
                       standby=supervisor.standby.info)
    server, info["port"] = endpoint.serve(metrics, token, looks, lambda: _own_record(info, looks), args.port)
    write_info(info_path, info)
    log(f"supervisor started (pid {os.getpid()}), metrics on http://127.0.0.1:{info['port']}/metrics")
    tick = float(os.environ.get(TICK_ENV) or 1.0)
    try:
        while not stop.is_set() and Path(args.project_dir).is_dir():
            looks.begin()
            try:
                going_on = supervisor.tick()
            except Exception as err:  # noqa: BLE001 - a state briefly unreadable is no reason to stop watching
                log(f"tick failed: {err}")
                going_on = True
            info["ticks"] += 1  # finished looks: what `runtime status` shows and tests wait on
            try:
                write_info(info_path, info)
            except OSError:  # the project's run folder was removed: the loop ends with the folder
                pass
            looks.end()
            if not going_on or stop.is_set():
                break
            looks.pause(tick, stop)
    finally:
        info["stopping"] = True  # before the endpoint closes: a command that finds it closed knows why
        try:
            write_info(info_path, info)
        except OSError:
            pass
        endpoint.stop(server)
        supervisor.standby.stop("the supervisor stops")
        _remove_own(info_path, run_dir / endpoint.TOKEN_FILE, token)
        process.remove_own_scratch()
        log("supervisor stopped")
    return 0


def _own_record(info: dict, looks: endpoint.Looks) -> dict:
    """What GET /v1/status answers."""
    return {**info, "looks": looks.done, "last_asked": looks.last_asked}


def _remove_own(info_path: Path, token_path: Path, token: str) -> None:
    """Remove this supervisor's record and token file, not a successor's."""
    try:
        if json.loads(info_path.read_text()).get("pid") == os.getpid():
            info_path.unlink()
    except (OSError, ValueError):
        pass
    if endpoint.read_token(token_path.parent) == token:
        token_path.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
