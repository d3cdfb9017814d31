"""How long a replay takes to read its records, from the query's measured micro-batches (pure: no I/O).

A micro-batch costs a fixed part (planning, offsets, commit) and a part per record. The driver's status keeps
recent batches as (records, milliseconds, cold) (adapters/spark/driver.py `batch_costs`; cold: the first batch of
its run, which pays for warming up). When the warm batches' sizes differ enough to tell the two parts apart, a line
is fitted through them and the replay's records (read in one batch, as a log source without
`max.records.per.batch` reads a backlog) cost `overhead + records * per_record`: an estimate. When they do not (a
query that only ever saw a trickle of small batches, and perhaps one cold backlog), the fixed part cannot be told
from the per-record part; a measured batch then bounds the time from above (its cost per record, fixed part
included, times the records; or its cost alone for fewer records than it read; or a line through the cold batches
too, which cost more than warm ones), and the plan says "at most" instead of promising a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SPREAD = 4
"""The largest measured batch must hold at least this many times the records of the smallest for a fit."""


@dataclass(frozen=True)
class CatchUp:
    """Seconds to read a replay's records, and what they rest on."""

    seconds: float
    upper_bound: bool
    """True: the measured batches were too alike in size to separate their fixed cost; `seconds` is at most"""
    batches: int
    """measured batches the figure rests on"""
    largest: int
    """records of the largest measured batch"""


def catch_up(records: int, costs: Sequence[Sequence[float]]) -> CatchUp | None:
    """The time to read `records` from measured batches, each (records, milliseconds[, cold]); None without any
    batch that read records in a measurable time. A cold batch is the first of its run (the JVM, its Python
    workers and the state store warm up in it): it prices a batch from above, never an estimate."""
    samples = [(float(c[0]), float(c[1]), len(c) > 2 and bool(c[2])) for c in costs if c[0] > 0 and c[1] > 0]
    if not samples:
        return None
    largest = int(max(r for r, _, _ in samples))
    warm = [(r, ms) for r, ms, cold in samples if not cold]
    fitted = _fit(warm)
    if fitted is not None:
        overhead, per_record = fitted
        return CatchUp((overhead + records * per_record) / 1000, False, len(warm), largest)
    # a batch of r records in ms bounds any cost `overhead + per_record * records` from above: by ms * records / r,
    # or by ms for fewer records than it read
    bounds = [ms * max(records / r, 1.0) for r, ms, _ in samples]
    with_cold = _fit([(r, ms) for r, ms, _ in samples])
    if with_cold is not None:
        bounds.append(with_cold[0] + records * with_cold[1])
    return CatchUp(min(bounds) / 1000, True, len(samples), largest)


def _fit(samples: list[tuple[float, float]]) -> tuple[float, float] | None:
    sizes = [r for r, _ in samples]
    return _line(samples) if sizes and max(sizes) >= SPREAD * min(sizes) else None


def _line(samples: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(overhead ms, ms per record) by least squares; through the origin when the intercept comes out negative;
    None when the cost does not grow with the records (no per-record cost can be read off them)."""
    n = len(samples)
    mean_r = sum(r for r, _ in samples) / n
    mean_ms = sum(ms for _, ms in samples) / n
    spread = sum((r - mean_r) ** 2 for r, _ in samples)
    slope = sum((r - mean_r) * (ms - mean_ms) for r, ms in samples) / spread
    if slope <= 0:
        return None
    intercept = mean_ms - slope * mean_r
    if intercept < 0:
        return 0.0, sum(r * ms for r, ms in samples) / sum(r * r for r, _ in samples)
    return intercept, slope
