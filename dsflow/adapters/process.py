"""Background processes that outlive the dsflow command: query drivers and data generators.

Each runs in its own session (process group), so stopping it also stops the JVM and Python
workers it started. A PID is only trusted if the process's command line still names what we started.
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
    log_path.parent.mkdir(parents=True, exist_ok=True)
    environ = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"), **(env or {})}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=environ)
    return proc.pid


def is_running(pid: int | None, marker: str) -> bool:
    """True if `pid` is alive, not a zombie, and its command line contains `marker`."""
    if not pid:
        return False
    import psutil  # lazily: ~80 ms of every command's start, and `plan --no-refresh` never needs it

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(pid)
            return False
        return any(marker in part for part in proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def stop(pid: int | None, marker: str, timeout: float = 60.0) -> bool:
    """SIGTERM, wait up to `timeout`, then SIGKILL the whole process group. True if it was running."""
    if not is_running(pid, marker):
        return False
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
