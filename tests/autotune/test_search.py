"""fastload.autotune's search (autotune/search.py) on fake throughput curves: no timing."""

from __future__ import annotations

import pytest
from curves import FakeClock, curve, saturating

from fastload import autotune as tune


@pytest.mark.parametrize("limit", [1, 2, 3, 6, 12, 20])
def test_finds_the_knee_of_a_saturating_curve(limit: int) -> None:
    measure, measured = curve(saturating(limit))
    choice, table, reason = tune.search(measure, max_workers=32, budget=1e9)
    assert choice == limit  # the fewest workers that reach the plateau
    assert "fewest workers within 3%" in reason
    assert [m.num_workers for m in table] == measured
    assert len(measured) < 33 / 2  # far fewer than an exhaustive sweep


def test_stops_when_more_workers_stop_helping() -> None:
    rates = {w: 1000.0 if w >= 2 else 400.0 for w in range(65)}
    measure, measured = curve(rates)
    tune.search(measure, max_workers=64, budget=1e9)
    assert 64 not in measured and 32 not in measured  # two flat coarse steps ended the pass


def test_prefers_fewer_workers_when_throughput_is_equal() -> None:
    rates = {0: 500.0, 1: 990.0, 2: 1000.0, 3: 1005.0, 4: 995.0}
    measure, _ = curve(rates)
    choice, _, _ = tune.search(measure, max_workers=4, budget=1e9)
    assert choice == 1


def test_declining_curve_keeps_the_peak() -> None:
    rates = {
        0: 300.0,
        1: 700.0,
        2: 900.0,
        3: 600.0,
        4: 500.0,
        5: 400.0,
        6: 350.0,
        7: 300.0,
        8: 250.0,
    }
    measure, _ = curve(rates)
    assert tune.search(measure, max_workers=8, budget=1e9)[0] == 2


def test_step_time_chooses_the_fewest_that_keep_the_step_fed() -> None:
    bars: list[float | None] = []
    measure, measured = curve(saturating(8), bars=bars)
    # the step consumes 300 images/s with margin: 3 workers are enough
    choice, _, reason = tune.search(measure, max_workers=16, budget=1e9, required=300.0)
    assert choice == 3 and "keep the step fed" in reason
    assert max(measured) <= 4  # stopped measuring once the demand was met
    # the fine candidate below 4 matters once it feeds the step, not only if it matches 4
    assert dict(zip(measured, bars, strict=True))[3] == 300.0


def test_zero_workers_never_keep_a_step_fed() -> None:
    """Without workers, loading runs between steps however fast it is: the step is not fed."""
    rates = {0: 2000.0, 1: 250.0, 2: 500.0, 3: 750.0, 4: 1000.0}
    bars: list[float | None] = []
    measure, measured = curve(rates, bars=bars)
    choice, _, reason = tune.search(measure, max_workers=4, budget=1e9, required=400.0)
    assert choice == 2 and "keep the step fed" in reason
    assert measured[:3] == [0, 1, 2] and bars[0] is None  # 0 workers do not end the search


def test_step_time_beyond_reach_falls_back_to_the_best() -> None:
    measure, _ = curve(saturating(4))
    choice, _, reason = tune.search(measure, max_workers=8, budget=1e9, required=1e6)
    assert choice == 4 and "no candidate reached" in reason


def test_budget_bounds_the_search_but_always_measures_one() -> None:
    clock = FakeClock()
    measure, measured = curve(saturating(16), clock, per_call=10.0)
    choice, _, reason = tune.search(measure, max_workers=32, budget=25.0, clock=clock)
    assert measured == [0, 1, 2]  # 30 s of 'measuring' > 25 s budget
    assert choice == 2 and "budget ended the search early" in reason
    clock = FakeClock()
    measure, measured = curve(saturating(16), clock, per_call=10.0)
    choice, _, _ = tune.search(measure, max_workers=32, budget=0.001, clock=clock)
    assert measured == [0] and choice == 0


def test_each_candidate_is_told_the_rate_at_which_it_would_matter() -> None:
    """The bar lets a measurement stop once its side of the bar is clear (racing)."""
    rates = {0: 500.0, 1: 900.0, 2: 1000.0, 3: 1005.0, 4: 900.0, 5: 800.0, 6: 700.0, 8: 600.0}
    bars: list[float | None] = []
    measure, measured = curve(rates, bars=bars)
    tune.search(measure, max_workers=8, budget=1e9, tolerance=0.03)
    assert measured[:5] == [0, 1, 2, 4, 8]
    expected = [None, 500 * 1.03, 900 * 1.03, 1000 * 1.03, 1000 * 1.03]
    assert bars[:5] == pytest.approx(expected)  # coarse: a real gain over the best so far
    # fine pass: throughput falls after the target (2), so 3 is tried; it must beat the best
    assert measured[5:] == [3] and bars[5] == pytest.approx(1000 * 1.03)


def test_fine_candidates_below_the_target_must_be_as_good_as_the_best() -> None:
    rates = {w: 1000.0 if w >= 6 else 150.0 * w for w in range(17)}
    bars: list[float | None] = []
    measure, measured = curve(rates, bars=bars)
    choice, _, _ = tune.search(measure, max_workers=16, budget=1e9)
    assert choice == 6
    bar_of = dict(zip(measured, bars, strict=True))
    # fine candidates below the first target (8), then below 6: as good as the best?
    assert bar_of[6] == pytest.approx(1000 * 0.97) and bar_of[5] == pytest.approx(1000 * 0.97)


def test_required_rate_lowers_the_bar() -> None:
    rates = {0: 1000.0, 1: 100.0, 2: 200.0, 4: 400.0}
    bars: list[float | None] = []
    measure, measured = curve(rates, bars=bars)
    choice, _, _ = tune.search(measure, max_workers=4, budget=1e9, required=150.0)
    # a candidate with workers matters once it feeds the step, though 0 workers were faster
    assert measured == [0, 1, 2] and bars == [None, 150.0, 150.0] and choice == 2


def test_progress_reports_each_measurement() -> None:
    calls = []
    measure, measured = curve(saturating(3))
    tune.search(measure, max_workers=8, budget=1e9, progress=lambda d, t: calls.append(d))
    assert calls == list(range(1, len(measured) + 1))
