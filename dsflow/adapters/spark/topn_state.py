"""The per-key work of a ROW_NUMBER top-N (topn.py), run in Spark's Python processes: the ranking of a key's rows,
the rank rows a micro-batch changed, and the StatefulProcessor. It imports neither sqlglot nor pydantic (Spark
starts a fresh Python process per stateful operator at every query start, and unpickling the processor imports
this module there: docs/testing.md, "Where a stateful test's time goes").

A row is [orderings, source partition, source offset, row JSON]. Rows are ordered by their orderings (each ASC or
DESC, NULLs first or last as SQL's ORDER BY says; Spark's default: NULLS FIRST for ASC, NULLS LAST for DESC), then
by their place in the source, (partition, offset) ascending: of tied rows, the one read first from a partition
ranks first. So the ranking is a function of the records, not of how they were cut into micro-batches.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cmp_to_key
from typing import Any

STATE = "rows string"


def _compare(a: list, b: list, descending: list[bool], nulls_first: list[bool]) -> int:
    for x, y, desc, first in zip(a[0], b[0], descending, nulls_first, strict=True):
        if x == y:
            continue
        if x is None or y is None:
            return (-1 if first else 1) * (1 if x is None else -1)
        order = -1 if x < y else 1
        return -order if desc else order
    place_a, place_b = (a[1], a[2]), (b[1], b[2])
    return (place_a > place_b) - (place_a < place_b)


def ranked(rows: list[list], arrived: Iterable[list], limit: int, descending: list[bool],
           nulls_first: list[bool]) -> list[list]:
    """A key's top `limit` rows after `arrived` (a record already ranked, by its place, is not taken twice: a
    micro-batch replayed after a crash runs again from the state of the last committed one)."""
    merged, seen = list(rows), {(r[1], r[2]) for r in rows}
    for row in arrived:
        if (row[1], row[2]) not in seen:
            seen.add((row[1], row[2]))
            merged.append(row)
    merged.sort(key=cmp_to_key(lambda a, b: _compare(a, b, descending, nulls_first)))
    return merged[:limit]


def rank_changes(old: list[list], new: list[list]) -> list[tuple[int, bool, str]]:
    """(rank, keep, row JSON) of each rank whose row changed: an upsert of its new row, or (keep false, with the
    old row, so that its key columns are known) a delete of a rank that no longer has a row."""
    out: list[tuple[int, bool, str]] = []
    for index in range(max(len(old), len(new))):
        if index >= len(new):
            out.append((index + 1, False, old[index][3]))
        elif index >= len(old) or (old[index][1], old[index][2]) != (new[index][1], new[index][2]):
            out.append((index + 1, True, new[index][3]))
    return out


def processor(limit: int, descending: list[bool], nulls_first: list[bool]) -> Any:
    """The StatefulProcessor keyed by the partition key (made here: pyspark is imported only by a driver that
    needs it); its state is the key's top rows (JSON). Its method imports pandas itself (see the module's doc)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class TopRows(StatefulProcessor):
        """Keyed by the partition key (JSON); emits (rank, keep, row) for each rank the batch changed."""

        def init(self, handle) -> None:
            self.rows = handle.getValueState("rows", STATE)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd  # here, not when unpickled (processor)
            arrived = [[list(json.loads(o).values()), int(p), int(f), r] for frame in rows
                       for o, p, f, r in zip(frame["__o"], frame["__part"], frame["__off"], frame["__row"],
                                             strict=True)]
            old = json.loads(self.rows.get()[0]) if self.rows.exists() else []
            new = ranked(old, arrived, limit, descending, nulls_first)
            if new != old:
                self.rows.update((json.dumps(new),))
            out = [(key[0], rank, keep, row) for rank, keep, row in rank_changes(old, new)]
            yield pd.DataFrame(out, columns=["p", "rank", "keep", "row"]).astype({"rank": "int64", "keep": bool})

        def close(self) -> None:
            pass

    return TopRows()
