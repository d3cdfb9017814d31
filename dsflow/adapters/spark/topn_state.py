"""The per-key work of a ROW_NUMBER top-N (topn.py), run in Spark's Python processes: the ranking of a key's rows,
the rank rows a micro-batch changed, and the StatefulProcessor. It imports neither sqlglot nor pydantic (Spark
starts a fresh Python process per stateful operator at every query start, and unpickling the processor imports
this module there: docs/testing.md, "Where a stateful test's time goes").

A row is [orderings, tie, row JSON]. Rows are ordered by their orderings (each ASC or DESC, NULLs first or last as
SQL's ORDER BY says; Spark's default: NULLS FIRST for ASC, NULLS LAST for DESC), then by `tie` ascending: over a
stream the record's place in the source, [partition, offset] (of tied rows the one read first from a partition
ranks first), over a changelog the row's primary key values as text. So the ranking is a function of the records
(of the changelog's rows), not of how they were cut into micro-batches.

Over a stream a key keeps only its top N rows: rows only arrive. Over a changelog (rows updated and deleted) it
keeps every row of the key, since a deleted top row gives way to the next one: stage 1, keyed by the row's
primary key, turns its changes into a delete from its old partition key and an upsert into its new one
(changelog_join_state.row_changes), and stage 2, keyed by the partition key, ranks the key's rows before and after.
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
    return (a[1] > b[1]) - (a[1] < b[1])


def ordered(rows: Iterable[list], descending: list[bool], nulls_first: list[bool]) -> list[list]:
    def compare(a: list, b: list) -> int:
        return _compare(a, b, descending, nulls_first)

    return sorted(rows, key=cmp_to_key(compare))


def ranked(rows: list[list], arrived: Iterable[list], limit: int, descending: list[bool],
           nulls_first: list[bool]) -> list[list]:
    """A stream key's top `limit` rows after `arrived` (a record already ranked, by its place, is not taken twice:
    a micro-batch replayed after a crash runs again from the state of the last committed one)."""
    merged, seen = list(rows), {tuple(r[1]) for r in rows}
    for row in arrived:
        if tuple(row[1]) not in seen:
            seen.add(tuple(row[1]))
            merged.append(row)
    return ordered(merged, descending, nulls_first)[:limit]


def partition_changes(rows: dict[str, list], changes: Iterable[tuple[str, list | None]], limit: int,
                      descending: list[bool], nulls_first: list[bool]) -> tuple[dict[str, list], list[tuple]]:
    """A changelog key's rows {primary key: row} after (primary key, row or None: a delete) -> (its new rows, the
    rank changes of its top `limit`, as rank_changes gives them)."""
    before = ordered(rows.values(), descending, nulls_first)[:limit]
    rows = dict(rows)
    for pk, row in changes:
        if row is None:
            rows.pop(pk, None)
        else:
            rows[pk] = row
    return rows, rank_changes(before, ordered(rows.values(), descending, nulls_first)[:limit])


def rank_changes(old: list[list], new: list[list]) -> list[tuple[int, bool, str]]:
    """(rank, keep, row JSON) of each rank whose row changed: an upsert of its new row, or (keep false, with the
    old row, so that its key columns are known) a delete of a rank that no longer has a row."""
    out: list[tuple[int, bool, str]] = []
    for index in range(max(len(old), len(new))):
        if index >= len(new):
            out.append((index + 1, False, old[index][2]))
        elif index >= len(old) or old[index] != new[index]:
            out.append((index + 1, True, new[index][2]))
    return out


def processor(limit: int, descending: list[bool], nulls_first: list[bool]) -> Any:
    """The StatefulProcessor of a stream, keyed by the partition key (made here: pyspark is imported only by a
    driver that needs it); its state is the key's top rows (JSON). Its method imports pandas itself (see the
    module's doc)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class TopRows(StatefulProcessor):
        """Keyed by the partition key (JSON); emits (rank, keep, row) for each rank the batch changed."""

        def init(self, handle) -> None:
            self.rows = handle.getValueState("rows", STATE)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd  # here, not when unpickled (processor)
            arrived = [[list(json.loads(o).values()), [int(p), int(f)], r] for frame in rows
                       for o, p, f, r in zip(frame["o"], frame["part"], frame["off"], frame["row"], strict=True)]
            old = json.loads(self.rows.get()[0]) if self.rows.exists() else []
            new = ranked(old, arrived, limit, descending, nulls_first)
            if new != old:
                self.rows.update((json.dumps(new),))
            out = [(key[0], rank, keep, row) for rank, keep, row in rank_changes(old, new)]
            yield pd.DataFrame(out, columns=["p", "rank", "keep", "row"]).astype({"rank": "int64", "keep": bool})

        def close(self) -> None:
            pass

    return TopRows()


def changelog_processors(limit: int, descending: list[bool], nulls_first: list[bool]) -> tuple[Any, Any]:
    """The two StatefulProcessors over a changelog: by the row's primary key (its state: [partition key, row]),
    then by the partition key (its state: every row of the key, {primary key: row})."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    from dsflow.adapters.spark.changelog_join_state import row_changes

    class ByRow(StatefulProcessor):
        """Keyed by the source's primary key; emits (partition key, primary key, row or None) per change."""

        def init(self, handle) -> None:
            self.last = handle.getValueState("last", "p string, row string")

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd  # here, not when unpickled (changelog_processors)
            found = [(int(f), p, json.dumps([list(json.loads(o).values()), json.loads(key[0]), r]) if k else None)
                     for frame in rows for f, k, p, o, r in zip(frame["off"], frame["keep"], frame["p"],
                                                                 frame["o"], frame["row"], strict=True)]
            old = list(self.last.get()) if self.last.exists() else None
            new, out = row_changes(old, found)
            if new is None and old is not None:
                self.last.clear()
            elif new is not None and new != old:
                self.last.update(tuple(new))
            yield pd.DataFrame([(p, key[0], r) for p, r, _ in out], columns=["p", "pk", "e"], dtype=object)

        def close(self) -> None:
            pass

    class ByPartition(StatefulProcessor):
        """Keyed by the partition key; emits (rank, keep, row) for each rank the batch changed."""

        def init(self, handle) -> None:
            self.rows = handle.getValueState("rows", STATE)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd  # here, not when unpickled (changelog_processors)
            changes = [(pk, json.loads(e) if isinstance(e, str) else None) for frame in rows
                       for pk, e in zip(frame["pk"], frame["e"], strict=True)]
            old = json.loads(self.rows.get()[0]) if self.rows.exists() else {}
            new, changed = partition_changes(old, changes, limit, descending, nulls_first)
            if new:
                self.rows.update((json.dumps(new),))
            elif old:
                self.rows.clear()
            out = [(key[0], rank, keep, row) for rank, keep, row in changed]
            yield pd.DataFrame(out, columns=["p", "rank", "keep", "row"]).astype({"rank": "int64", "keep": bool})

        def close(self) -> None:
            pass

    return ByRow(), ByPartition()
