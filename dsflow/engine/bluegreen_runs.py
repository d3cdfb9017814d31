"""The runs of a blue/green deployment's query versions (engine/bluegreen.py): a version's driver started beside the
deployed one, waited for until its checkpoint committed given offsets, and capped at the cut (`bring_to`: the cap of
the running driver moved through a file of its run folder, which the source of its logs reads before each
micro-batch)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from dsflow.adapters import process
from dsflow.core.bluegreen import BlueGreen, reached
from dsflow.core.engines import StartAt, engine
from dsflow.errors import DsflowError
from dsflow.core.plan import Change
from dsflow.engine.executors import Context, driver_identity

POLL_SECONDS = 0.5
UNTIL_FILE = "until.json"
"""In a new version's run folder: the cut it is to read to, written once the deployed version stopped there."""


class Deploying(Protocol):
    """What a run needs of the deployment under way (engine/bluegreen.py `_Deploying`)."""

    ctx: Context
    change: Change
    plan: BlueGreen
    name: str
    build_project: Any


@dataclasses.dataclass
class Run:
    """One Spark run of a query version: its folder, checkpoint and source logs; a deployed one (`of`) may run in a
    shared application (`app`: its folder and the query's name there)."""

    run_dir: Path
    checkpoint: Path
    topics: list[str]
    pid: int | None = None
    app: tuple[Path, str] | None = None

    @classmethod
    def of(cls, outputs: Mapping[str, Any], topics: list[str] | None = None) -> Run:
        """A deployed version as its outputs record it."""
        app = (Path(outputs["app_dir"]), str(outputs["app_query"])) if outputs.get("app_dir") else None
        return cls(Path(outputs["run_dir"]), Path(outputs["checkpoint"]),
                   list(topics if topics is not None else outputs.get("topics") or []), outputs.get("pid"), app)

    def committed(self) -> dict[str, dict[str, int]] | None:
        offsets = engine().committed_offsets(self.checkpoint) if self.checkpoint.is_dir() else None
        if not offsets:
            return None
        return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in zip(self.topics, offsets, strict=False)}

    def alive(self) -> bool:
        """Its driver runs; in a shared application: its host runs and does not report the query failed."""
        if self.app is None:
            return process.is_running(self.pid, driver_identity(self.run_dir))
        shared = engine().shared
        return process.is_running(self.pid, shared.host_identity(self.app[0])) and \
            shared.failure(self.app[0], self.app[1]) is None

    def stop(self) -> None:
        engine().stop({"pid": self.pid, "run_dir": str(self.run_dir)}, None)


def start(run: Deploying, project: Any, target: Run, start: StartAt) -> None:
    """The new version started in a driver of its own, also when the query runs in a shared application: built
    beside the deployed version (which the application runs under the query's name) and stopped at the cut, it
    moves into the application only when it resumes after the switch (engine/bluegreen.py `_resumed`)."""
    target.run_dir.mkdir(parents=True, exist_ok=True)
    process.stop(process.holder(driver_identity(target.run_dir)), driver_identity(target.run_dir))
    (target.run_dir / UNTIL_FILE).unlink(missing_ok=True)  # an earlier attempt's cut
    start = dataclasses.replace(start, until_file=str(target.run_dir / UNTIL_FILE))
    query = next(q for q in project.queries if q.fqn == run.name)  # the build project's: in micro-batches
    own = query.model_copy(update={"isolation": "query"})
    started = engine().start(project, run.ctx.workspace.run_dir / "apps", own, run.change.data_hash or "v",
                             target.checkpoint, target.run_dir, start, None)
    target.pid = started["pid"]
    run.ctx.note({"blue_green_pid": target.pid})


def wait(target: Run, until: Mapping[str, Mapping[str, int]], seconds: float, what: str,
          done: Callable[[Any, Mapping[str, Mapping[str, int]]], bool] = reached) -> None:
    """Until the run's checkpoint committed `until` (lag 0 on those offsets; `done` says); DSF-E961 past `seconds`,
    DSF-E962 when its driver ended first."""
    deadline = time.monotonic() + seconds
    while not done(target.committed(), until):
        if not target.alive():
            raise DsflowError("DSF-E962", f"{what} stopped before it caught up (its driver ended; see "
                              f"{target.run_dir / 'driver.log'})")
        if time.monotonic() >= deadline:
            raise DsflowError("DSF-E961", f"{what} did not catch up within {seconds:g} s: committed "
                              f"{target.committed() or 'nothing'}, to reach {dict(until)}",
                              hint="raise --catch-up-timeout, or apply when the sources are quieter")
        time.sleep(POLL_SECONDS)


def bring_to(run: Deploying, candidate: Run, cut: dict[str, dict[str, int]]) -> None:
    """The running new version's bound moved from where it was built to the cut (its driver reads the file before
    each micro-batch), then waited for; a new version whose driver ended is started again to the cut."""
    if candidate.alive():
        moved = candidate.run_dir / UNTIL_FILE
        moved.with_suffix(".tmp").write_text(json.dumps(cut))
        moved.with_suffix(".tmp").replace(moved)
        try:
            wait(candidate, cut, run.plan.catch_up_seconds, f"{run.change.address} (to the cut)")
            return
        except DsflowError as err:
            if err.code != "DSF-E962":
                raise
    candidate.stop()
    run_to(run, run.build_project, candidate, cut)


def run_to(run: Deploying, project: Any, target: Run, cut: dict[str, dict[str, int]]) -> None:
    """Resume a version on its checkpoint, read no further than `cut`, and stop it there."""
    start(run, project, target, StartAt(until=cut))
    try:
        wait(target, cut, run.plan.catch_up_seconds, f"{run.change.address} (to the cut)")
    finally:
        target.stop()
