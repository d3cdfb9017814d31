"""The per-row work of a join of two changelogs (changelog_join.py), run in Spark's Python processes: stage 1's
per-row changes, stage 2's per-join-key rows and outputs, and the two StatefulProcessors. It imports neither sqlglot
nor pydantic: Spark starts a fresh Python process per stateful operator whenever a query starts (to learn its state
schema), and unpickling the processors imports this module there (docs/testing.md, "Where a stateful test's time
goes")."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, cast

LEFT, RIGHT = 0, 1
STAGE1_STATE = "jk string, row string"
STAGE2_STATE = "rows string"


# --- stage 1: per (side, primary key), the row's change as a change of its join key's group -------------------


def row_changes(old: list | None, rows: Iterable[tuple]) -> tuple[list | None, list[tuple]]:
    """One row's micro-batch: rows of (offset, join key, row JSON or None) -> (new state [join key, row] or None,
    the changes (join key, row or None, moved) for the groups; moved: the new join key of a row that left one group
    for another (on both its changes), else None)."""
    last = max(rows, key=lambda r: r[0], default=None)
    if last is None:
        return old, []
    new = [last[1], last[2]] if last[2] is not None else None
    if new == old:
        return old, []
    moved = new[0] if old is not None and new is not None and new[0] != old[0] else None
    out = []
    if old is not None and (new is None or moved):
        out.append((old[0], None, moved))
    if new is not None:
        out.append((new[0], new[1], moved))
    return new, out


# --- stage 2: per join key, the rows of both sides and the output rows they make --------------------------------


def outputs(rows: dict, side: str, keyed_by_left: bool) -> dict[str, tuple]:
    """{output key: (left row, right row)} of one group's rows {"l": {pk: row}, "r": {pk: row}}."""
    lefts, rights = rows["l"], rows["r"]
    out: dict[str, tuple] = {}

    def put(lpk, lv, rpk, rv) -> None:
        out[output_key(lpk, rpk, keyed_by_left)] = (lv, rv)

    for lpk, lv in lefts.items():
        for rpk, rv in rights.items():
            put(lpk, lv, rpk, rv)
        if not rights and side in ("left", "full"):
            put(lpk, lv, None, None)
    if not lefts and side == "full":
        for rpk, rv in rights.items():
            put(None, None, rpk, rv)
    return out


def output_key(lpk: str | None, rpk: str | None, keyed_by_left: bool) -> str:
    # keyed by the left only for INNER and LEFT joins (sql/changelog_join.py): every output has a left row
    return cast(str, lpk) if keyed_by_left else json.dumps([lpk, rpk])


def _alone(which: int, pk: str, keyed_by_left: bool) -> str | None:
    """The output key a row's group may change on its own, without the other side: the one a moved row takes
    from its old group to its new one (keyed by the left: the left row's key; else its NULL-padded row's)."""
    if keyed_by_left:
        return pk if which == LEFT else None
    return output_key(pk, None, False) if which == LEFT else output_key(None, pk, False)


def _makers(okey: str, keyed_by_left: bool) -> list[tuple[int, str]]:
    """The rows (side, pk) whose group holds an output key: keyed by the left, the left row (its right row, if
    any, is in the same group); else the row of each side the key names."""
    if keyed_by_left:
        return [(LEFT, okey)]
    lpk, rpk = json.loads(okey)
    return [(which, pk) for which, pk in ((LEFT, lpk), (RIGHT, rpk)) if pk is not None]


def _left_to(okey: str, went: dict, keyed_by_left: bool) -> bool:
    """Whether every row making `okey` left this group for one same new join key, which then decides it."""
    to = {went.get(maker) for maker in _makers(okey, keyed_by_left)}
    return len(to) == 1 and None not in to


