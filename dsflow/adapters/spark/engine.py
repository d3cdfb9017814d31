"""Spark as the engine of core/engines.py: a thin class over this folder's functions (a query's spec, its driver
process, shared applications, the parked driver's reload, the checkpoint, the warm standby, `--follow`).

The engine layer (engine/executors.py, engine/refresh.py, ...) asks `core.engines.engine()` for this object and
never imports adapters/spark itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsflow.adapters import process
from dsflow.adapters.spark import apps, checkpoint as checkpoints, reload, spec as specs, standby
from dsflow.core.address import Address
from dsflow.core.engines import Engine, Handoff, Rows, SharedApps, StartAt, Standbys


class SparkEngine:
    """Each query in a driver process of its own (`python -m dsflow.adapters.spark.driver SPEC.json`), or in a
    shared application's host (`runtime.isolation: shared`)."""

    driver_module = specs.DRIVER_MODULE

    def __init__(self) -> None:
        self.standbys: Standbys = SparkStandbys()
        self.shared: SharedApps = SparkSharedApps()

    def driver_identity(self, run_dir: str | Path | None) -> process.Identity:
        return specs.driver_identity(run_dir)

    def running_driver(self, run_dir: Path, apps_root: Path) -> dict[str, Any] | None:
        """Its own driver (known by the run folder's identity), else the live shared application under `apps_root`
        listing its spec (apps.member: the host's PID and the application's `app*` keys)."""
        try:
            spec = specs.QuerySpec.model_validate_json((run_dir / "spec.json").read_text())
        except (OSError, ValueError):
            return None
        pid = process.holder(specs.driver_identity(run_dir))
        shared = apps.member(apps_root, run_dir / "spec.json") if pid is None else {}
        if pid is None and shared is None:
            return None
        return {"name": spec.name, "pid": pid, "version": spec.version, "checkpoint": spec.checkpoint,
                "topics": [s.topic for s in spec.sources], **(shared or {})}

    def identity(self, outputs: dict[str, Any]) -> process.Identity:
        """Its shared application's host, or its own driver (a cold one or a standby that took it over)."""
        if outputs.get("app_dir"):
            return apps.host_identity(outputs["app_dir"])
        return specs.driver_identity(outputs.get("run_dir"))

    def isolation(self, project: Any, query: Any) -> str:
        return apps.isolation(project, query)

    def start(self, project: Any, apps_root: Path, query: Any, version: str, checkpoint: Path, run_dir: Path,
              start: StartAt, parked: int | None) -> dict[str, Any]:
        """The spec (secrets as environment references) written to run_dir/spec.json, then started in the parked
        driver if it takes it, else in the query's shared application or a driver of its own."""
        from dsflow.adapters.spark.translate import query_spec

        spec = query_spec(project, query, version, str(checkpoint), str(run_dir / "status.json"), start)
        spec, secrets = _secrets_to_env(spec, project)
        spec_path = run_dir / "spec.json"
        spec_path.write_text(spec.model_dump_json(indent=2))
        (run_dir / "status.json").unlink(missing_ok=True)
        shared = apps.start_shared(project, apps_root, query.fqn, spec, spec_path, secrets) \
            if apps.isolation(project, query) == "shared" else {}
        pid = shared.get("pid") or _launch_driver(run_dir, spec_path, secrets, parked)
        return {**shared, "pid": pid, "topics": [s.topic for s in spec.sources]}

    def park(self, run_dir: Path, pid: int | None, alive: Callable[[], bool], timeout: float) -> dict[str, Any] | None:
        return reload.park(run_dir, pid, alive, timeout)

    def stop(self, outputs: dict[str, Any], parked: int | None) -> None:
        if outputs.get("app_dir"):
            apps.stop_shared(outputs)  # its application's other queries go on
        elif parked is None:
            process.stop(outputs.get("pid"), specs.driver_identity(outputs.get("run_dir")))

    def relaunch(self, project: Any, deployed: Any, handoff: Handoff | None) -> int:
        """Same version, resuming from the checkpoint's last commit; the secrets it names come from the project as
        loaded now, each from the same setting of the same store (DSF-E275 when the project no longer gives one).
        With `handoff`, a warm standby driver is offered the spec first (runtime/standby.py)."""
        run_dir = Path(deployed.outputs["run_dir"])
        spec_path = run_dir / "spec.json"
        text = spec_path.read_text()
        env = _restart_secrets(project, deployed, text) if specs.ENV_REF in text else {}
        (run_dir / "status.json").unlink(missing_ok=True)
        if handoff is not None:
            pid, _ = handoff(spec_path, env, run_dir / "driver.log")
            if pid is not None:
                return pid
        return process.launch(specs.DRIVER_MODULE, [str(spec_path)], run_dir / "driver.log",
                              specs.driver_identity(run_dir), env=env)

    def start_again(self, project: Any, apps_root: Path, deployed: Any) -> dict[str, Any]:
        spec_path = Path(deployed.outputs["run_dir"]) / "spec.json"
        spec = specs.QuerySpec.model_validate_json(spec_path.read_text())
        (spec_path.parent / "status.json").unlink(missing_ok=True)
        return apps.start_shared(project, apps_root, deployed.outputs["app_query"], spec, spec_path, {})

    def start_in_micro_batches(self, project: Any, deployed: Any, version: str, checkpoint: Path,
                               start: StartAt) -> dict[str, Any]:
        """The recorded spec made a micro-batch one (realtime.py `in_micro_batches`), its sources at `start`'s
        offsets (none: where the spec started them), written over run_dir/spec.json and started in a driver."""
        from dsflow.adapters.spark.realtime import in_micro_batches

        run_dir = Path(deployed.outputs["run_dir"])
        spec_path = run_dir / "spec.json"
        text = spec_path.read_text()
        env = _restart_secrets(project, deployed, text) if specs.ENV_REF in text else {}
        query = next(q for q in project.queries if q.fqn == Address.parse(deployed.address).name)
        dlq = project.dlq_topic(query.model_copy(update={"dlq_topic": None}))  # the default: it had none
        spec = in_micro_batches(specs.QuerySpec.model_validate_json(text), dlq)
        sources = [s.model_copy(update={"starting_offsets": start.offsets[s.topic], "starting_timestamp": None})
                   if start.offsets.get(s.topic) else s for s in spec.sources]
        spec = spec.model_copy(update={"version": version, "checkpoint": str(checkpoint), "sources": sources})
        spec_path.write_text(spec.model_dump_json(indent=2))
        (run_dir / "status.json").unlink(missing_ok=True)
        return {"pid": _launch_driver(run_dir, spec_path, env, None), "topics": [s.topic for s in spec.sources]}

    def committed_offsets(self, checkpoint: Path) -> list[dict[str, Any]] | None:
        return checkpoints.committed_offsets(checkpoint)

    def last_committed_batch(self, checkpoint: Path) -> int | None:
        return checkpoints.last_committed_batch(checkpoint)

    def last_planned_batch(self, checkpoint: Path) -> int | None:
        return checkpoints.last_planned_batch(checkpoint)

    def sink_format(self, project: Any, relation: Any) -> dict[str, Any]:
        from dsflow.adapters.spark.translate import sink_format

        return sink_format(project, relation)

    def follow(self, project: Any, query: Any, on_rows: Rows, stop: threading.Event,
               on_started: Callable[[Path], None]) -> None:
        from dsflow.adapters.spark.follow import follow

        follow(project, query, on_rows, stop, on_started)

    def unit_tests(self, project: Any, tests: list[Any], on_outcome: Callable[[Any], None]) -> list[Any]:
        from dsflow.adapters.spark.unittest_run import run_tests

        return run_tests(project, tests, on_outcome)

    def state_sample(self, checkpoint: Path, limit: int) -> list[dict[str, Any]]:
        from dsflow.adapters.spark.statesample import state_sample

        return state_sample(checkpoint, limit)

    def observe_test(self, project: Any, test: Any) -> Any:
        from dsflow.adapters.spark.unittest_run import observe

        return observe(project, test)


