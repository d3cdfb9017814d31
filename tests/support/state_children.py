"""What the state-backend tests run in a second process: another dsflow taking a lock, writing, appending.

The children are spawned, not forked: a test worker holds Spark's, boto3's and the broker clients' threads, and a
fork copies whatever lock one of them held at that moment (a child hung 20 s in CI that way). So each function
here is importable by name and takes only picklable arguments.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

SPAWN = multiprocessing.get_context("spawn")


def try_lock(target, results) -> None:
    """Take the "child" lock once; put ("acquired" | error code, text, seconds it took)."""
    from dsflow.adapters.state import make_backend
    from dsflow.errors import DsflowError

    backend = make_backend(*target)
    start = time.monotonic()
    try:
        with backend.lock("child"):
            results.put(("acquired", "", time.monotonic() - start))
    except DsflowError as err:
        results.put((err.code, f"{err.message} | {err.hint}", time.monotonic() - start))


def hold_lock(target, results) -> None:
    """Take the lock, put its info, and hang until killed."""
    from dsflow.adapters.state import make_backend

    with make_backend(*target).lock("hung apply") as info:
        results.put(info)
        time.sleep(60)


def take_lock_and_die(target) -> None:
    """Take the lock and die by SIGKILL: no finally, no release."""
    from dsflow.adapters.state import make_backend

    held = make_backend(*target).lock("apply")  # referenced: a collected context manager would release the lock
    held.__enter__()
    os.kill(os.getpid(), signal.SIGKILL)


def append_events(target, marker: str, count: int, results) -> None:
    """Append `count` restart events of query `marker`, one call each."""
    from dsflow.adapters.state import make_backend
    from dsflow.core.events import event

    backend = make_backend(*target)
    for i in range(count):
        backend.append_events([event(f"query.db.public.{marker}", "restart", "supervisor", target[2], n=i)])
    results.put(count)


def race(target, state, expected: int, marker: str, barrier, results) -> None:
    """Write `state` expecting serial `expected`, together with another racer; put (marker, "won" | code)."""
    from dsflow.adapters.state import make_backend
    from dsflow.errors import DsflowError

    backend = make_backend(*target)
    backend.read()  # connect first, so both writers reach the write together
    barrier.wait(30)
    try:
        backend.write(state, expected_serial=expected)
        results.put((marker, "won"))
    except DsflowError as err:
        results.put((marker, err.code))


def redaction_key(target, results) -> None:
    from dsflow.adapters.state import make_backend

    results.put(make_backend(*target).redaction_key())


def legacy_rewrite(root: Path, environ: dict[str, str], bootstrap: str) -> None:
    """The state as dsflow wrote it before 2026-11-25: unkeyed markers, the broker address in clear in a topic's
    outputs (run in a child process: loading registers the secrets for scrubbing, which the test process must not
    inherit)."""
    from dsflow.adapters.state.local import LocalStateBackend
    from dsflow.core.resources import project_resources
    from dsflow.core.secrets import LegacyRedactor
    from dsflow.load.project import load_project

    project = load_project(root, environ=environ)
    backend = LocalStateBackend(root / ".dsflow" / "state", "dev")
    state = backend.read()
    resources = dict(state.resources)
    for resource in project_resources(project, LegacyRedactor()):
        entry = resources[str(resource.address)]
        outputs = {**entry.outputs, "bootstrap": bootstrap} if "created_by_dsflow" in entry.outputs else entry.outputs
        resources[entry.address] = entry.model_copy(update={
            "data": resource.data, "metadata": resource.metadata, "data_hash": resource.data_hash,
            "metadata_hash": resource.metadata_hash, "outputs": outputs})
    backend.write(state.model_copy(update={"resources": resources}))
    backend.write(state.model_copy(update={"resources": resources}))  # the backup copy too, as old dsflow left it
