"""Unit tests of queries (`dsflow test`): what a test gives and expects, what a run observed, and their comparison.

    UnitTest    one test of a project's tests/*.yml (load/unittests.py): a query, arrival batches of input records
                per source relation, and what the output must be
    Observed    what the engine saw when it ran the test (adapters/spark/unittest_run.py): the rows of each
                micro-batch (with whether each is kept or deletes its key), the watermark after each arrival batch,
                expectation counts, dead letters
    compare     the test's expectations against what was observed: a list of Mismatch, empty when it passes

Values are compared in a normal form (`normal`): timestamps as 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC, numbers
as numbers (1 == 1.0), everything else as it is.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from dsflow.errors import Location

Row = dict[str, Any]


@dataclass(frozen=True)
class Record:
    """One input record: its columns' values, event time in epoch ms when given (`_time`), a changelog delete."""

    values: Row
    time_ms: int | None = None
    delete: bool = False


@dataclass(frozen=True)
class Batch:
    """Records that arrive together (one micro-batch), by source relation fqn, and the watermark expected after."""

    records: dict[str, tuple[Record, ...]]
    watermark: str | None = None
    location: Location | None = None


@dataclass(frozen=True)
class Expected:
    """What the output must be; None: not checked."""

    rows: tuple[Row, ...] | None = None
    """A stream's rows, as a multiset (in order with `ordered`)."""
    ordered: bool = False
    state: tuple[Row, ...] | None = None
    """A changelog's or a view's rows after the last batch: the last upsert of each key, deletes applied."""
    dead_letters: tuple[Row, ...] | None = None
    """Rows sent to the dead-letter target by DEAD LETTER rules, each with `_rule`."""
    expectations: dict[str, dict[str, int]] | None = None
    """Per rule: passed and failed rows over the whole run."""


@dataclass(frozen=True)
class UnitTest:
    """One test: a query of the project, its input in arrival batches, what it must produce."""

    name: str
    query: str
    """The query's fqn (its sink's)."""
    batches: tuple[Batch, ...]
    expected: Expected
    location: Location
    keyed: bool = False
    """The sink is a changelog or a view: its output is a state by key."""


@dataclass
class Observed:
    """What a run of a test produced."""

    columns: list[str]
    key_columns: list[str]
    batches: list[list[tuple[Row, bool]]] = field(default_factory=list)
    """Each micro-batch's rows: (row, kept); kept False deletes the row's key."""
    watermarks: list[str | None] = field(default_factory=list)
    """The watermark after each arrival batch."""
    expectations: dict[str, dict[str, int]] = field(default_factory=dict)
    dead_letters: list[Row] = field(default_factory=list)
    replaces: bool = False
    """An aggregate without key: each batch's row replaces the state."""


@dataclass(frozen=True)
class Mismatch:
    """One difference: what (rows, state, ...), which rows are missing and which unexpected, or a message."""

    what: str
    missing: tuple[Row, ...] = ()
    unexpected: tuple[Row, ...] = ()
    message: str = ""
    keys: tuple[str, ...] = ()
    """A state's key columns (when the expected rows name them all): the diff is shown per key."""


@dataclass(frozen=True)
class Outcome:
    """A test's result: passed, failed (mismatches) or error (the run failed: `error`)."""

    test: UnitTest
    mismatches: tuple[Mismatch, ...] = ()
    error: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.mismatches and self.error is None


def normal(value: Any) -> Any:
    """A value in the form both sides are compared in."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal | float):
        return int(value) if value == int(value) else round(float(value), 9)
    if isinstance(value, str) and _looks_timestamp(value):
        try:
            return normal(dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return value
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normal(v) for v in value]
    return value


def _looks_timestamp(text: str) -> bool:
    return len(text) >= 19 and text[4:5] == "-" and text[7:8] == "-" and text[10:11] in (" ", "T") \
        and text[13:14] == ":"


def _frozen(row: Row) -> str:
    return json.dumps({k: normal(v) for k, v in sorted(row.items())}, sort_keys=True, default=str)


def final_state(observed: Observed) -> list[Row]:
    """The sink's rows after the last batch: per key the last kept row, a delete removing it."""
    state: dict[str, Row] = {}
    for batch in observed.batches:
        if observed.replaces and batch:
            state = {}
        for row, kept in batch:
            key = json.dumps([normal(row.get(k)) for k in observed.key_columns], default=str) \
                if observed.key_columns else _frozen(row) if not observed.replaces else "*"
            state.pop(key, None)
            if kept:
                state[key] = row
    return [_visible(row) for row in state.values()]


def _visible(row: Row) -> Row:
    return {k: v for k, v in row.items() if not k.startswith("__")}


def emitted_rows(observed: Observed) -> list[Row]:
    """A stream's rows in the order written (a delete, a tombstone, is left out)."""
    return [_visible(row) for batch in observed.batches for row, kept in batch if kept]


def compare(test: UnitTest, observed: Observed) -> list[Mismatch]:
    """The test's expectations against the run's output."""
    expected, found = test.expected, []
    if expected.rows is not None:
        found += _rows("rows", list(expected.rows), emitted_rows(observed), expected.ordered)
    if expected.state is not None:
        keys = tuple(k for k in observed.key_columns if not k.startswith("__"))
        found += _rows("state", list(expected.state), final_state(observed), False, keys)
    if expected.dead_letters is not None:
        found += _rows("dead letters", list(expected.dead_letters), observed.dead_letters, False)
    if expected.expectations is not None:
        found += _counts(expected.expectations, observed.expectations)
    for index, batch in enumerate(test.batches):
        if batch.watermark is None:
            continue
        seen = observed.watermarks[index] if index < len(observed.watermarks) else None
        if normal(seen) != normal(batch.watermark):
            found.append(Mismatch("watermark", message=f"after batch {index + 1}: expected {normal(batch.watermark)}, "
                                                       f"got {normal(seen)}"))
    return found


def _rows(what: str, expected: list[Row], actual: list[Row], ordered: bool,
          keys: tuple[str, ...] = ()) -> list[Mismatch]:
    """Rows compared on the columns the expected rows name (a column left out of every expected row is not
    compared)."""
    named = sorted({k for row in expected for k in row}) or sorted({k for row in actual for k in row})
    projected = [{k: row.get(k) for k in named} for row in actual]
    wanted = [{k: row.get(k) for k in named} for row in expected]
    if ordered:
        if [_frozen(r) for r in wanted] == [_frozen(r) for r in projected]:
            return []
        return [Mismatch(what, tuple(wanted), tuple(projected), "rows differ in order or content (ordered)")]
    want, got = Counter(map(_frozen, wanted)), Counter(map(_frozen, projected))
    if want == got:
        return []
    missing = [json.loads(k) for k in (want - got).elements()]
    unexpected = [json.loads(k) for k in (got - want).elements()]
    return [Mismatch(what, tuple(missing), tuple(unexpected), keys=keys if set(keys) <= set(named) else ())]


def _counts(expected: dict[str, dict[str, int]], actual: dict[str, dict[str, int]]) -> list[Mismatch]:
    found = []
    for rule, wanted in expected.items():
        seen = actual.get(rule, {})
        for field_name, count in wanted.items():
            if int(seen.get(field_name, 0)) != count:
                found.append(Mismatch("expectations", message=f"rule '{rule}': expected {field_name} {count}, "
                                                             f"got {int(seen.get(field_name, 0))}"))
    return found
