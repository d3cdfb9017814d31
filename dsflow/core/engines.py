"""The engine protocol and the engine registry: what the engine layer (dsflow/engine/) asks of the system that runs
continuous queries, and where each engine's implementation lives.

Like the store registry (core/stores.py) and the state backend registry (core/backends.py), the registry names a
module path, not a module: `engine()` imports the implementation when first asked, so the engine layer never imports
an engine's package (an import-linter contract keeps dsflow.engine off adapters/spark). Spark is the one engine;
adding another is one package under adapters/ with a module exposing `ENGINE` (an object with the members of
`Engine` below) plus one entry in `ENGINES` (docs/architecture.md, "Adding an engine").

The members are the operations the engine and runtime layers use: start a query's version, stop it between
batches (park), stop it, adopt it again after a restart (relaunch), its identity and status, the progress its
checkpoint committed, the warm standbys and shared applications the supervisor (dsflow/runtime/) keeps, and the
in-process run behind `dsflow query --follow`. Types the engine layer does not look into (a query's spec, a process
identity) are `Any` here: core does not import adapters.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class StartAt:
    """Where a new checkpoint's sources start: carried offsets per topic, a position, or a timestamp; and, for a
    blue/green deployment's runs to a cut (core/bluegreen.py), the offsets per topic it reads no further than."""

    offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    position: str | None = None
    timestamp: int | None = None
    until: dict[str, dict[str, int]] = field(default_factory=dict)
    until_file: str | None = None
    """A file whose offsets per topic, once written, replace `until` in the running version: a blue/green
    deployment moves its new version's bound to the cut without restarting it."""


Handoff = Callable[[Path, dict[str, str], Path], tuple[int | None, str]]
"""(spec path, secrets, log path) -> the PID of a warm standby now running that spec, or None to start cold."""

Rows = Callable[[list[str], list[tuple]], None]


class StandbyDriver(Protocol):
    """A warm standby driver a supervisor started and keeps (Spark: adapters/spark/standby.py's `Standby`)."""

    @property
    def folder(self) -> Path: ...
    @property
    def popen(self) -> Any: ...
    @property
    def master(self) -> str: ...
    @property
    def spark_conf(self) -> dict[str, str]: ...
    @property
    def pid(self) -> int: ...

    def ready(self) -> bool:
        """Alive and waiting for a query."""

    def alive(self) -> bool: ...

    def hand_over(self, spec_path: Path, env: dict[str, str], log_path: Path, timeout: float = 10.0) -> dict:
        """Send it a query's spec; its answer (`ok`, `pid`, `reason`, `answered`)."""

    def release(self) -> None:
        """Let go of it (after a handoff it is a query's driver)."""

    def stop(self, timeout: float = 15.0) -> None: ...


class Standbys(Protocol):
    """An engine's warm standby drivers, which the supervisor's keeper (runtime/standby.py) starts and hands
    queries to."""

    def start(self, folder: Path, master: str, spark_conf: dict[str, str]) -> StandbyDriver: ...

    def describe(self, root: Path) -> dict[str, Any] | None:
        """The standby waiting under `root` (its PID and state, ...); None when none waits."""

    def stop_all(self, root: Path, timeout: float = 15.0) -> list[int]:
        """Stop every standby under `root` (one a killed supervisor left); their PIDs."""

    def sweep(self, root: Path) -> None:
        """Remove the folders of standbys that ended."""

    def misfit(self, master: str, conf: dict[str, str], spec_master: str, spec_conf: dict[str, str]) -> str | None:
        """Why a spec cannot run in a standby built for this master and conf, or None."""

    def read_status(self, folder: Path) -> dict[str, Any]: ...


class SharedApps(Protocol):
    """An engine's shared applications (`runtime.isolation: shared`), as the supervisor watches and restarts them
    (runtime/shared.py)."""

    def host_identity(self, app_dir: str | Path) -> Any:
        """The identity of the application's host process."""

    def failure(self, app_dir: Path, name: str) -> str | None:
        """Why the query `name` failed inside its live host (its current generation), or None."""

    def reported(self, app_dir: Path) -> dict[str, dict[str, Any]]:
        """What the host reports of each of its queries."""

    def restart(self, app_dir: Path, name: str) -> bool:
        """Start one failed query again in its live host; False when the application no longer lists it."""

    def ensure_host(self, app_dir: Path) -> int:
        """Start the application's host again if it is gone (every query it lists, from its checkpoint); its PID."""


