"""A warm standby query driver (`runtime.standby: true`): a process that has already started its JVM and SparkSession
and waits to become the driver of a query the runtime supervisor restarts.

    python -m dsflow.adapters.spark.standby STANDBY_DIR/config.json --reply-fd N

- **Started** by the supervisor (its child, in a session of its own like a driver) with the master and Spark conf of
  `config.json`, the ones the environment's query-isolation drivers use. It builds its session as a driver would
  (session.build_session), runs one micro-batch of a store-less Python data source (warmup.py: Spark's Python
  daemons for data source planning, tasks and commits started), writes `ready` in `standby.json`, and waits. It
  holds nothing a query needs: no checkpoint, no topic, no lock.
- **Handed a query.** Its stdin is a pipe from the supervisor; one JSON line there, `{"spec": path, "env": {...},
  "log": path}`, hands it a dead query's recorded spec. The secrets the spec names (`@env:NAME`) come in `env`,
  through the pipe, never on disk (a cold driver gets them in its environment). A spec it cannot run as it is
  (another master or Spark conf, an unreadable spec, a driver of that query still alive) is refused and it goes
  on waiting; the supervisor then starts a cold driver. Otherwise it takes the query driver's identity, answers
  `{"ok": true, "pid": N}` on the reply pipe (fd N), and runs the spec exactly as `driver.run` does: same status
  file, same checkpoint (it resumes from the last commit). From then on it IS that query's driver.
- **Identity.** dsflow knows a process by its identity record and lock (adapters/process.py: PID, start time, a
  lock held while alive), never by its command line. A standby is started as `standby_identity(folder)`; on a
  handoff it claims the query's driver identity (`spec.driver_identity(RUN_DIR)`: the lock in the query's run
  folder, then the record with its own PID and start time) and gives up its standby identity (its record goes).
  Everything that finds, stops or reports a driver (apply, destroy, status, the supervisor) then sees the adopted
  standby as that query's driver, and a waiting standby is never taken for a driver. Its command line stays what
  it was started with. Where the claim is refused (a live process holds the query's lock), so is the handoff.
- **Stopping.** SIGTERM, or the end of its stdin (the supervisor stopped or died): a standby stops its session and
  exits. Once adopted, it stops like a driver (SIGTERM, between two micro-batches) and no longer reads its stdin.
- **Output.** Its Python output goes to the query's `driver.log` from the handoff on; the JVM it started before
  keeps writing Spark's own log lines to the standby's `standby.log` (driver.log names that file).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from dsflow.adapters import process
from dsflow.adapters.spark.spec import DRIVER_MODULE, driver_identity, misfit
from dsflow.errors import DsflowError

STANDBY_MODULE = "dsflow.adapters.spark.standby"
CONFIG_FILE = "config.json"
STATUS_FILE = "standby.json"
LOG_FILE = "standby.log"
APP_NAME = "dsflow:standby"
MAX_MESSAGE = 1 << 20


def standby_identity(folder: str | Path) -> process.Identity:
    """A waiting standby's identity (adapters/process.py), in its own folder; given up at its handoff."""
    return process.Identity(Path(folder), "standby", (STANDBY_MODULE, str(Path(folder) / CONFIG_FILE)))