def group_changes(rows: dict, changes: Iterable[tuple], side: str,
                  keyed_by_left: bool) -> tuple[dict, list[tuple]]:
    """Apply (side, pk, row or None, moved) to a group's rows -> (new rows, (output key, keep, left row, right row)
    of every output row that appeared, changed (keep) or disappeared (not keep, with its old values)).

    An output key whose rows all moved to one new join key is left by its old group to the new one, which upserts
    it, or deletes it when it makes no such row (a moved row's lone output key). So no output key changes in two
    groups (two tasks, whose writes would race) in one batch."""
    before = outputs(rows, side, keyed_by_left)
    rows = {"l": dict(rows["l"]), "r": dict(rows["r"])}
    went, came = {}, []
    for which, pk, row, moved in changes:
        slot = rows["l" if which == LEFT else "r"]
        if row is None:
            slot.pop(pk, None)
        else:
            slot[pk] = row
        alone = _alone(which, pk, keyed_by_left) if moved else None
        if moved and row is None:
            went[(which, pk)] = moved
        elif alone is not None:
            came.append((alone, which, row))
    after = outputs(rows, side, keyed_by_left)
    out = [(k, False, *old) for k, old in before.items() if k not in after and not _left_to(k, went, keyed_by_left)]
    out += [(k, True, *new) for k, new in after.items() if before.get(k) != new]
    out += [(k, False, *((row, None) if which == LEFT else (None, row))) for k, which, row in came if k not in after]
    return rows, out


# --- Spark: the two operators --------------------------------------------------------------------------------


def _none(value: Any) -> Any:
    """pandas gives NaN/None for nulls."""
    return None if value is None or value != value else value


def processors(side: str, keyed_by_left: bool) -> tuple[Any, Any]:
    """The two StatefulProcessors (made here: pyspark is imported only by a driver that needs them). Their methods
    import pandas themselves: the fresh process Spark starts at every query start to learn the state schema only
    unpickles them and calls `init`, and a module-level pandas would cost it ~0.9 s."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class ByRow(StatefulProcessor):
        """Stage 1: keyed by (side, primary key); its state is the row's [join key, row]."""

        def init(self, handle) -> None:
            self.last = handle.getValueState("last", STAGE1_STATE)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd  # here, not when unpickled (processors)
            frames = [f for f in rows if len(f)]
            if not frames:
                return
            found = [(int(o), j, _none(r)) for f in frames
                     for o, j, r in zip(f["offset"], f["jk"], f["row"], strict=True)]
            which, pk = int(frames[0]["side"].iloc[0]), frames[0]["pk"].iloc[0]
            old = list(self.last.get()) if self.last.exists() else None
            new, out = row_changes(old, found)
            if new is None and old is not None:
                self.last.clear()
            elif new is not None and new != old:
                self.last.update(tuple(new))
            frame = pd.DataFrame([(j, which, pk, r, m) for j, r, m in out], dtype=object,
                                 columns=["jk", "side", "pk", "row", "moved"])
            yield frame.astype({"side": "int32"})

        def close(self) -> None:
            pass

    class ByJoinKey(StatefulProcessor):
        """Stage 2: keyed by the join key; its state is the rows of both sides (JSON)."""

        def init(self, handle) -> None:
            self.rows = handle.getValueState("rows", STAGE2_STATE)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd  # here, not when unpickled (processors)
            state = json.loads(self.rows.get()[0]) if self.rows.exists() else {"l": {}, "r": {}}
            changes = [(int(s), p, _none(r), _none(m)) for f in rows
                       for s, p, r, m in zip(f["side"], f["pk"], f["row"], f["moved"], strict=True)]
            state, out = group_changes(state, changes, side, keyed_by_left)
            if state["l"] or state["r"]:
                self.rows.update((json.dumps(state),))
            elif self.rows.exists():
                self.rows.clear()
            yield pd.DataFrame(out, columns=["okey", "keep", "lv", "rv"], dtype=object).astype({"keep": bool})

        def close(self) -> None:
            pass

    return ByRow(), ByJoinKey()
