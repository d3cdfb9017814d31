"""A bounded slice of bench/change_model.py: random edits to a live project (renames, moves, WHERE, columns,
partitions, window sizes, event-time column, deleted and restored queries, reverts), each planned and applied on
the real broker, and checked in the data against what its plan said. Here the queries run in one shared Spark
application (`runtime.isolation: shared`: a replaced query restarts inside the warm host, so a step costs seconds,
not a driver's JVM start); the long run (>= 200 steps, several seeds, `--isolation query` and `shared`) is by hand,
in docs/benchmarks.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.change_model import EDITS, run_steps  # noqa: E402

pytestmark = pytest.mark.integration

SEED = 20261125
STEPS = 6
MIN_STEPS = 4
BUDGET_S = 120
"""Steps stop early once this much time is spent (a loaded CI machine), after MIN_STEPS at least."""


def test_every_plan_does_in_the_data_what_it_says(broker: str, tmp_path: Path) -> None:
    run = run_steps(broker, tmp_path, SEED, STEPS, budget_s=BUDGET_S, min_steps=MIN_STEPS, isolation="shared")
    report = [(r.number, r.edit, r.actions, r.mismatches) for r in run.reports]
    assert len(run.reports) >= 1 + MIN_STEPS, report
    assert len({r.edit for r in run.reports} & set(EDITS)) >= 3, report
    assert sum(bool(r.actions) for r in run.reports) >= 3, report  # an edit of a deleted query plans nothing
    assert [r for r in report if r[3]] == [], report