class SparkStandbys:
    """Warm standby drivers: a driver process with its SparkSession built, waiting for a spec on its stdin
    (adapters/spark/standby.py)."""

    def start(self, folder: Path, master: str, spark_conf: dict[str, str]) -> standby.Standby:
        return standby.start(folder, master, spark_conf)

    def describe(self, root: Path) -> dict[str, Any] | None:
        return standby.describe(root)

    def stop_all(self, root: Path, timeout: float = 15.0) -> list[int]:
        return standby.stop_all(root, timeout)

    def sweep(self, root: Path) -> None:
        standby.sweep(root)

    def misfit(self, master: str, conf: dict[str, str], spec_master: str, spec_conf: dict[str, str]) -> str | None:
        return specs.misfit(master, conf, spec_master, spec_conf)

    def read_status(self, folder: Path) -> dict[str, Any]:
        return standby.read_status(folder)


class SparkSharedApps:
    """Shared applications: one host process running several queries (adapters/spark/apps.py)."""

    def host_identity(self, app_dir: str | Path) -> process.Identity:
        return apps.host_identity(app_dir)

    def failure(self, app_dir: Path, name: str) -> str | None:
        return apps.failure(app_dir, name)

    def reported(self, app_dir: Path) -> dict[str, dict[str, Any]]:
        return apps.reported(app_dir)

    def restart(self, app_dir: Path, name: str) -> bool:
        return apps.restart(app_dir, name)

    def ensure_host(self, app_dir: Path) -> int:
        return apps.ensure_host(app_dir)


