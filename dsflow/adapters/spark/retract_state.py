"""The per-row work of a retracting aggregation (retract.py), run in Spark's Python processes: stage 1's per-key
changes, stage 2's per-group accumulators, and the two StatefulProcessors. It imports neither sqlglot nor
pydantic: Spark starts a fresh Python process per stateful operator whenever a query starts (to learn its state
schema) and unpickling the processors imports this module there (docs/testing.md, "Where a stateful test's time
goes")."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
STAGE1_STATE = "g string, a string"
STAGE2_STATE = "acc string"
MULTISETS = ("min", "max", "count_distinct", "max_by", "min_by")
BY = ("max_by", "min_by")
TOUCH = ("{}", 0, "{}")
"""Stage 1's change of a global aggregate's group (its key is GLOBAL_KEY of sql/aggregates.py, "{}") when a key's
batch changed nothing: emit the row anyway."""


# --- stage 1: per source key, the change of its row as (-old, +new) -------------------------------------------


def key_changes(old: list | None, rows: Iterable[tuple], touch: bool = False) -> tuple[list | None, list[tuple]]:
    """One key's micro-batch: rows of (offset, keep, group JSON, inputs JSON) -> (the key's new state
    [group, inputs] or None, the changes (group, sign, inputs) to apply to the groups). `touch` (a global
    aggregate): a batch that changes nothing gives TOUCH, so the one row is emitted."""
    last = max(rows, key=lambda r: r[0], default=None)
    if last is None:
        return old, []
    new = [last[2], last[3]] if last[1] else None
    if new == old:
        return old, [TOUCH] if touch else []
    out = [(old[0], -1, old[1])] if old is not None else []
    if new is not None:
        out.append((new[0], 1, new[1]))
    return new, out


# --- stage 2: per group, the aggregates' state and the group's row ---------------------------------------------


def empty_accumulator(kinds: list[str]) -> dict:
    return {"n": 0, "v": [{} if kind in MULTISETS else [0, 0] for kind in kinds]}


def apply_changes(acc: dict, kinds: list[str], changes: Iterable[tuple[int, dict]]) -> dict:
    """Add (+1) or retract (-1) rows' aggregate inputs ({__a<i>: value}, nulls absent) to a group's state."""
    for sign, inputs in changes:
        acc["n"] += sign
        for index, kind in enumerate(kinds):
            value = inputs.get(f"__a{index}")
            if value is None or kind == "count_star":
                continue
            slot = acc["v"][index]
            if kind in MULTISETS:
                text = json.dumps([value["o"], value.get("v")] if kind in BY else value)
                slot[text] = slot.get(text, 0) + sign
                if slot[text] == 0:
                    del slot[text]
            else:
                slot[0] += sign * value if kind in ("sum", "avg") else 0
                slot[1] += sign
    return acc


def group_row(acc: dict, kinds: list[str], existed: bool, global_: bool) -> tuple[dict | None, tuple | None]:
    """A group's state after a batch -> (the state to keep or None, the row to emit (keep, results) or None).
    A group left without rows is deleted (keep false), except a global aggregate's: it becomes SQL's answer over
    an empty table (COUNT 0, the others NULL), and is kept."""
    if acc["n"] > 0 or global_:
        return acc, (True, results(acc, kinds))
    return None, (False, None) if existed else None


def results(acc: dict, kinds: list[str]) -> dict[str, Any]:
    """The group's aggregates {__r<i>: value} from its state (None where no non-null value is left)."""
    out: dict[str, Any] = {}
    for index, kind in enumerate(kinds):
        slot = acc["v"][index]
        if kind == "count_star":
            value: Any = acc["n"]
        elif kind == "count_distinct":
            value = len(slot)
        elif kind in ("min", "max"):
            values = [json.loads(t) for t in slot]
            value = (min if kind == "min" else max)(values) if values else None
        elif kind in BY:
            value = by_result(slot, kind)
        elif kind == "count":
            value = slot[1]
        else:
            value = None if slot[1] == 0 else slot[0] if kind == "sum" else slot[0] / slot[1]
        out[f"__r{index}"] = value
    return out


def by_result(pairs: dict[str, int], kind: str) -> Any:
    """MAX_BY/MIN_BY from the multiset of its [ordering, value] pairs (JSON): the value of the highest (lowest)
    ordering; of tied orderings, the pair first kept (Spark's own MAX_BY picks any of them); None if none is left."""
    if not pairs:
        return None
    best = (max if kind == "max_by" else min)(pairs, key=lambda text: json.loads(text)[0])
    return json.loads(best)[1]


# --- Spark: the two operators and the view -------------------------------------------------------------------


def processors(kinds: list[str], global_: bool) -> tuple[Any, Any]:
    """The two StatefulProcessors (classes made here: pyspark is imported only by a driver that needs them).
    Their methods import pandas themselves: the fresh process Spark starts at every query start to learn the
    state schema only unpickles them and calls `init`, and a module-level pandas would cost it ~0.9 s."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class ByKey(StatefulProcessor):
        """Stage 1: keyed by the source's primary key; its state is the key's last row [group, inputs]."""

        def init(self, handle) -> None:
            self.last = handle.getValueState("last", STAGE1_STATE)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd  # here, not when unpickled (processors)
            found = [(int(o), bool(k), g, a) for frame in rows  # by position: (__pk,) __offset, __keep, g, a
                     for o, k, g, a in zip(*(frame.iloc[:, i] for i in range(-4, 0)), strict=True)]
            old = list(self.last.get()) if self.last.exists() else None
            new, out = key_changes(old, found, touch=global_)
            if new is None and old is not None:
                self.last.clear()
            elif new is not None and new != old:
                self.last.update(tuple(new))
            yield pd.DataFrame(out, columns=["g", "sign", "a"]).astype({"sign": "int32"})

        def close(self) -> None:
            pass

    class ByGroup(StatefulProcessor):
        """Stage 2: keyed by the group; its state is the accumulator of its aggregates (JSON)."""

        def init(self, handle) -> None:
            self.acc = handle.getValueState("acc", STAGE2_STATE)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd  # here, not when unpickled (processors)
            existed = self.acc.exists()
            acc = json.loads(self.acc.get()[0]) if existed else empty_accumulator(kinds)
            changes = ((int(s), json.loads(a)) for frame in rows  # by position: (g,) sign, a
                       for s, a in zip(frame.iloc[:, -2], frame.iloc[:, -1], strict=True))
            kept, row = group_row(apply_changes(acc, kinds, changes), kinds, existed, global_)
            if kept is not None:
                self.acc.update((json.dumps(kept),))
            elif existed:
                self.acc.clear()
            out = [] if row is None else [(key[0], row[0], None if row[1] is None else json.dumps(row[1]))]
            yield pd.DataFrame(out, columns=["g", "keep", "r"]).astype({"keep": bool})

        def close(self) -> None:
            pass

    return ByKey(), ByGroup()
