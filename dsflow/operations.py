"""The thin facade the CLI calls: load, plan, apply, destroy and status for one environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsflow.adapters import process
from dsflow.apply import ApplyResult, apply_plan
from dsflow.core.address import Address, Kind
from dsflow.core.graph import Graph
from dsflow.core.model import Project
from dsflow.core.plan import Plan, make_plan
from dsflow.core.resources import project_resources
from dsflow.executors import DATAGEN_MODULE, DRIVER_MODULE
from dsflow.load.project import load_project
from dsflow.refresh import query_status, refresh
from dsflow.workspace import Workspace


@dataclass(frozen=True)
class Options:
    """Which project and environment a command works on."""

    project_dir: Path
    environment: str | None = None
    variables: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Loaded:
    project: Project
    workspace: Workspace


def load(options: Options) -> Loaded:
    project = load_project(options.project_dir, options.environment, options.variables)
    return Loaded(project, Workspace.of(project))


def resource_graph(project: Project) -> Graph:
    return Graph.from_dependencies({r.address: r.depends_on for r in project_resources(project)})


def plan(loaded: Loaded, destroy: bool = False, do_refresh: bool = True) -> Plan:
    state = loaded.workspace.state_backend().read()
    observations = refresh(state) if do_refresh and not destroy else {}
    return make_plan(loaded.project.name, loaded.project.environment, project_resources(loaded.project), state,
                     observations, destroy=destroy)


def apply(loaded: Loaded, the_plan: Plan, on_event=lambda *_: None) -> ApplyResult:
    return apply_plan(the_plan, loaded.project, loaded.workspace, on_event)


def status(loaded: Loaded) -> list[dict[str, Any]]:
    """Every deployed query and generator, with what its process and status file say now."""
    state = loaded.workspace.state_backend().read()
    entries = []
    for key, deployed in sorted(state.resources.items()):
        kind = Address.parse(key).kind
        if kind is Kind.QUERY:
            info = query_status(deployed)
            running = process.is_running(deployed.outputs.get("pid"), DRIVER_MODULE)
            state_name = info.get("state", "unknown")
            if not running and state_name in ("running", "starting", "unknown"):
                state_name = "stopped"
            entries.append({**info, "address": key, "state": state_name, "pid": deployed.outputs.get("pid")})
        elif kind is Kind.DATAGEN:
            running = process.is_running(deployed.outputs.get("pid"), DATAGEN_MODULE)
            entries.append({"address": key, "state": "running" if running else "stopped",
                            "pid": deployed.outputs.get("pid")})
    return entries
