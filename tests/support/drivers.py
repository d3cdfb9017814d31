"""Which run of each deployed query is running: a restart in the query's own driver keeps its PID
(adapters/spark/reload.py), so a restart shows as a new Spark run id in the query's status file."""

from __future__ import annotations

import json
from pathlib import Path

from dsflow.engine import operations


def runs(options: operations.Options) -> dict[str, tuple[int, str | None]]:
    """{query or generator address: (PID, the Spark run id its status file names, None if it names none)}."""
    state = operations.load(options).workspace.state_backend().read()
    return {address: (deployed.outputs["pid"], _run_id(deployed.outputs.get("run_dir")))
            for address, deployed in state.resources.items() if "pid" in deployed.outputs}


def _run_id(run_dir: str | None) -> str | None:
    try:
        return json.loads((Path(run_dir) / "status.json").read_text()).get("run_id") if run_dir else None
    except (OSError, ValueError):
        return None
