"""Start, stop and describe an environment's runtime supervisor: `dsflow runtime up|down|status`, and the start
apply asks for (`ensure_started`).

The supervisor writes `supervisor.json` (its PID and metrics port) in the environment's run folder once it serves,
and logs to `supervisor.log` beside it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from dsflow.adapters import process
from dsflow.errors import DsflowError
from dsflow.engine.operations import Loaded, Options
from dsflow.runtime.supervisor import INFO_FILE, LOG_FILE, MODULE, TICK_ENV, VARS_ENV

DISABLE_ENV = "DSFLOW_RUNTIME"
"""Set to 'off' (or 0/false/no) and apply does not start the supervisor (the test suite sets it)."""
START_TIMEOUT_SECONDS = 30.0


def info(loaded: Loaded) -> dict[str, Any] | None:
    """The running supervisor's record (pid, port, started_at), or None when none runs."""
    path = loaded.workspace.run_dir / INFO_FILE
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if process.is_running(found.get("pid"), _marker(loaded)) else None


def _marker(loaded: Loaded) -> tuple[str, str]:
    """The supervisor's module and this project's folder: another project's supervisor on a reused PID differs."""
    return MODULE, str(Path(loaded.project.root).resolve())


def disabled_by_env() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() in ("off", "0", "false", "no")


def up(loaded: Loaded, options: Options, port: int = 0, auto: bool = False) -> tuple[dict[str, Any], bool]:
    """Start the supervisor detached unless one runs; its record, and True if this call started it."""
    running = info(loaded)
    if running is not None:
        return running, False
    run_dir = loaded.workspace.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / INFO_FILE).unlink(missing_ok=True)
    args = ["--project-dir", str(Path(options.project_dir).resolve()), "--env", loaded.project.environment,
            "--port", str(port)] + (["--auto"] if auto else [])
    env = {VARS_ENV: json.dumps(dict(options.variables or {}))}
    if os.environ.get(TICK_ENV):
        env[TICK_ENV] = os.environ[TICK_ENV]
    pid = process.launch(MODULE, args, run_dir / LOG_FILE, env=env)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        found = info(loaded)
        if found is not None and found.get("pid") == pid:
            return found, True
        if not process.is_running(pid, _marker(loaded)):
            break
        time.sleep(0.1)
    process.stop(pid, _marker(loaded), timeout=5)
    raise DsflowError("DSF-E270", f"the runtime supervisor did not start (pid {pid}): "
                      f"{_log_tail(run_dir / LOG_FILE) or 'no output'}",
                      hint=f"see {run_dir / LOG_FILE}; a port given with --port may be taken")


def down(loaded: Loaded) -> int | None:
    """Stop the supervisor (the queries keep running) and its standby driver; its PID, or None if none ran."""
    from dsflow.adapters.spark import standby

    running = info(loaded)
    if running is not None:
        process.stop(running["pid"], _marker(loaded), timeout=30)  # it stops its standby on its way out
    standby.stop_all(standby_root(loaded))  # one a killed supervisor left (it would end with its pipe anyway)
    return running["pid"] if running else None


def standby_root(loaded: Loaded) -> Path:
    """Where the supervisor keeps its standby drivers (runtime/standby.py)."""
    return loaded.workspace.run_dir / "standby"


def standby_info(loaded: Loaded) -> dict[str, Any]:
    """What `dsflow runtime status` shows of the standby: the setting, and the waiting standby (PID, state,
    master, ready since, RSS with its JVM and Python workers) or None."""
    from dsflow.adapters.spark import standby

    from dsflow.runtime.standby import RECORD_FILE

    try:
        kept = json.loads((standby_root(loaded) / RECORD_FILE).read_text())
    except (OSError, ValueError):
        kept = {}
    return {"enabled": loaded.project.runtime.standby, "standby": standby.describe(standby_root(loaded)),
            "standby_keeper": {k: kept.get(k) for k in ("note", "failures", "last_error", "handoffs", "last_handoff")}
            if info(loaded) is not None else None}


def ensure_started(loaded: Loaded, options: Options) -> tuple[dict[str, Any], bool] | None:
    """What apply calls after applying: start the supervisor when the environment runs queries or generators and
    none runs; None when DSFLOW_RUNTIME=off or nothing is deployed."""
    from dsflow.runtime.supervisor import supervised

    if disabled_by_env() or not supervised(loaded.workspace.state_backend().read()):
        return None
    return up(loaded, options, auto=True)


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])
