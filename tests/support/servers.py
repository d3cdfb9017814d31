"""Local endpoints the tests start as their own processes (moto, kinesalite, fakesnow): a free loopback port,
wait until it answers, stop it by its PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _accepts_connections(port: int) -> None:
    socket.create_connection(("127.0.0.1", port), timeout=1).close()


@contextmanager
def local_server(name: str, command: Callable[[int], list[str]], ready: Callable[[int], None] = _accepts_connections,
                 timeout: float = 30.0) -> Iterator[int]:
    """Start `command(port)` on a free port, wait until `ready(port)` stops raising OSError; yields the port."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix=f"dsflow-{name}-", suffix=".log", delete=False)
    server = subprocess.Popen(command(port), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while True:
        try:
            ready(port)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"{name} did not start; see {log.name}") from None
            time.sleep(0.1)
    try:
        yield port
    finally:
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)
            server.wait()
        os.unlink(log.name)
