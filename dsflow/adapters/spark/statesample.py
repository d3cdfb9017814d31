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
    sides = JOIN_SIDES if "join" in str(operator.get("operatorName") or "").lower() else (None,)
    rows, sample = 0, list[dict[str, Any]]()
    try:
        for side in sides:
            reader = spark.read.format("statestore").option("operatorId", number)
            reader = reader.option("joinSide", side) if side else \
                reader.option("storeName", operator.get("stateStoreName") or "default")
            frame = reader.load(str(checkpoint))
            rows += frame.count()
            sample += [_row(r, side) for r in frame.limit(max(0, limit - len(sample))).collect()]
    except Exception as err:  # noqa: BLE001 - an operator the state data source cannot read (say, per state variable)
        from dsflow.adapters.spark.driver import error_summary

        return {**found, "error": error_summary(err)}
    return {**found, "rows": rows, "sample": sample}


def _row(row: Any, side: str | None) -> dict[str, Any]:
    plain = row.asDict(recursive=True)
    return {"key": plain.get("key"), "value": plain.get("value"), **({"side": side} if side else {})}


def _disk_bytes(checkpoint: Path, operator: int) -> int:
    folder = checkpoint / "state" / str(operator)
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0
