"""The state lock as apply takes it while a runtime supervisor may be restarting a process.

The supervisor holds the lock only for the instant of one restart (start the process, record its PID); apply and
destroy wait that out instead of failing with DSF-E802. A lock held by anything else fails at once, as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from dsflow.errors import DsflowError

RESTART_OPERATION = "runtime restart"
"""The state lock's operation while the supervisor restarts a process."""
WAIT_SECONDS = 30.0


@contextmanager
def lock_patiently(backend, operation: str, wait: float = WAIT_SECONDS) -> Iterator[object]:
    """`backend.lock(operation)`, retried for up to `wait` seconds while the runtime supervisor holds it."""
    deadline = time.monotonic() + wait
    while True:
        try:
            held = backend.lock(operation)
            info = held.__enter__()
            break
        except DsflowError as err:
            holder = backend.lock_holder() if err.code == "DSF-E802" else None
            if holder is None or holder.operation != RESTART_OPERATION or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
    try:
        yield info
    except BaseException as exc:
        if not held.__exit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        held.__exit__(None, None, None)
