"""Start, stop, describe and ask an environment's runtime supervisor: `dsflow runtime up|down|status`, the start
apply asks for (`ensure_started`), and the look at the new state apply and destroy ask for (`look_now`).

The supervisor writes `supervisor.json` (its PID and endpoint port) in the environment's run folder once it
serves, its token beside it (`supervisor.token`, runtime/endpoint.py), and logs to `supervisor.log`.
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
from dsflow.runtime.endpoint import LOOK_WAIT_SECONDS, read_token
from dsflow.runtime.supervisor import INFO_FILE, LOG_FILE, MODULE, TICK_ENV, VARS_ENV, supervisor_identity

DISABLE_ENV = "DSFLOW_RUNTIME"
"""Set to 'off' (or 0/false/no) and apply does not start the supervisor (the test suite sets it)."""
START_TIMEOUT_SECONDS = 30.0
ASK_TIMEOUT_SECONDS = 5.0


def info(loaded: Loaded) -> dict[str, Any] | None:
    """The running supervisor's record (pid, port, started_at), or None when none runs."""
    path = loaded.workspace.run_dir / INFO_FILE
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if process.is_running(found.get("pid"), _identity(loaded)) else None


def _identity(loaded: Loaded) -> process.Identity:
    """The supervisor's identity, in this environment's run folder (a reused PID is not it)."""
    return supervisor_identity(loaded.workspace.run_dir, Path(loaded.project.root))


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
    args, env = supervisor_command(loaded, options, port, auto)
    pid = process.launch(MODULE, args, run_dir / LOG_FILE, _identity(loaded), env=env)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        found = info(loaded)
        if found is not None and found.get("pid") == pid:
            return found, True
        if not process.is_running(pid, _identity(loaded)):
            break
        time.sleep(0.1)
    process.stop(pid, _identity(loaded), timeout=5)
    raise DsflowError("DSF-E270", f"the runtime supervisor did not start (pid {pid}): "
                      f"{_log_tail(run_dir / LOG_FILE) or 'no output'}",
                      hint=f"see {run_dir / LOG_FILE}; a port given with --port may be taken")


def supervisor_command(loaded: Loaded, options: Options, port: int = 0,
                       auto: bool = False) -> tuple[list[str], dict[str, str]]:
    """The supervisor's arguments (after `python -m MODULE`) and the environment it adds."""
    args = ["--project-dir", str(Path(options.project_dir).resolve()), "--env", loaded.project.environment,
            "--port", str(port)] + (["--auto"] if auto else [])
    env = {VARS_ENV: json.dumps(dict(options.variables or {}))}
    if os.environ.get(TICK_ENV):
        env[TICK_ENV] = os.environ[TICK_ENV]
    return args, env


def run_in_foreground(loaded: Loaded, options: Options, port: int = 0) -> None:
    """Become the supervisor (exec: same PID, its log on this process's stdout) until SIGTERM or SIGINT: for a
    systemd unit or a container's entrypoint. DSF-E270 when one runs already for this environment."""
    import sys

    running = info(loaded)
    if running is not None:
        raise DsflowError("DSF-E270", f"a runtime supervisor runs already for this environment (pid {running['pid']})",
                          hint="stop it first ('dsflow runtime down'): one supervisor per environment")
    args, env = supervisor_command(loaded, options, port)
    loaded.workspace.run_dir.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", MODULE, *args],
              {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"), **env})


def down(loaded: Loaded) -> int | None:
    """Stop the supervisor (the queries keep running) and its standby driver; its PID, or None if none ran."""
    from dsflow.core.engines import engine

    running = info(loaded)
    if running is not None:
        process.stop(running["pid"], _identity(loaded), timeout=30)  # it stops its standby on its way out
    engine().standbys.stop_all(standby_root(loaded))  # one a killed supervisor left (it would end with its pipe anyway)
    return running["pid"] if running else None


def standby_root(loaded: Loaded) -> Path:
    """Where the supervisor keeps its standby drivers (runtime/standby.py)."""
    return loaded.workspace.run_dir / "standby"


def standby_info(loaded: Loaded) -> dict[str, Any]:
    """What `dsflow runtime status` shows of the standby: the setting, and the waiting standby (PID, state,
    master, ready since, RSS with its JVM and Python workers) or None."""
    from dsflow.core.engines import engine
    from dsflow.runtime.standby import RECORD_FILE

    try:
        kept = json.loads((standby_root(loaded) / RECORD_FILE).read_text())
    except (OSError, ValueError):
        kept = {}
    return {"enabled": loaded.project.runtime.standby, "standby": engine().standbys.describe(standby_root(loaded)),
            "standby_keeper": {k: kept.get(k) for k in ("note", "failures", "last_error", "handoffs", "last_handoff")}
            if info(loaded) is not None else None}


def ensure_started(loaded: Loaded, options: Options) -> tuple[dict[str, Any], bool] | None:
    """What apply calls after applying: start the supervisor when the environment runs queries or generators and
    none runs; None when DSFLOW_RUNTIME=off or nothing is deployed."""
    from dsflow.runtime.supervisor import supervised

    if disabled_by_env() or not supervised(loaded.workspace.state_backend().read()):
        return None
    return up(loaded, options, auto=True)


def ask(loaded: Loaded, path: str, method: str = "GET", timeout: float = ASK_TIMEOUT_SECONDS) -> dict[str, Any]:
    """One request to the running supervisor's endpoint (runtime/endpoint.py) with its token; its JSON answer.
    DSF-E273 when none runs or it cannot be asked."""
    import urllib.error
    import urllib.request

    running = info(loaded)
    if running is None:
        raise DsflowError("DSF-E273", "no runtime supervisor runs for this environment",
                          hint="start one with 'dsflow runtime up'")
    token = read_token(loaded.workspace.run_dir)
    url = f"http://127.0.0.1:{running['port']}{path}"
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None,
                                     headers={"Authorization": f"Bearer {token or ''}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as err:
        detail = err.read().decode(errors="replace")[:300]
        raise DsflowError("DSF-E273", f"the runtime supervisor (pid {running['pid']}) refused {method} {path}: "
                          f"HTTP {err.code} {detail}", hint=f"its token file: {loaded.workspace.run_dir}/"
                          "supervisor.token (written at its start; readable by its owner only)") from None
    except (OSError, ValueError) as err:
        raise DsflowError("DSF-E273", f"the runtime supervisor (pid {running['pid']}) did not answer {method} "
                          f"{url}: {err}", hint=f"see {loaded.workspace.run_dir / LOG_FILE}") from None


def look_now(loaded: Loaded, by: str) -> dict[str, Any]:
    """Ask the running supervisor to look at the state at once (after apply or destroy changed it), not at its
    next tick; its answer once that look ended (`looked`, `looks`). DSF-E273 when it cannot be asked."""
    from urllib.parse import urlencode

    return ask(loaded, f"/v1/look?{urlencode({'by': by})}", method="POST", timeout=LOOK_WAIT_SECONDS + 5)


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])
