"""Servers shared by every process of one test run: the one pytest process, or all pytest-xdist workers.

The controlling process (`begin()` in pytest_configure) makes the run's folder and names it in DSFLOW_TEST_RUN_DIR,
which workers inherit. A server is started by whichever process asks for it first (`server()`, under a file lock)
and recorded there as JSON; the others read the record. The controlling process stops every recorded server by its
PID at the end (`end()` in pytest_unconfigure), after the workers are done.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

RUN_DIR = "DSFLOW_TEST_RUN_DIR"


def begin() -> None:
    if not os.environ.get(RUN_DIR):
        os.environ[RUN_DIR] = tempfile.mkdtemp(prefix="dsflow-testrun-")


def run_dir() -> Path:
    begin()
    return Path(os.environ[RUN_DIR])


@contextmanager
def _locked(name: str) -> Iterator[None]:
    with open(run_dir() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def server(name: str, start: Callable[[Path], dict]) -> dict:
    """The record of the run's server `name`: read, or made by `start(folder)` (which starts it in `folder` and
    returns a JSON-able record) the first time any process of the run asks."""
    record_file = run_dir() / f"{name}.json"
    with _locked(name):
        if record_file.exists():
            return json.loads(record_file.read_text())
        folder = run_dir() / name
        folder.mkdir(exist_ok=True)
        record = start(folder)
        record_file.write_text(json.dumps(record))
        return record


def end() -> None:
    """Stop every broker the run started (by the PID its folder records) and remove the run's folder."""
    from dsflow.adapters.kafka import devbroker

    folder = Path(os.environ.get(RUN_DIR, ""))
    if not os.environ.get(RUN_DIR) or not folder.is_dir():
        return
    for record_file in folder.glob("*.json"):
        devbroker.stop(folder / record_file.stem)
    shutil.rmtree(folder, ignore_errors=True)
