"""history="auto": the statistical models' window, validated before the first cutoffs (one standard error rule)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from frozenvit.forecasting import ETS, Theta
from frozenvit.forecasting.auto import validation_scale
from frozenvit.forecasting.defaults import HISTORY_LADDER


def make(kind: str, S: int = 6, n: int = 600, m: int = 12, seed: int = 0) -> list[np.ndarray]:
    """"shift": a steep trend that stops 200 values before the end; "stationary": level, season and noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    level = np.where(t < n - 200, 0.5 * t, 0.5 * (n - 200)) if kind == "shift" else np.full(n, 20.0)
    return [100 + level + 5 * np.sin(2 * np.pi * t / m + s) + rng.normal(0, 1, n) for s in range(S)]


def cutoffs(ys: list[np.ndarray], h: int = 12, windows: int = 2) -> np.ndarray:
    return np.array([[len(y) - h * (windows - w) for w in range(windows)] for y in ys])


@pytest.mark.parametrize("cls", [Theta, ETS])
def test_a_trend_that_stopped_gets_a_recent_window_and_a_steady_series_all_of_it(cls):
    ys = make("shift")
    model = cls(12, history="auto")
    preds = model.forecast_cutoffs(ys, cutoffs(ys), 12, progress=False)[0]
    assert model.history_ in [k * 12 for k in HISTORY_LADDER]
    np.testing.assert_array_equal(preds, cls(12, history=model.history_).forecast_cutoffs(ys, cutoffs(ys), 12)[0])
    full = cls(12).forecast_cutoffs(ys, cutoffs(ys), 12)[0]
    truth = np.stack([[y[c: c + 12] for c in cs] for y, cs in zip(ys, cutoffs(ys))])
    assert np.abs(preds - truth).mean() < np.abs(full - truth).mean()              # and it forecasts better
    steady = make("stationary")
    model = cls(12, history="auto")
    model.forecast_cutoffs(steady, cutoffs(steady), 12, progress=False)
    assert model.history_ is None


def test_the_choice_is_the_one_standard_error_rule_over_the_ladder():
    """A brute-force reading of the rule: each window's forecast of the h values before each first cutoff."""
    ys, h, m = make("shift", seed=3), 12, 12
    first = cutoffs(ys)[:, 0]
    ladder = [None] + [k * max(m, h) for k in sorted(HISTORY_LADDER, reverse=True) if k * max(m, h) < first.max() - h]
    err = np.array([[np.abs(Theta(m, history=n).fit(y[: c - h]).predict(h) - y[c - h: c]).mean()
                     / validation_scale(y[: c - h]) for y, c in zip(ys, first)] for n in ladder])
    rel = err / err.min(axis=0)
    best = int(np.argmin(rel.mean(axis=1)))
    gain = rel[best] - rel[0]
    want = ladder[best] if gain.mean() + gain.std(ddof=1) / np.sqrt(len(ys)) < 0 else None
    assert Theta(m, history="auto").choose_history(ys, cutoffs(ys), h) == want
    assert want is not None


def test_nothing_after_the_first_cutoff_moves_the_choice():
    ys = make("shift")
    cuts = cutoffs(ys)
    poisoned = [y.copy() for y in ys]
    for y, c in zip(poisoned, cuts[:, 0]):
        y[c:] = 1e6 * np.sign(np.sin(np.arange(y.size - c)))                     # the test windows' values
    a, b = Theta(12, history="auto"), Theta(12, history="auto")
    pa = a.forecast_cutoffs(ys, cuts, 12)[0]
    pb = b.forecast_cutoffs(poisoned, cuts, 12)[0]
    assert a.history_ == b.history_ is not None
    np.testing.assert_array_equal(pa[:, 0], pb[:, 0])                            # the first window's forecasts too


def test_one_series_or_short_histories_keep_all_of_it():
    ys = make("shift")
    assert Theta(12, history="auto").choose_history(ys[:1], cutoffs(ys[:1]), 12) is None      # no standard error
    short = [y[:60] for y in ys]                                   # under 2 max(m, h) + h before the first cutoff
    assert Theta(12, history="auto").choose_history(short, cutoffs(short), 12) is None


def test_fit_alone_with_auto_fits_all_of_the_history():
    y = make("shift")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(Theta(12, history="auto").fit(y).predict(6), Theta(12).fit(y).predict(6))


def test_intervals_come_from_the_chosen_window():
    ys = make("shift")
    model = ETS(12, history="auto")
    mean, lo, hi = model.forecast_intervals(ys, cutoffs(ys), 12, [80.0])
    ref = ETS(12, history=model.history_).forecast_intervals(ys, cutoffs(ys), 12, [80.0])
    assert model.history_ is not None
    for got, want in zip((mean, lo, hi), ref):
        np.testing.assert_array_equal(got, want)


def test_calibration_windows_choose_their_own_window_and_the_backtests_is_kept():
    ys = make("shift")
    cuts = cutoffs(ys)
    alone = Theta(12, history="auto")
    preds = alone.forecast_cutoffs(ys, cuts, 12)[0]
    model = Theta(12, history="auto")
    got, calib, _ = model.forecast_with_calibration(ys, cuts, cuts[:, :1] - 12, 12)
    np.testing.assert_array_equal(got, preds)
    assert model.history_ == alone.history_
    early = Theta(12, history="auto")
    np.testing.assert_array_equal(calib, early.forecast_cutoffs(ys, cuts[:, :1] - 12, 12)[0])   # chosen before them
