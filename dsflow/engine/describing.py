"""`dsflow describe QUERY`: a deployed query as it runs, from the state, its checkpoint and its driver's status file:
its SQL and version, its sources with the offsets its last committed batch ended at, its watermark and the size of
its state (rows, bytes) after its last batch. Nothing is asked of the stores; Spark only for `--state-sample N`,
which reads the checkpoint's state (its rows per operator and a sample of them) with Spark's state data source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dsflow.core.state import State
from dsflow.errors import DsflowError

STATUS_FIELDS = ("state", "batch_id", "watermark", "state_rows", "state_bytes", "num_input_rows",
                 "processed_rows_per_second", "last_progress_at", "run_id")
"""What the driver's status file says that describe shows (adapters/spark/driver.py `progress_status`)."""


def describe(state: State, address: str, sample: int = 0) -> dict[str, Any]:
    """The deployed query at `address`, described (DSF-E431 when the state has no such query); with `sample`, its
    state read from its checkpoint by the engine: per stateful operator its rows and up to `sample` of them."""
    from dsflow.core.engines import engine
    from dsflow.engine.refresh import query_status

    deployed = state.resources.get(address)
    if deployed is None or not address.startswith("query."):
        raise DsflowError("DSF-E431", f"{address} is not deployed: nothing runs to describe",
                          hint="'dsflow apply' deploys it; 'dsflow history' lists versions that ran before")
    checkpoint = Path(deployed.outputs.get("checkpoint") or "")
    there = bool(deployed.outputs.get("checkpoint")) and checkpoint.is_dir()
    committed = (engine().committed_offsets(checkpoint) if there else None) or []
    logs = list(deployed.outputs.get("topics") or [])
    sources = []
    for index, source in enumerate(deployed.data.get("sources") or []):
        log = logs[index] if index < len(logs) else source[1] if len(source) > 1 else None
        sources.append({"relation": source[0], "log": log, "start": source[2] if len(source) > 2 else None,
                        "committed_offsets": committed[index] if index < len(committed) else None})
    current = next((e for e in reversed(state.history(address))), None)
    status = query_status(deployed)
    return {
        "address": address, "version": deployed.outputs.get("version") or deployed.data_hash,
        "started_at": current.started_at if current else None, "category": current.category if current else None,
        "paused": bool(deployed.outputs.get("paused")), "sink": deployed.data.get("sink"),
        "sql": deployed.data.get("select"), "sources": sources,
        "checkpoint": str(checkpoint) if deployed.outputs.get("checkpoint") else None,
        "last_committed_batch": engine().last_committed_batch(checkpoint) if there else None,
        "status": {key: status.get(key) for key in STATUS_FIELDS},
        **({"state": engine().state_sample(checkpoint, sample) if there else []} if sample else {}),
    }


def describe_text(described: dict[str, Any]) -> str:
    """The description as labelled lines (pure)."""
    status = described["status"]
    lines = [f"{described['address']}  (version {described['version']}"
             + (f", {described['category']} since {described['started_at']}" if described["started_at"] else "")
             + (", paused" if described["paused"] else "") + ")",
             f"  sink: {described['sink']}", f"  sql: {' '.join(str(described['sql'] or '-').split())}",
             f"  checkpoint: {described['checkpoint'] or '-'} (last committed batch "
             f"{'-' if described['last_committed_batch'] is None else described['last_committed_batch']})"]
    for source in described["sources"]:
        offsets = source["committed_offsets"]
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(offsets.items())) if offsets else "nothing committed yet"
        lines.append(f"  source {source['relation']} ({source['log'] or '-'}): {shown}")
    rows, held = status.get("state_rows"), status.get("state_bytes") or 0
    size = "- (stateless, or no batch yet)" if rows is None else f"{rows:,} rows, {held:,} bytes"
    lines += [f"  state: {status.get('state') or 'no status yet'}; batch {status.get('batch_id', '-')}",
              f"  watermark: {status.get('watermark') or '-'}", f"  state store: {size}"]
    for operator in described.get("state") or []:
        lines += _operator_lines(operator)
    if "state" in described and not described["state"]:
        lines.append("  state sample: none (a stateless query, or no batch committed yet)")
    return "\n".join(lines)


def _operator_lines(operator: dict[str, Any]) -> list[str]:
    """A stateful operator of the state sample: what it is, its rows and bytes, then its sample rows."""
    title = (f"  state of operator {operator['operator_id']} ({operator.get('operator') or '-'}, store "
             f"{operator.get('store') or '-'}, {operator.get('partitions') or '-'} partitions, batch "
             f"{operator.get('batch')}, {operator.get('disk_bytes', 0):,} bytes on disk)")
    if operator.get("error"):
        return [title, f"    not readable as key and value rows: {operator['error']}"]
    shown = [f"    {json.dumps(row, default=str)}" for row in operator.get("sample") or []]
    return [f"{title}: {operator.get('rows', 0):,} rows", *shown]
