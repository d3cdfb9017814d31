"""The per-key work of a bounded OVER aggregation (over.py), run in Spark's Python processes: rows wait for the
watermark, then leave in event-time order, each with the aggregates over its frame. It imports neither sqlglot nor
pydantic (Spark unpickles the processor in a fresh Python process: topn_state.py says why).

A row is [t, partition, offset, row JSON, inputs JSON]: t its event time in epoch microseconds, (partition, offset)
its place in the source, which orders rows of one time (the record read first from a partition comes first), and
inputs the aggregates' arguments and FILTER results ({"__a0": x, "__f0": true, ...}). A key's state is its rows still
waiting (`pending`: their time is after the watermark) and the rows already written that a later row's frame may
still hold (`frame`): ROWS N PRECEDING keeps the last N, RANGE n PRECEDING the rows whose time is at least the
watermark minus n. A row whose time is at or before the watermark when it arrives is late and dropped (Spark drops
it first, counted as its rows dropped by the watermark; it is dropped here too, so a late row never joins a frame
already written).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal, localcontext
from itertools import groupby
from typing import Any

STATE = "pending string, frame string"
OUTPUT = "row string, aggs string"
Row = list  # [t, partition, offset, row JSON, inputs JSON]


def step(pending: list[Row], frame: list[Row], arrived: Iterable[Row], watermark_ms: int, over: dict
         ) -> tuple[list[Row], list[Row], list[tuple[str, str]]]:
    """One call for one key: the arrived rows join the pending ones (late ones dropped), the rows the watermark has
    passed leave in order with their aggregates; returns (pending, frame, [(row JSON, aggregates JSON)])."""
    watermark = watermark_ms * 1000
    pending = sorted([*pending, *(r for r in arrived if r[0] > watermark)], key=_place)
    ready = [r for r in pending if r[0] <= watermark]
    pending = pending[len(ready):]
    out: list[tuple[str, str]] = []
    if over["frame"] == "rows":
        for row in ready:
            frame = [*frame, row][-(over["preceding"] + 1):]
            out.append((row[3], aggregates(frame, over["aggregates"])))
        return pending, frame[-over["preceding"]:] if over["preceding"] else [], out
    span = over["preceding"] * 1000
    for t, peers in groupby(ready, key=lambda r: r[0]):
        group = list(peers)
        frame = [r for r in frame if r[0] >= t - span] + group
        values = aggregates(frame, over["aggregates"])
        out += [(row[3], values) for row in group]
    return pending, [r for r in frame if r[0] >= watermark - span], out


def timer_at(t: int, watermark_ms: int) -> int:
    """The timer (epoch ms) of a row waiting at `t` (epoch us): one ms before its time, which fires once the
    watermark reaches it, and never at or before the watermark now: a later batch's timer scan may start after the
    previous watermark, exclusive, and skip it (TransformWithStateExec before SPARK-56566)."""
    return max(-(-t // 1000) - 1, watermark_ms + 1)


def _place(row: Row) -> tuple[int, int, int]:
    return row[0], row[1], row[2]


def aggregates(frame: list[Row], specs: list[dict]) -> str:
    """The aggregates of a frame as JSON {"a0": text, ...} (each cast to its column's type by over.py)."""
    inputs = [json.loads(r[4], parse_float=Decimal) for r in frame]
    return json.dumps({f"a{i}": _text(_aggregate(spec, [(d.get(f"__a{i}"), d.get(f"__f{i}")) for d in inputs]))
                       for i, spec in enumerate(specs)})


def _aggregate(spec: dict, inputs: list[tuple[Any, Any]]) -> Any:
    """One aggregate over the frame's (argument, FILTER result) pairs; SQL's NULL rules (NULLs are skipped; SUM,
    AVG, MIN, MAX of nothing are NULL)."""
    function = spec["function"]
    kept = [value for value, passes in inputs if passes is not False]
    if function == "count_star":
        return len(kept)
    values = [float(v) if spec["number"] == "double" else v for v in kept if v is not None]
    if function == "count":
        return len(values)
    if function == "count_distinct":
        return len(set(values))
    if not values:
        return None
    if function == "min":
        return min(values)
    if function == "max":
        return max(values)
    total = sum(values[1:], values[0])
    if function == "sum":
        return total
    if spec["number"] == "decimal":
        with localcontext() as context:
            context.prec = 60
            return Decimal(total) / len(values)
    return float(total) / len(values)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    return repr(value) if isinstance(value, float) else str(value)


def processor(over: dict) -> Any:
    """The StatefulProcessor, keyed by the PARTITION BY values (made here: pyspark is imported only by a driver
    that needs it); `over`: {frame, preceding (rows, or ms), aggregates: [{function, number}]}."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class OverRows(StatefulProcessor):
        """Keyed by the partition key (JSON); emits (row, aggregates) per row the watermark passed."""

        def init(self, handle) -> None:
            self.handle = handle
            self.rows = handle.getValueState("rows", STATE)

        def handleInputRows(self, key, rows, timerValues):
            arrived = [[int(t), int(p), int(o), r, a] for frame in rows
                       for t, p, o, r, a in zip(frame["t"], frame["part"], frame["off"], frame["row"], frame["a"],
                                                strict=True)]
            yield self._step(arrived, timerValues.getCurrentWatermarkInMs())

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            yield self._step([], timerValues.getCurrentWatermarkInMs())

        def _step(self, arrived: list[Row], watermark_ms: int):
            import pandas as pd  # here, not when unpickled (processor)
            old = tuple(json.loads(v) for v in self.rows.get()) if self.rows.exists() else ([], [])
            pending, frame, out = step(old[0], old[1], arrived, watermark_ms, over)
            if pending or frame:
                self.rows.update((json.dumps(pending), json.dumps(frame)))
            elif self.rows.exists():
                self.rows.clear()
            if pending:  # fires once the watermark reaches the first waiting row's time (timer_at)
                self.handle.registerTimer(timer_at(pending[0][0], watermark_ms))
            return pd.DataFrame(out, columns=["row", "aggs"], dtype=object)

        def close(self) -> None:
            pass

    return OverRows()
