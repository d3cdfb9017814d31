"""Background processes that outlive the dsflow command: query drivers, data generators, shared applications' hosts,
the runtime supervisor and its warm standby, the dev schema registry.

Each runs in its own session (process group), so stopping it also stops the JVM and Python workers it started.

A process is known by its **identity** (`Identity`), never by its command line: a record,
`<folder>/<role>.process.json`, with its PID and its start time, and a lock file beside it,
`<role>.process.lock`, that the process holds (flock) while it lives. `spawn` takes the lock before the child
exists, hands it over (the child inherits the locked file; the parent closes its copy) and writes the record; a
process dsflow did not spawn itself (a supervisor exec'd in the foreground, a standby that becomes a query's
driver) `claim`s its identity. A PID is trusted only while the record names it, the live process with that PID
started at the recorded time (Linux: field 22 of /proc/PID/stat, in clock ticks since boot; elsewhere psutil's
create_time) and the lock is held. A PID the system reused (pid_max is 32768 on the CI machine) has another start
time: it is never reported running and never stopped. Only one live process holds an identity's lock, so two
processes never run as one identity (two drivers on one checkpoint): DSF-E274.

Each spawned process gets a **scratch folder** of its identity (`scratch`) as its temporary directory: TMPDIR for
it and its Python workers, `java.io.tmpdir` (through JDK_JAVA_OPTIONS) for its JVMs, where Spark keeps its local
files (RocksDB state stores' working copies, shuffle and block files, extracted native libraries). A driver killed
with SIGKILL cannot clean them up; its scratch folder is emptied by the next `spawn` of its identity (which holds
the lock: nothing lives there any more) and removed by `stop`. It sits in the system's temporary directory, not in
the project, so the Unix sockets Spark makes there keep short paths (108 bytes at most).

Processes started by dsflow before identity records (2026-11-29) have none; for those only, the command line is
read, never written: the module and a path only that process was given (`Identity.legacy`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from tempfile import gettempdir
from typing import Any

from dsflow.errors import DsflowError

RECORD_ENV = "DSFLOW_PROCESS_RECORD"
"""Set by `spawn` in the child's environment: the record of the identity it was started as (its lock is held)."""
SCRATCH_ROOT_ENV = "DSFLOW_SCRATCH_ROOT"
"""Set by `spawn` in the child's environment: the temporary directory scratch folders are made in, the first dsflow
command's. A spawned process's own TMPDIR is its scratch folder, so the processes it starts (the supervisor's
drivers) must not nest theirs inside it: stopping it would remove theirs."""
SCRATCH_NAME = re.compile(r"dsflow-[0-9a-f]{12}")
"""A scratch folder's name (`Identity.scratch`)."""
LOCK_WAIT_SECONDS = 10.0
"""How long `spawn` and `claim` wait for an identity's lock: a process stopped with SIGKILL a moment ago lets it go
as it exits."""
RELEASE_WAIT_SECONDS = 5.0
"""How long a stop waits for the stopped group's last process to let the identity's lock go."""


@dataclass(frozen=True)
class Identity:
    """Where a process's identity is kept: `folder/<role>.process.json` and `folder/<role>.process.lock`."""

    folder: Path | None
    """None: a state written before the process's folder was recorded (only `legacy` can tell)."""
    role: str
    legacy: tuple[str, ...] = ()
    """What the command line of a process started before identity records holds (read only, when no record)."""

    @property
    def record(self) -> Path | None:
        return self.folder / f"{self.role}.process.json" if self.folder is not None else None

    @property
    def lock(self) -> Path | None:
        return self.folder / f"{self.role}.process.lock" if self.folder is not None else None

    @property
    def scratch(self) -> Path | None:
        """The temporary directory of the process (see the module's docstring): one per identity, a short path."""
        if self.lock is None:
            return None
        digest = hashlib.sha256(str(self.lock.resolve()).encode()).hexdigest()[:12]
        return scratch_root() / f"dsflow-{digest}"  # SCRATCH_NAME


def scratch_root() -> Path:
    """Where scratch folders are made: the system's temporary directory as the first dsflow command saw it."""
    return Path(os.environ.get(SCRATCH_ROOT_ENV) or gettempdir())


def launch(module: str, args: list[str], log_path: Path, identity: Identity, env: dict[str, str] | None = None) -> int:
    """Start `python -m module args...` detached as `identity`; its output goes to log_path."""
    return spawn(module, args, log_path, identity, env).pid