def _restart_secrets(project: Any, deployed: Any, text: str) -> dict[str, str]:
    """The secrets a recorded spec (`text`) names, from the project: its query's spec made again, in clear."""
    from dsflow.adapters.spark.translate import query_spec

    recorded = specs.QuerySpec.model_validate_json(text)
    name = Address.parse(deployed.address).name
    query = next((q for q in project.queries if q.fqn == name), None) if project is not None else None
    if project is None or query is None:
        return specs.restart_env(recorded, None, [], name)  # DSF-E275: nothing gives its secrets now
    run_dir = deployed.outputs["run_dir"]
    fresh = query_spec(project, query, deployed.outputs.get("version", "v"), deployed.outputs["checkpoint"],
                       str(Path(run_dir) / "status.json"), StartAt())
    relations = [project.relation(s.relation) for s in query.sources] + [project.relation(query.sink)]
    return specs.restart_env(recorded, fresh, [r.store if r is not None and r.store else "?" for r in relations], name)


def _secrets_to_env(spec: Any, project: Any) -> tuple[Any, dict[str, str]]:
    """Secret values leave the spec file: it names environment variables the driver is started with."""
    secret_values = {v for store in project.stores for k, v in store.client_config().items()
                     if k in store.sensitive or (k == "bootstrap.servers" and "bootstrap_servers" in store.sensitive)}
    secret_values |= {v for registry in project.schema_registries for v in registry.secret_values()}
    env: dict[str, str] = {}

    def hide(config: dict[str, str]) -> dict[str, str]:
        out = {}
        for key, value in config.items():
            if value in secret_values:
                name = f"DSFLOW_SECRET_{len(env)}"
                env[name] = value
                value = f"{specs.ENV_REF}{name}"
            out[key] = value
        return out

    sources = [s.model_copy(update={"client_config": hide(s.client_config), "registry": hide(s.registry)})
               for s in spec.sources]
    sink = spec.sink.model_copy(update={"client_config": hide(spec.sink.client_config),
                                        "registry": hide(spec.sink.registry)})
    return spec.model_copy(update={"sources": sources, "sink": sink}), env


def _launch_driver(run_dir: Path, spec_path: Path, secrets: dict[str, str], parked: int | None) -> int:
    """The new version's driver: the parked one if it runs the spec, else a cold one (the parked one, refusing,
    exits)."""
    identity = specs.driver_identity(run_dir)
    if parked is not None:
        if reload.resume(run_dir, parked, spec_path, secrets, lambda: process.is_running(parked, identity)) is None:
            return parked
        process.stop(parked, identity)
    return process.launch(specs.DRIVER_MODULE, [str(spec_path)], run_dir / "driver.log", identity, env=secrets)


ENGINE: Engine = SparkEngine()  # mypy checks it has every member of the protocol
