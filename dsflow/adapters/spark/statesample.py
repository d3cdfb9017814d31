"""A query's state as its checkpoint holds it after its last committed batch, read with Spark's state data source
(`state-metadata` for the stateful operators, `statestore` for their rows): per operator its rows, the bytes its
state files take on disk, and a sample of keys and values (`dsflow describe QUERY --state-sample N`). Read in a
Spark session of this process; the running query is not disturbed (committed state files are not rewritten)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsflow.adapters.spark.session import borrowed_session

JOIN_SIDES = ("left", "right")
"""A stream-stream join keeps one state per side, read one side at a time."""


def state_sample(checkpoint: Path, limit: int, master: str = "local[2]") -> list[dict[str, Any]]:
    """One entry per stateful operator: operator id and name, store, partitions, the last committed batch, rows,
    bytes on disk, up to `limit` rows {key, value}; an operator whose state cannot be read this way says why
    (`error`). [] for a stateless query or a checkpoint without state."""
    if not (checkpoint / "state").is_dir():
        return []
    with borrowed_session(master, "dsflow:describe") as spark:
        operators = [row.asDict() for row in spark.read.format("state-metadata").load(str(checkpoint)).collect()]
        return [_operator(spark, checkpoint, op, limit) for op in sorted(operators, key=lambda o: o["operatorId"])]


def _operator(spark: Any, checkpoint: Path, operator: dict[str, Any], limit: int) -> dict[str, Any]:
    number = int(operator["operatorId"])
    found: dict[str, Any] = {"operator_id": number, "operator": operator.get("operatorName"),
                             "store": operator.get("stateStoreName"), "partitions": operator.get("numPartitions"),
                             "batch": operator.get("maxBatchId"), "disk_bytes": _disk_bytes(checkpoint, number)}
    rows, sample = 0, list[dict[str, Any]]()
    try:
        for part, options in _parts(operator):
            reader = spark.read.format("statestore").option("operatorId", number)
            for key, value in options.items():
                reader = reader.option(key, value)
            frame = reader.load(str(checkpoint))
            rows += frame.count()
            sample += [_row(r, part) for r in frame.limit(max(0, limit - len(sample))).collect()]
    except Exception as err:  # noqa: BLE001 - an operator the state data source cannot read
        from dsflow.adapters.spark.driver import error_summary

        return {**found, "error": error_summary(err)}
    return {**found, "rows": rows, "sample": sample}


def _parts(operator: dict[str, Any]) -> list[tuple[str | None, dict[str, str]]]:
    """How the operator's state is read, one part at a time: a stream-stream join's two sides, a transformWithState
    operator's state variables (named in its metadata's properties), else its one store."""
    import json

    name = str(operator.get("operatorName") or "").lower()
    if "join" in name and "transformwithstate" not in name:
        return [(side, {"joinSide": side}) for side in JOIN_SIDES]
    try:
        properties = json.loads(operator.get("operatorProperties") or "{}")
    except ValueError:
        properties = {}
    variables = [v.get("stateName") for v in properties.get("stateVariables") or [] if v.get("stateName")]
    if variables:
        return [(f"variable {v}", {"stateVarName": v}) for v in variables]
    return [(None, {"storeName": operator.get("stateStoreName") or "default"})]


def _row(row: Any, part: str | None) -> dict[str, Any]:
    plain = row.asDict(recursive=True)
    shown = {k: v for k, v in plain.items() if k != "partition_id"}
    return {**shown, **({"part": part} if part else {})}


def _disk_bytes(checkpoint: Path, operator: int) -> int:
    folder = checkpoint / "state" / str(operator)
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0