def spawn(module: str, args: list[str], log_path: Path, identity: Identity, env: dict[str, str] | None = None,
          stdin: int = subprocess.DEVNULL, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    """`launch`, keeping the Popen (a pipe to its stdin, file descriptors passed on): a caller that talks to it.
    DSF-E274 when a live process holds the identity."""
    assert identity.folder is not None  # every process dsflow starts has a folder
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lock = _take_lock(identity, LOCK_WAIT_SECONDS)
    environ = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"), **(env or {}),
               RECORD_ENV: str(identity.record)}
    try:
        environ.update(_scratch_env(_fresh_scratch(identity), environ))
        with open(log_path, "ab") as log:
            popen = subprocess.Popen([sys.executable, "-m", module, *args], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=stdin, start_new_session=True, env=environ,
                                     pass_fds=(*pass_fds, lock))
        _write_record(identity, popen.pid, module)  # an unreaped child: its PID is not reused meanwhile
    finally:
        os.close(lock)  # the child holds the lock now
    return popen


def _fresh_scratch(identity: Identity) -> Path:
    """The identity's scratch folder, emptied (its lock is held: the process that used it is gone), mode 0700."""
    folder = identity.scratch
    assert folder is not None
    _remove_scratch(folder)
    folder.mkdir(mode=0o700)
    return folder


def _remove_scratch(folder: Path) -> None:
    """Remove a scratch folder this user owns; another user's file or a link at that path is an error."""
    try:
        found = folder.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        raise DsflowError("DSF-E276", f"{folder} is not a folder of this user: dsflow keeps a process's temporary "
                          "files there", hint="remove it, or set TMPDIR to a folder of your own")
    shutil.rmtree(folder, ignore_errors=True)


def _scratch_env(folder: Path, environ: dict[str, str]) -> dict[str, str]:
    java = environ.get("JDK_JAVA_OPTIONS", "")
    return {"TMPDIR": str(folder), SCRATCH_ROOT_ENV: str(folder.parent),
            "JDK_JAVA_OPTIONS": f"{java} -Djava.io.tmpdir={shlex.quote(str(folder))}".strip()}


_claimed: dict[Path, int] = {}
"""The lock files this process claimed, open (and locked) until it exits; never inherited (O_CLOEXEC)."""


def claim(identity: Identity, module: str, wait: float = LOCK_WAIT_SECONDS) -> None:
    """This process becomes `identity`: it takes the lock (held until it exits) and writes the record. A process
    `spawn` started as that identity holds the lock already (inherited): it only writes the record, which its
    parent may not have written yet. DSF-E274 when another live process holds it for `wait` s."""
    assert identity.folder is not None and identity.lock is not None
    if os.environ.get(RECORD_ENV) == str(identity.record):
        _write_record(identity, os.getpid(), module)
        return
    lock = _take_lock(identity, wait)
    _claimed[identity.lock] = lock
    _write_record(identity, os.getpid(), module)


def release(identity: Identity) -> None:
    """This process is no longer `identity` (a standby that became a query's driver): its record then names no
    process (kept, so the command line of a process from before identity records is not asked either)."""
    record = read_record(identity)
    if record is not None and record.get("pid") == os.getpid() and identity.record is not None:
        _write_json(identity.record, {"pid": None, "released_by": os.getpid(), "at": time.time()})
    lock = _claimed.pop(identity.lock, None) if identity.lock is not None else None
    if lock is not None:
        os.close(lock)


