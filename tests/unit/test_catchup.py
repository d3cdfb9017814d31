"""core/catchup.py: a replay's time from the query's measured batches, fitted when their sizes allow, else bounded."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from dsflow.core.catchup import catch_up


def test_a_line_through_batches_of_different_sizes_prices_the_records_and_one_fixed_cost():
    costs = [[50, 300], [20_000, 2_300], [60, 310], [5_000, 800]]  # 300 ms fixed + 0.1 ms a record
    found = catch_up(100_000, costs)
    assert found is not None and not found.upper_bound
    assert found.seconds == pytest.approx(0.3 + 10.0, rel=0.01)
    assert (found.batches, found.largest) == (4, 20_000)


def test_batches_alike_in_size_give_an_upper_bound_not_an_estimate():
    found = catch_up(21_000, [[50, 700], [48, 690], [52, 720]])  # a trickle: the fixed cost is all that shows
    assert found is not None and found.upper_bound and found.largest == 52
    assert found.seconds == pytest.approx(21_000 * (720 / 52) / 1000)  # the cheapest per record
    assert catch_up(10, [[50, 700]]).seconds == pytest.approx(0.7)  # fewer records than the batch: its cost


def test_a_negative_intercept_is_fitted_through_the_origin_and_a_flat_cost_is_bounded():
    found = catch_up(1_000, [[10, 1], [1_000, 200]])
    assert found is not None and not found.upper_bound and found.seconds > 0
    flat = catch_up(1_000, [[10, 500], [1_000, 400]])  # costs that fall with size: no per-record cost to read off
    assert flat is not None and flat.upper_bound


def test_nothing_measured_is_no_estimate():
    assert catch_up(10, []) is None
    assert catch_up(10, [[0, 20], [5, 0]]) is None


@given(overhead=st.floats(0, 2_000), per_record=st.floats(0.0001, 5), records=st.integers(1, 10_000_000),
       sizes=st.lists(st.integers(1, 1_000_000), min_size=1, max_size=12))
def test_the_figure_is_exact_for_exact_costs_or_never_below_them(overhead, per_record, records, sizes):
    costs = [[r, overhead + per_record * r] for r in sizes]
    found = catch_up(records, costs)
    true = (overhead + per_record * records) / 1000
    assert found is not None
    if found.upper_bound:
        assert found.seconds >= true * (1 - 1e-9)
    else:
        assert found.seconds == pytest.approx(true, rel=1e-6, abs=1e-6)


def test_a_cold_batch_only_bounds_the_time():
    cold_backlog = [[20_000, 60_000, True], [50, 700, False], [48, 690, False]]  # the run's first batch warmed up
    found = catch_up(21_000, cold_backlog)
    assert found is not None and found.upper_bound and found.largest == 20_000
    assert found.seconds == pytest.approx(60.0 * 21_000 / 20_000, rel=0.05)
    warm = catch_up(21_000, [*cold_backlog, [5_000, 1_190, False]])  # warm batches apart in size: an estimate
    assert warm is not None and not warm.upper_bound and warm.batches == 3
