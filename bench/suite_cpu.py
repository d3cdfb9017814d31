"""CPU seconds of every test of a whole run, pytest-xdist workers included: a pytest plugin for measurement only.

    PYTHONPATH=bench python3 -m pytest -p suite_cpu            # writes suite_cpu.jsonl (DSFLOW_SUITE_CPU to move it)

Each worker moves itself into a cgroup of its own (cgroup v1 `cpuacct`, as root) before any test runs; every
process it starts afterwards (drivers, their JVMs and Python workers, CLI calls, a server it is first to need) is
counted in it. Per test, the cgroup's CPU before and after the test's setup, call and teardown is one JSON line:
`{"id", "cpu", "wall", "worker"}`. A server started by one worker and used by all (the broker) is charged to the
tests of the worker that started it. docs/testing.md has what it measured.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CGROUPS = Path("/sys/fs/cgroup/cpuacct")
_group: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _group
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _group = CGROUPS / f"dsflow_suite_{worker}"
    _group.mkdir(exist_ok=True)
    (_group / "cgroup.procs").write_text(str(os.getpid()))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Back to the root group; the worker's group goes once no process is left in it."""
    if _group is not None:
        (CGROUPS / "cgroup.procs").write_text(str(os.getpid()))
        try:
            _group.rmdir()
        except OSError:  # a process it started lives on (a shared server, stopped by the controlling process)
            pass


def _cpu() -> float:
    assert _group is not None
    return int((_group / "cpuacct.usage").read_text()) / 1e9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpu, wall = _cpu(), time.monotonic()
    yield
    line = {"id": item.nodeid, "cpu": round(_cpu() - cpu, 2), "wall": round(time.monotonic() - wall, 2),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    with open(os.environ.get("DSFLOW_SUITE_CPU", "suite_cpu.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
