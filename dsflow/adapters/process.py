"""Background processes that outlive the dsflow command: query drivers and data generators.

Each runs in its own session (process group), so stopping it also stops the JVM and Python
workers it started. A PID is only trusted if the process's command line still names what we started: the module
and, where the caller knows it, a path only that one process was given (a query's spec file), so a PID the
system reused for another query's driver is never taken for this one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def launch(module: str, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> int:
    """Start `python -m module args...` detached; its output goes to log_path."""
    return spawn(module, args, log_path, env).pid


def spawn(module: str, args: list[str], log_path: Path, env: dict[str, str] | None = None,
          stdin: int = subprocess.DEVNULL, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    """`launch`, keeping the Popen (a pipe to its stdin, file descriptors passed on): a caller that talks to it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    environ = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"), **(env or {})}
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", module, *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=stdin, start_new_session=True, env=environ, pass_fds=pass_fds)


def take_command_line(argv: list[str]) -> bytes | None:
    """Rewrite this process's own command line (what /proc/PID/cmdline, `ps` and `is_running` read) to `argv`, in
    place: the arguments it was started with are the memory the kernel shows, from `arg_start` to `arg_end` of
    /proc/self/stat, written through /proc/self/mem (the process's own stack, no privilege needed). The new
    arguments must fit in that room (a caller that will need it starts with a long filler argument); the rest is
    NUL-filled, so the kernel shows exactly `argv` followed by empty arguments. The bytes it replaced (give them
    back to `restore_command_line`), or None when it cannot (not Linux, no room, /proc/self/mem refused)."""
    try:
        start, end = _argument_area()
        data = b"\0".join(os.fsencode(a) for a in argv) + b"\0"
        if len(data) > end - start:
            return None
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            before = mem.read(end - start)
            mem.seek(start)
            mem.write(data + b"\0" * (end - start - len(data)))
        return before
    except (OSError, ValueError, IndexError):
        return None


def restore_command_line(before: bytes) -> None:
    """Put back the command line `take_command_line` replaced."""
    start, _ = _argument_area()
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(start)
        mem.write(before)


def _argument_area() -> tuple[int, int]:
    """arg_start and arg_end (fields 48 and 49 of /proc/self/stat, counted after the command name's ')')."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return int(fields[45]), int(fields[46])


Marker = str | tuple[str, ...]


def is_running(pid: int | None, marker: Marker) -> bool:
    """True if `pid` is alive, not a zombie, and every marker is in its command line (each in one argument)."""
    if not pid:
        return False
    import psutil  # lazily: ~80 ms of every command's start, and `plan --no-refresh` never needs it

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(pid)
            return False
        return _holds(_command_line(proc), marker)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def running_with(marker: Marker) -> list[int]:
    """The PIDs of the live processes whose command line holds every marker (each in one argument), this one
    excepted."""
    import psutil

    return [proc.info["pid"] for proc in psutil.process_iter(["pid", "cmdline", "status"])
            if proc.info["pid"] != os.getpid() and proc.info["status"] != psutil.STATUS_ZOMBIE
            and _holds(proc.info["cmdline"] or [], marker)]


def _holds(parts: list[str], marker: Marker) -> bool:
    """Every marker is in one of the command line's arguments."""
    return all(any(m in part for part in parts) for m in ((marker,) if isinstance(marker, str) else marker))


def _command_line(proc, settle: float = 1.0) -> list[str]:
    """The process's arguments. Right after exec, /proc/PID/cmdline reads empty for a moment (measured: 17 of 200
    fresh processes here): an empty answer from a live process is asked again for up to `settle` seconds."""
    deadline = time.monotonic() + settle
    parts = proc.cmdline()
    while not parts and time.monotonic() < deadline:
        time.sleep(0.01)
        parts = proc.cmdline()
    return parts


def stop(pid: int | None, marker: Marker, timeout: float = 60.0) -> bool:
    """SIGTERM, wait up to `timeout`, then SIGKILL the whole process group. True if it was running."""
    if not is_running(pid, marker):
        return False
    assert pid is not None  # is_running: a PID
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_running(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    _kill_group(pid)
    return True


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
