"""A bounded slice of bench/first_run_stress.py: chained queries started for the first time while their source is
being written, stopped between batches, stopped mid-batch and killed (their Python workers), started again, under
two busy processes; every id must reach both sinks. The long run (>= 500 starts) is by hand, in docs/benchmarks.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.first_run_stress import cpu_hogs, one_round  # noqa: E402

pytestmark = pytest.mark.integration

SEED = 20261125
ROUNDS = 12
BUDGET_S = 45
"""Rounds stop early once this much time is spent (its two busy processes slow the other worker too; CI has a
25-minute budget): at least two always run. The long run is by hand (docs/benchmarks.md)."""


def test_no_record_is_skipped_across_first_runs_restarts_and_kills(spark, broker: str, tmp_path: Path) -> None:
    started, rounds = time.monotonic(), []
    hogs = cpu_hogs(2, BUDGET_S + 300)
    try:
        for seed in range(SEED, SEED + ROUNDS):
            rounds.append(one_round(spark, broker, tmp_path, seed, restarts=3, records=300))
            if len(rounds) >= 2 and time.monotonic() - started > BUDGET_S:
                break
    finally:
        for hog in hogs:
            hog.terminate()
    report = [(r.seed, r.starts, len(r.missing), r.error) for r in rounds]
    assert sum(r.starts for r in rounds) >= 2 * 4, report
    assert all(not r.missing for r in rounds), report
    assert not any(r.refused for r in rounds), report
