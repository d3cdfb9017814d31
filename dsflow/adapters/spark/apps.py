"""Shared Spark applications (`runtime.isolation: shared`): the control side, used by apply and the supervisor.

An application is a folder under the environment's run folder (`apps/<app>/`) and one long-running host process
(adapters/spark/host.py) that runs its queries, each in its own SparkSession. The control channel is a file:

    app.json      the application's Spark master and conf (queries with the same ones share an application)
    queries.json  what should run: {"queries": {name: {"spec": path, "generation": n}}}, written under `lock`
    host.pid      the host process dsflow started (several queries share this PID)
    host.process.json, host.process.lock   its identity (adapters/process.py): PID, start time, the lock it holds
    host.json     what the host reports: per query its generation, state, Spark query id, run id, start, error
    host.log      the host's output

The host polls queries.json: a query added is started, one removed is stopped between two micro-batches, one
whose generation grew is restarted from its checkpoint (the supervisor's restart after a failure). The others are
not touched. A host killed whole is started again by the supervisor and starts every query queries.json lists.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsflow.adapters import process
from dsflow.errors import DsflowError

HOST_MODULE = "dsflow.adapters.spark.host"
QUERIES_FILE = "queries.json"
HOST_FILE = "host.json"
STOP_WAIT_SECONDS = 60.0


def host_identity(app_dir: str | Path) -> process.Identity:
    """The identity of an application's host process (adapters/process.py), kept in its folder."""
    return process.Identity(Path(app_dir), "host", (HOST_MODULE, str(Path(app_dir) / QUERIES_FILE)))