class Engine(Protocol):
    """What runs continuous queries: one implementation per engine (Spark: adapters/spark/engine.py)."""

    driver_module: str
    """The module a query's own driver process runs (`python -m MODULE SPEC`)."""

    def driver_identity(self, run_dir: str | Path | None) -> Any:
        """The identity (adapters/process.py) of the driver process of a query's run folder."""

    def running_driver(self, run_dir: Path, apps_root: Path) -> dict[str, Any] | None:
        """The query a live driver runs from `run_dir` (a driver of its own, or a member of a live shared application
        under `apps_root`; known by its identity, never by a PID alone), as its spec records it: {"name", "pid",
        "version", "checkpoint", "topics"}, with a shared application's `app`, `app_dir` and `app_query` (`pid`: its
        host's); None if no live driver or application runs the folder's query or it has no spec (an import of a
        running query: core/imports.py)."""

    def identity(self, outputs: dict[str, Any]) -> Any:
        """The identity of the process running a deployed query (its outputs): its own driver or its shared host."""

    def isolation(self, project: Any, query: Any) -> str:
        """Where a query runs: 'query' (a driver of its own) or 'shared' (an application with other queries)."""

    def start(self, project: Any, apps_root: Path, query: Any, version: str, checkpoint: Path, run_dir: Path,
              start: StartAt, parked: int | None) -> dict[str, Any]:
        """Start a query's version (its spec written into run_dir): in its parked driver, a shared application or a
        driver of its own; the outputs to record (`pid`, `topics`, and a shared application's `app*` keys)."""

    def park(self, run_dir: Path, pid: int | None, alive: Callable[[], bool], timeout: float) -> dict[str, Any] | None:
        """Stop a running driver's query between batches and keep the driver waiting for a new spec; its reply, or
        None when it did not park."""

    def stop(self, outputs: dict[str, Any], parked: int | None) -> None:
        """Stop a deployed query (nothing to do for a parked one; a shared application's other queries go on)."""

    def relaunch(self, project: Any, deployed: Any, handoff: Handoff | None) -> int:
        """Start a deployed query again on its recorded spec and checkpoint (adopted by the supervisor); its PID."""

    def start_again(self, project: Any, apps_root: Path, deployed: Any) -> dict[str, Any]:
        """A paused query of a shared application placed again in one; the outputs to record."""

    def start_in_micro_batches(self, project: Any, deployed: Any, version: str, checkpoint: Path,
                               start: StartAt) -> dict[str, Any]:
        """A stopped deployed query of real-time mode started again in micro-batches from its recorded spec (its own
        SQL, which the project may no longer hold), as `version`, on the fresh `checkpoint` from `start`, in a
        driver of its own (a real-time query runs in one); the outputs to record (`pid`, `topics`)."""

    def committed_offsets(self, checkpoint: Path) -> list[dict[str, Any]] | None:
        """Progress: the offsets per source the checkpoint's last committed batch ended at (None: nothing)."""

    def last_committed_batch(self, checkpoint: Path) -> int | None:
        """Progress: the id of the checkpoint's last committed batch."""

    def last_planned_batch(self, checkpoint: Path) -> int | None:
        """Progress: the id of the checkpoint's last planned batch (its offsets written before it runs): a batch
        runs while it is above the last committed one."""

    standbys: Standbys
    """Its warm standby drivers (the supervisor's keeper)."""

    shared: SharedApps
    """Its shared applications, as the supervisor watches them."""

    def sink_format(self, project: Any, relation: Any) -> dict[str, Any]:
        """How a query writes a relation's values (its format, schema and registry subject)."""

    def follow(self, project: Any, query: Any, on_rows: Rows, stop: threading.Event,
               on_started: Callable[[Path], None]) -> None:
        """Run an ad hoc continuous query in this process until `stop` is set, handing each batch's rows on."""

    def unit_tests(self, project: Any, tests: list[Any], on_outcome: Callable[[Any], None]) -> list[Any]:
        """Run `dsflow test`'s tests (core/unittests.py UnitTest) in this process, each outcome handed on."""

    def state_sample(self, checkpoint: Path, limit: int) -> list[dict[str, Any]]:
        """A query's state after its last committed batch, per stateful operator: rows, bytes on disk and up to
        `limit` rows {key, value} (`dsflow describe --state-sample`); [] for a stateless query."""

    def observe_test(self, project: Any, test: Any) -> Any:
        """Run one test's batches through its query in this process: what it produced (core/unittests.py
        Observed), compared with nothing (`dsflow test --record`)."""


ENGINES: dict[str, str] = {
    "spark": "dsflow.adapters.spark.engine",
}
"""Engine name -> the module whose `ENGINE` implements it. Spark is the one engine (and the default)."""

DEFAULT = "spark"


@cache
def engine(name: str = DEFAULT) -> Engine:
    """The engine `name`, its module imported when first asked."""
    return importlib.import_module(ENGINES[name]).ENGINE