def read_status(folder: Path) -> dict[str, Any]:
    try:
        found = json.loads((folder / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


# --- the supervisor's side ----------------------------------------------------------------------------------------


@dataclass
class Standby:
    """A standby the caller started: its child process, the pipe to its stdin and the reply pipe."""

    folder: Path
    popen: subprocess.Popen
    replies: int
    master: str
    spark_conf: dict[str, str]
    started_at: float = field(default_factory=time.time)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def _stdin(self) -> IO[bytes]:
        return cast(IO[bytes], self.popen.stdin)  # spawned with stdin=PIPE

    def ready(self) -> bool:
        return self.alive() and read_status(self.folder).get("state") == "ready"

    def hand_over(self, spec_path: Path, env: dict[str, str], log_path: Path, timeout: float = 10.0) -> dict:
        """Send the query; its answer: {"ok": true, "pid": n}, {"ok": false, "reason": ...}, and "answered":
        false when it gave none in time (it may then be running the query or not: the caller kills it)."""
        line = json.dumps({"spec": str(spec_path), "env": env, "log": str(log_path)}) + "\n"
        try:
            self._stdin.write(line.encode())
            self._stdin.flush()
        except (OSError, ValueError):
            return {"ok": False, "reason": "the standby is gone", "answered": False}
        deadline, buffer = time.monotonic() + timeout, b""
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            readable = select.select([self.replies], [], [], left)[0] if left > 0 else []
            if not readable:
                return {"ok": False, "reason": f"no answer within {timeout:.0f} s", "answered": False}
            chunk = os.read(self.replies, 65536)
            if not chunk:
                return {"ok": False, "reason": "the standby ended", "answered": False}
            buffer += chunk
        try:
            return {**json.loads(buffer.partition(b"\n")[0]), "answered": True}
        except ValueError:
            return {"ok": False, "reason": "an answer it could not read", "answered": False}

    def release(self) -> None:
        """Close the pipes (after a handoff: the process is a query's driver now)."""
        for close in (self._stdin.close, lambda: os.close(self.replies)):
            try:
                close()
            except OSError:
                pass

    def stop(self, timeout: float = 15.0) -> None:
        """End of its stdin and SIGTERM, then SIGKILL of its process group. Only while it is this caller's
        unreaped child (poll() is None), so the PID cannot be another process's."""
        self.release()
        if self.popen.poll() is None:
            try:
                self.popen.terminate()
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # its JVM and Python workers
        except (ProcessLookupError, PermissionError):
            pass
        if self.popen.poll() is None:
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                return
        process.drop_scratch(standby_identity(self.folder))


def start(folder: Path, master: str, spark_conf: dict[str, str]) -> Standby:
    """Start a standby in `folder` (made, private to the user): its config written, its output to standby.log."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    _write_json(folder / CONFIG_FILE, {"master": master, "spark_conf": dict(spark_conf)})
    reply_read, reply_write = os.pipe()
    try:
        popen = process.spawn(STANDBY_MODULE, [str(folder / CONFIG_FILE), "--reply-fd", str(reply_write)],
                              folder / LOG_FILE, standby_identity(folder), stdin=subprocess.PIPE,
                              pass_fds=(reply_write,))
    except BaseException:
        os.close(reply_read)
        raise
    finally:
        os.close(reply_write)
    return Standby(folder, popen, reply_read, master, dict(spark_conf))


def describe(root: Path) -> dict[str, Any] | None:
    """The waiting standby under `root` (its PID, state, master, since when it is ready, RSS of it and its JVM and
    Python workers), or None when none waits."""
    for folder in sorted(root.glob("sb-*")):
        status = read_status(folder)
        pid = status.get("pid")
        if status.get("state") not in ("starting", "ready") or not process.is_running(pid, standby_identity(folder)):
            continue
        assert pid is not None  # is_running: a PID
        return {"pid": pid, "state": status["state"], "master": status.get("master"),
                "started_at": status.get("started_at"), "ready_at": status.get("ready_at"),
                "rss_bytes": rss(pid), "folder": str(folder)}
    return None


def rss(pid: int) -> int | None:
    """Resident memory of the process and its descendants (bytes)."""
    import psutil

    try:
        root = psutil.Process(pid)
        total = 0
        for proc in [root, *root.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        return total
    except psutil.Error:
        return None


def stop_all(root: Path, timeout: float = 15.0) -> list[int]:
    """Stop every waiting standby under `root` (left by a supervisor that was killed); their PIDs. An adopted
    one is a query's driver and no longer holds its standby identity."""
    stopped: list[int] = []
    for folder in sorted(root.glob("sb-*")):
        pid = read_status(folder).get("pid")
        if process.stop(pid, standby_identity(folder), timeout=timeout):
            assert pid is not None  # stop: it was running
            stopped.append(pid)
    return stopped


def sweep(root: Path) -> None:
    """Remove the folders of standbys that are gone (kept: waiting ones, and adopted ones whose driver runs: their
    standby.log has the JVM's output)."""
    import shutil

    for folder in sorted(root.glob("sb-*")):
        status = read_status(folder)
        pid, adopted = status.get("pid"), status.get("adopted") or {}
        if process.is_running(pid, standby_identity(folder)):
            continue
        if adopted.get("spec") and process.is_running(pid, driver_identity(Path(adopted["spec"]).parent)):
            continue
        process.drop_scratch(standby_identity(folder))
        shutil.rmtree(folder, ignore_errors=True)


# --- the standby process ------------------------------------------------------------------------------------------


class Waiting:
    """The standby's own side: its status file, its command pipe and reply pipe."""

    def __init__(self, config_path: Path, reply_fd: int):
        self.folder = config_path.parent
        self.config = json.loads(config_path.read_text())
        self.reply_fd = reply_fd
        self.stop = threading.Event()
        self.buffer = b""
        self.status: dict[str, Any] = {"pid": os.getpid(), "state": "starting", "master": self.config["master"],
                                       "started_at": time.time()}

    def write(self, **changes: Any) -> None:
        self.status.update(changes)
        _write_json(self.folder / STATUS_FILE, self.status)

    def next_message(self) -> dict[str, Any] | None:
        """The next handoff, or None once told to stop (SIGTERM, the end of stdin: the supervisor is gone)."""
        while not self.stop.is_set():
            if b"\n" in self.buffer:
                line, _, self.buffer = self.buffer.partition(b"\n")
                try:
                    found = json.loads(line)
                    if isinstance(found, dict):
                        return found
                except ValueError:
                    pass
                self.answer({"ok": False, "reason": "not a handoff"})
                continue
            if not select.select([0], [], [], 0.5)[0]:
                continue
            chunk = os.read(0, 65536)
            if not chunk or len(self.buffer) > MAX_MESSAGE:
                return None
            self.buffer += chunk
        return None

    def answer(self, reply: dict[str, Any]) -> None:
        os.write(self.reply_fd, (json.dumps(reply) + "\n").encode())

    def adopt(self, message: dict[str, Any]):
        """Take the query's identity: its spec (None and the reason when refused)."""
        from dsflow.adapters.spark.spec import QuerySpec

        spec_path = str(message.get("spec") or "")
        try:
            spec = QuerySpec.model_validate_json(Path(spec_path).read_text())
        except (OSError, ValueError) as err:
            return None, f"its spec cannot be read: {str(err).splitlines()[0][:300]}"
        reason = misfit(self.config["master"], self.config["spark_conf"], spec.master, spec.spark_conf)
        if reason is not None:
            return None, reason
        refused = take_over(self.folder, Path(spec_path).parent)
        if refused is not None:
            return None, refused
        os.environ.update({str(k): str(v) for k, v in (message.get("env") or {}).items()})
        _redirect_output(Path(message["log"]), f"adopted by the runtime supervisor: standby {self.folder.name} "
                         f"(pid {os.getpid()}) runs query {spec.name}; Spark's own log lines go on in "
                         f"{self.folder / LOG_FILE}")
        return spec, None


def take_over(folder: Path, run_dir: Path) -> str | None:
    """This standby (of `folder`) becomes the driver of the query whose run folder is `run_dir`: it claims that
    driver's identity (its lock, then the record with this PID and start time) and gives up its standby identity.
    Its command line is left as it was started. The reason when it cannot (a live process holds that identity)."""
    try:
        process.claim(driver_identity(run_dir), DRIVER_MODULE, wait=2.0)
    except DsflowError as err:
        return f"{err.code}: {err.message}"
    process.release(standby_identity(folder))
    return None


def _redirect_output(log_path: Path, note: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the command pipe: an adopted standby is a driver, its supervisor's end may close
    os.close(null)
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())}Z {note}", flush=True)


def serve(waiting: Waiting) -> int:
    from dsflow.adapters.spark import driver
    from dsflow.adapters.spark.session import build_session

    from dsflow.adapters.spark.warmup import warm

    waiting.write()
    try:
        spark = build_session(waiting.config["master"], APP_NAME, waiting.config["spark_conf"])
    except Exception as err:  # noqa: BLE001 - the supervisor sees it failed and starts another after a backoff
        waiting.write(state="failed", error=driver.error_summary(err))
        print(f"standby failed: {err}", file=sys.stderr, flush=True)
        return 1
    try:
        warm(spark, waiting.folder)
    except Exception as err:  # noqa: BLE001 - only slower: the session itself works
        print(f"standby warm-up failed (the standby waits all the same): {err}", file=sys.stderr, flush=True)
    waiting.write(state="ready", ready_at=time.time())
    while (message := waiting.next_message()) is not None:
        spec, reason = waiting.adopt(message)
        if spec is None:
            waiting.answer({"ok": False, "reason": reason})
            continue
        waiting.answer({"ok": True, "pid": os.getpid()})
        os.close(waiting.reply_fd)
        waiting.write(state="adopted", adopted={"spec": message["spec"], "query": spec.name, "at": time.time()})
        return driver.run(driver.resolve_env_refs(spec), spark=spark, stop=waiting.stop)
    spark.stop()
    waiting.write(state="stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=STANDBY_MODULE)
    parser.add_argument("config")
    parser.add_argument("--reply-fd", type=int, required=True)
    args = parser.parse_args(argv)
    waiting = Waiting(Path(args.config), args.reply_fd)
    signal.signal(signal.SIGTERM, lambda *_: waiting.stop.set())
    signal.signal(signal.SIGINT, lambda *_: waiting.stop.set())
    return serve(waiting)


if __name__ == "__main__":
    sys.exit(main())