def read_record(identity: Identity) -> dict[str, Any] | None:
    """The identity's record ({"pid", "start", "module", "at"}), or None when there is none."""
    if identity.record is None:
        return None
    try:
        found = json.loads(identity.record.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def holder(identity: Identity) -> int | None:
    """The PID of the live process holding `identity`, or None."""
    pid = (read_record(identity) or {}).get("pid")
    return pid if isinstance(pid, int) and is_running(pid, identity) else None


def is_running(pid: int | None, identity: Identity) -> bool:
    """True if `pid` is the live process (not a zombie) `identity` records: same PID, same start time, its lock
    held. Without a record, a process started before identity records: its command line holds `legacy`."""
    if not pid:
        return False
    record = read_record(identity)
    if record is None:
        return bool(identity.legacy) and _legacy_running(pid, identity.legacy)
    if record.get("pid") != pid:
        return False
    found = _state(pid)
    if found is None:
        return False
    if found[0] == "Z":
        _reap(pid)
        return False
    return found[1] == record.get("start") and _held(identity)


def start_time(pid: int) -> str | None:
    """When the process started, exactly (see the module's docstring), or None when there is no such process."""
    found = _state(pid)
    return found[1] if found is not None else None


def _state(pid: int) -> tuple[str, str] | None:
    """The process's state letter ('Z': a zombie) and start time, or None."""
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()  # the command name may hold spaces and ')'
        except (FileNotFoundError, ProcessLookupError):
            return None
        return fields[0].decode(), f"ticks:{int(fields[19])}"
    import psutil  # lazily: ~80 ms of every command's start

    try:
        proc = psutil.Process(pid)
        state = "Z" if proc.status() == psutil.STATUS_ZOMBIE else "R"
        return state, f"created:{proc.create_time()!r}"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _write_record(identity: Identity, pid: int, module: str) -> None:
    assert identity.record is not None
    _write_json(identity.record, {"pid": pid, "start": start_time(pid), "module": module, "at": time.time()})


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a reader sees the old record or the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _take_lock(identity: Identity, wait: float) -> int:
    """An open descriptor holding the identity's lock (exclusive); DSF-E274 when another process holds it for
    `wait` seconds."""
    assert identity.folder is not None and identity.lock is not None
    identity.folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(identity.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                pid = (read_record(identity) or {}).get("pid")
                raise DsflowError("DSF-E274", f"another live process (pid {pid}) holds {identity.lock}: it runs as "
                                  f"this {identity.role} already",
                                  hint="stop it first; two processes never run as one (two drivers on one "
                                  "checkpoint)") from None
            time.sleep(0.05)


def _held(identity: Identity) -> bool:
    """Some live process holds the identity's lock (a moment's shared lock of our own otherwise)."""
    assert identity.lock is not None
    try:
        fd = os.open(identity.lock, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _legacy_running(pid: int, marker: tuple[str, ...]) -> bool:
    """A process started before identity records: alive, not a zombie, every marker in one of its arguments."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(pid)
            return False
        parts = _command_line(proc)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return all(any(m in part for part in parts) for m in marker)


def _command_line(proc, settle: float = 1.0) -> list[str]:
    """The process's arguments. Right after exec, /proc/PID/cmdline reads empty for a moment: an empty answer from
    a live process is asked again for up to `settle` seconds."""
    deadline = time.monotonic() + settle
    parts = proc.cmdline()
    while not parts and time.monotonic() < deadline:
        time.sleep(0.01)
        parts = proc.cmdline()
    return parts


def stop(pid: int | None, identity: Identity, timeout: float = 60.0) -> bool:
    """SIGTERM, wait up to `timeout`, then SIGKILL the whole process group; then its scratch folder goes. True if
    it was running (only the process `identity` records: a reused PID is never signalled)."""
    if not is_running(pid, identity):
        drop_scratch(identity)
        return False
    assert pid is not None  # is_running: a PID
    used = _scratch_in_use(pid)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_running(pid, identity) and time.monotonic() < deadline:
        time.sleep(0.2)
    _kill_group(pid)
    _wait_released(identity)
    drop_scratch(identity)
    if used is not None and used != identity.scratch:  # a standby's, kept when it took this identity over
        _quietly_remove(used)
    return True


def _scratch_in_use(pid: int) -> Path | None:
    """The scratch folder the process runs with (its TMPDIR, when that is one; Linux only)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    found = next((entry[len(b"TMPDIR="):] for entry in environ if entry.startswith(b"TMPDIR=")), None)
    return _as_scratch(os.fsdecode(found)) if found is not None else None


def _as_scratch(value: str | None) -> Path | None:
    """`value` as a scratch folder's path, or None when it is not one."""
    if not value:
        return None
    folder = Path(value)
    return folder if folder.parent == scratch_root() and SCRATCH_NAME.fullmatch(folder.name) else None


def remove_own_scratch() -> None:
    """A process dsflow spawned that ends by itself, nothing of its own left running (the supervisor once nothing is
    deployed): its scratch folder goes with it."""
    folder = _as_scratch(os.environ.get("TMPDIR"))
    if folder is not None:
        _quietly_remove(folder)


def drop_scratch(identity: Identity) -> None:
    """Remove the identity's scratch folder unless a live process holds the identity (another one started) or its
    process gave the identity up and lives on as another (a standby that took a query over keeps its TMPDIR)."""
    if identity.scratch is None or _held(identity) or "released_by" in (read_record(identity) or {}):
        return
    _quietly_remove(identity.scratch)


def _quietly_remove(folder: Path) -> None:
    """A stop removes what it can: a path that is not this user's folder is left (the next start refuses it)."""
    try:
        _remove_scratch(folder)
    except DsflowError:
        pass


def _wait_released(identity: Identity, timeout: float = RELEASE_WAIT_SECONDS) -> None:
    """Until no process holds the identity's lock: a child of the stopped process (its JVM) that inherited the lock
    dies a moment after the group's SIGKILL, and the scratch folder is removed only once it is free."""
    if identity.lock is None or identity.scratch is None:
        return
    deadline = time.monotonic() + timeout
    while _held(identity) and time.monotonic() < deadline:
        time.sleep(0.05)


def _kill_group(pid: int | None) -> None:
    if not pid:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _reap(pid)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