def app_key(master: str, spark_conf: dict[str, str]) -> str:
    """Queries with the same master and Spark conf may share an application."""
    text = json.dumps({"master": master, "conf": spark_conf}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def read_json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: the host and status read these files at any moment."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """One writer of an application folder (or of the apps root, while placing) at a time: apply, the supervisor."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def desired(app_dir: Path) -> dict[str, dict[str, Any]]:
    """The queries the application should run: {name: {"spec": path, "generation": n}}."""
    return dict(read_json(app_dir / QUERIES_FILE).get("queries") or {})


def reported(app_dir: Path) -> dict[str, dict[str, Any]]:
    """What the host last reported of each query it runs or ran."""
    return dict(read_json(app_dir / HOST_FILE).get("queries") or {})


def place(apps_root: Path, name: str, master: str, spark_conf: dict[str, str], limit: int,
          batches_at_once: int | None = None) -> Path:
    """The application a query starts in: the one already listing it, else the first with the same master and conf
    and fewer than `limit` queries, else a new one. Its app.json takes `batches_at_once` (host.py reads it)."""
    key = app_key(master, spark_conf)
    with locked(apps_root):
        folders = sorted((p for p in apps_root.glob("app-*") if p.is_dir()), key=lambda p: int(p.name[4:]))
        chosen = next((f for f in folders if read_json(f / "app.json").get("key") == key and name in desired(f)),
                      None) or next((f for f in folders if read_json(f / "app.json").get("key") == key
                                     and len(desired(f)) < limit), None)
        if chosen is None:
            number = max((int(p.name[4:]) for p in folders), default=0) + 1
            chosen = apps_root / f"app-{number}"
            chosen.mkdir(parents=True)
            write_json(chosen / QUERIES_FILE, {"queries": {}})
        app = {"key": key, "master": master, "spark_conf": spark_conf, "batches_at_once": batches_at_once}
        if read_json(chosen / "app.json") != app:
            write_json(chosen / "app.json", app)
        return chosen


def add(app_dir: Path, name: str, spec_path: Path) -> int:
    """List the query in its application (a new generation) and make sure the host runs; the host's PID."""
    with locked(app_dir):
        queries = desired(app_dir)
        generation = int((queries.get(name) or {}).get("generation", 0)) + 1
        queries[name] = {"spec": str(spec_path), "generation": generation}
        write_json(app_dir / QUERIES_FILE, {"queries": queries})
        return _ensure_host(app_dir)


def restart(app_dir: Path, name: str) -> bool:
    """Ask the host to start the query again from its checkpoint (a failed one); False if it is not listed."""
    with locked(app_dir):
        queries = desired(app_dir)
        if name not in queries:
            return False
        queries[name] = {**queries[name], "generation": int(queries[name].get("generation", 0)) + 1}
        write_json(app_dir / QUERIES_FILE, {"queries": queries})
        return True


def remove(app_dir: Path, name: str, wait: float = STOP_WAIT_SECONDS) -> None:
    """Stop one query and wait until the host reports it stopped; the last query stops the host (DSF-E282)."""
    with locked(app_dir):
        queries = desired(app_dir)
        queries.pop(name, None)
        write_json(app_dir / QUERIES_FILE, {"queries": queries})
        pid = host_pid(app_dir)
        if not queries:
            process.stop(pid, host_identity(app_dir), timeout=wait)
            return
    deadline = time.monotonic() + wait
    while process.is_running(pid, host_identity(app_dir)) and name in reported(app_dir):
        if time.monotonic() >= deadline:
            raise DsflowError("DSF-E282", f"the shared Spark application {app_dir.name} did not stop query "
                              f"'{name}' within {wait:.0f} s", hint=f"see {app_dir / 'host.log'}")
        time.sleep(0.1)


def ensure_host(app_dir: Path) -> int:
    """The running host's PID, starting one if none runs (the supervisor's restart of a killed host)."""
    with locked(app_dir):
        return _ensure_host(app_dir)


def host_pid(app_dir: Path) -> int | None:
    try:
        return int((app_dir / "host.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _ensure_host(app_dir: Path) -> int:
    pid = host_pid(app_dir)
    if pid is not None and process.is_running(pid, host_identity(app_dir)):
        return pid
    (app_dir / HOST_FILE).unlink(missing_ok=True)
    pid = process.launch(HOST_MODULE, [str(app_dir / QUERIES_FILE)], app_dir / "host.log", host_identity(app_dir))
    (app_dir / "host.pid").write_text(str(pid))
    return pid


def failure(app_dir: Path, name: str) -> str | None:
    """The error of a query the host reports failed in its current generation (one not yet restarted), or None."""
    wanted = desired(app_dir).get(name)
    seen = reported(app_dir).get(name)
    if not wanted or not seen or seen.get("state") != "failed":
        return None
    if int(seen.get("generation", -1)) != int(wanted.get("generation", 0)):
        return None
    return str(seen.get("error") or "failed")


def member(apps_root: Path, spec_path: Path) -> dict[str, Any] | None:
    """The live shared application under `apps_root` that runs the query whose spec is `spec_path` (an import of a
    running query, core/imports.py): {"app", "app_dir", "app_query", "pid"} (the host's PID, known by its identity).
    None when no application lists that spec, or its host is gone, or the host does not report the query running in
    the generation listed (failed, stopped, not yet started)."""
    target = spec_path.resolve()
    for app_dir in sorted(p for p in apps_root.glob("app-*") if p.is_dir()):
        for name, entry in desired(app_dir).items():
            if not entry.get("spec") or Path(entry["spec"]).resolve() != target:
                continue
            pid = process.holder(host_identity(app_dir))
            report = read_json(app_dir / HOST_FILE)
            seen = (report.get("queries") or {}).get(name) or {}
            live = pid is not None and report.get("pid") == pid and seen.get("state") in ("running", "starting") \
                and int(seen.get("generation", -1)) == int(entry.get("generation", 0))
            return {"app": app_dir.name, "app_dir": str(app_dir), "app_query": name, "pid": pid} if live else None
    return None


def isolation(project, query) -> str:
    """Where a query runs: its own 'runtime.isolation', else the project's runtime.isolation."""
    return query.isolation or project.runtime.isolation


def start_shared(project, apps_root: Path, name: str, spec, spec_path: Path, secrets: dict[str, str]) -> dict[str, Any]:
    """Add a query to a shared application (DSF-E281 when it needs secrets); the outputs apply records."""
    if secrets:
        raise DsflowError("DSF-E281", f"query '{name}' cannot run in a shared Spark application: its stores or "
                          "schema registries have secret settings, which dsflow gives a driver only at its start",
                          hint="add 'runtime.isolation' = 'query' to its WITH clause")
    app_dir = place(apps_root, name, spec.master, dict(spec.spark_conf), project.runtime.queries_per_app,
                    project.runtime.batches_at_once)
    pid = add(app_dir, name, spec_path)
    return {"pid": pid, "app": app_dir.name, "app_dir": str(app_dir), "app_query": name}


def stop_shared(outputs: dict[str, Any]) -> None:
    """Stop a query of a shared application, leaving the others running."""
    remove(Path(outputs["app_dir"]), outputs["app_query"])
