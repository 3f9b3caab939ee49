"""Prediction intervals: MSIS and coverage against hand and brute computations, conformal intervals
against a brute-force recomputation, no leakage past a cutoff, ETS's own intervals, the CLI's --levels."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.cli import main
from frozenvit.forecasting.errors import SeriesError
from frozenvit.forecasting import (ETS, DLinear, Naive, SeasonalNaive, backtest, conformal_quantile, coverage,
                                   interval_score_terms, mase_scale, msis)


def _panel(n_series: int = 30, n: int = 300, noise: float = 0.5, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t,
                                    "y": 10 + i % 5 + 3 * np.sin(2 * np.pi * t / 24 + i) + rng.normal(0, noise, n)})
                      for i in range(n_series)], ignore_index=True)


def test_msis_matches_a_hand_computation():
    # level 80: a = 0.2, 2/a = 10. Step 1 inside: width 2. Step 2 below lo by 1: 1 + 10. Step 3 above hi by 1: 2 + 10.
    y, lo, hi = np.array([10.0, 12, 8]), np.array([9.0, 13, 5]), np.array([11.0, 14, 7])
    np.testing.assert_allclose(interval_score_terms(y, lo, hi, 80), [2, 11, 12])
    history = np.array([1.0, 3, 2, 6])                       # |diffs| at lag 1: 2, 1, 4 -> scale 7/3
    assert msis(y, lo, hi, history, season_length=1, level=80) == pytest.approx((25 / 3) / (7 / 3))


def test_coverage_is_a_brute_count_and_leaves_out_missing_intervals():
    rng = np.random.default_rng(3)
    y, lo = rng.normal(size=200), rng.normal(-1, 0.5, 200)
    hi = lo + rng.uniform(0, 2, 200)
    lo[::7] = np.nan
    hits = total = 0
    for yi, li, hi_ in zip(y, lo, hi):
        if not math.isnan(li):
            total += 1
            hits += li <= yi <= hi_
    assert coverage(y, lo, hi) == pytest.approx(hits / total)


def test_conformal_quantile_takes_the_finite_sample_rank_or_gives_none():
    scores = np.arange(1.0, 20.0)[::-1]                      # 19 scores: rank ceil(20 * 0.95) = 19
    assert conformal_quantile(scores, 95) == 19
    assert math.isnan(conformal_quantile(scores[:18], 95))   # ceil(19 * 0.95) = 19 > 18: no interval
    assert conformal_quantile(np.arange(1.0, 10.0), 80) == 8  # ceil(10 * 0.8) = 8


def test_conformal_intervals_equal_a_brute_force_recomputation_from_earlier_windows():
    rng = np.random.default_rng(1)
    y = 5 + np.sin(np.arange(80)) + rng.normal(0, 0.3, 80)
    df = pd.DataFrame({"unique_id": "a", "ds": np.arange(80), "y": y})
    W, K = 30, 2
    res = backtest(df, [SeasonalNaive(2)], h=1, n_windows=W, step_size=1, season_length=2, levels=[80],
                   calibration_windows=K)
    lo, hi = res.intervals["SeasonalNaive"][80.0]
    cut0 = 80 - 1 - (W - 1)
    origins = list(range(cut0 - K, cut0 + W))                # calibration windows, then the backtest's
    scores = [abs(y[o] - y[o - 2]) / mase_scale(y[:o], 2) for o in origins]
    for w in range(W):
        pool = np.sort(scores[: K + w])                      # h = step = 1: every earlier window is known
        rank = math.ceil((pool.size + 1) * 0.8)
        c = cut0 + w
        if rank > pool.size:
            assert math.isnan(lo[w]) and math.isnan(hi[w])
            continue
        half = pool[rank - 1] * mase_scale(y[:c], 2)
        assert (lo[w], hi[w]) == pytest.approx((y[c - 2] - half, y[c - 2] + half))


def test_changing_values_after_a_cutoff_leaves_its_intervals_unchanged(poison_after):
    df = _panel(n_series=8, n=260)
    models = [SeasonalNaive(24), DLinear(h=24, input_size=48, max_epochs=1, val_size=24, progress=False)]
    kw = dict(h=24, n_windows=3, season_length=24, levels=(80,), calibration_windows=1, refit_every=1)
    a = backtest(df, models, **kw)
    first = a.forecasts["cutoff"].min()
    poisoned = poison_after(df, first)
    b = backtest(poisoned, models, **kw)
    w0 = (a.forecasts["cutoff"] == first).to_numpy()
    for lab in ("SeasonalNaive", "DLinear"):
        for ia, ib in zip(a.intervals[lab][80.0], b.intervals[lab][80.0]):
            assert np.isfinite(ia[w0]).all()
            np.testing.assert_array_equal(ia[w0], ib[w0])
            assert not np.allclose(ia[~w0], ib[~w0])         # later windows do see the poison


def test_conformal_coverage_is_near_nominal_on_exchangeable_noise():
    df = _panel(n_series=60, n=200, noise=1.0, seed=2)
    res = backtest(df, [SeasonalNaive(24), Naive()], h=12, n_windows=4, season_length=24, levels=(80, 95),
                   calibration_windows=2)
    iv = res.interval_summary()
    for lab in ("SeasonalNaive", "Naive"):
        for lv in (80.0, 95.0):
            assert iv.loc[(lab, lv), "share"] == 1
            assert abs(100 * iv.loc[(lab, lv), "coverage"] - lv) < 4, (lab, lv, iv)
    assert iv.loc[("SeasonalNaive", 95.0), "msis"] < iv.loc[("Naive", 95.0), "msis"]


def test_too_few_calibration_errors_give_no_interval_rather_than_a_made_up_one():
    res = backtest(_panel(n_series=4, n=150), [SeasonalNaive(24)], h=12, n_windows=2, season_length=24,
                   levels=(80, 95), calibration_windows=1)
    iv = res.interval_summary()
    assert iv.loc[("SeasonalNaive", 80.0), "share"] == 1          # 4, then 8 errors: 80 % needs 4
    assert iv.loc[("SeasonalNaive", 95.0), "share"] == 0          # 95 % needs 19
    assert np.isnan(res.intervals["SeasonalNaive"][95.0][0]).all()


def test_without_levels_nothing_is_calibrated_and_point_forecasts_are_the_same():
    df = _panel(n_series=4, n=200)
    plain = backtest(df, [SeasonalNaive(24)], h=12, n_windows=2, season_length=24)
    with_iv = backtest(df, [SeasonalNaive(24)], h=12, n_windows=2, season_length=24, levels=(80,))
    assert plain.intervals == {} and plain.levels == ()
    pd.testing.assert_frame_equal(plain.forecasts, with_iv.forecasts)
    assert "cov80" in with_iv.summary() and "cov80" not in plain.summary()


def test_ets_reports_its_own_intervals_as_statsforecast_gives_them():
    from statsforecast.models import AutoETS

    df = _panel(n_series=2, n=120)
    res = backtest(df, [ETS(24)], h=6, n_windows=1, season_length=24, levels=(80, 95), calibration_windows=0)
    y = df.loc[df["unique_id"] == "s0", "y"].to_numpy()
    ref = AutoETS(season_length=24).fit(y[:-6]).predict(h=6, level=[80.0, 95.0])
    lo, hi = res.intervals["ETS/own"][95.0]
    np.testing.assert_allclose(lo[:6], ref["lo-95.0"])
    np.testing.assert_allclose(hi[:6], ref["hi-95.0"])
    np.testing.assert_allclose(res.forecasts["ETS"].to_numpy()[:6], ref["mean"])
    assert np.isnan(res.intervals["ETS"][95.0][0]).all()          # no calibration window: no conformal interval


def test_cli_levels_write_coverage_msis_and_interval_columns(tmp_path):
    path = tmp_path / "p.csv"
    _panel(n_series=20, n=200).to_csv(path, index=False)
    out = tmp_path / "out"
    assert main(["forecast", "backtest", "--csv", str(path), "--h", "12", "--windows", "2", "--models", "snaive,naive",
                 "--levels", "95,80", "--calibration-windows", "1", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["levels"] == [80.0, 95.0] and summary["calibration_windows"] == 1
    assert summary["global_calibration"] == "holdout"
    assert {(r["interval"], r["level"]) for r in summary["intervals"]} == {
        (m, lv) for m in ("SeasonalNaive", "Naive") for lv in (80.0, 95.0)}
    assert len(summary["coverage_by_horizon"]["Naive"]["95"]) == 12
    assert {"cov80", "MSIS95"} <= set(summary["summary"][0])
    f = pd.read_csv(out / "forecasts.csv")
    assert (f["SeasonalNaive-lo-80"] <= f["SeasonalNaive"]).all() and (f["SeasonalNaive"] <= f["SeasonalNaive-hi-80"]).all()
    assert (out / "coverage_by_horizon.png").stat().st_size > 0


def _tiny_dlinear(**kw) -> DLinear:
    return DLinear(**{**dict(h=12, input_size=24, max_epochs=2, progress=False, seed=0), **kw})


def test_holdout_calibration_is_the_first_cutoffs_model_on_the_tail_it_held_out():
    """Default ("holdout"): the calibration window c_0 - h is forecast by the very model trained for the first
    cutoff c_0 (one training, not two), from the look-back before c_0 - h; the intervals are its scores'."""
    df = _panel(n_series=24, n=160)
    h, L = 12, 24
    res = backtest(df, [_tiny_dlinear()], h=h, n_windows=1, season_length=24, levels=(80,), calibration_windows=1)
    assert res.global_calibration == "holdout" and res.to_dict()["global_calibration"] == "holdout"
    model = res.fitted["DLinear"]
    ys = [g["y"].to_numpy() for _, g in df.groupby("unique_id", sort=False)]
    c0 = 160 - h
    calib = model.predict(np.stack([y[c0 - h - L: c0 - h] for y in ys]))                 # (S, h)
    scores = np.abs(np.stack([y[c0 - h: c0] for y in ys]) - calib) / np.array([mase_scale(y[: c0 - h], 24)
                                                                               for y in ys])[:, None]
    q = np.array([conformal_quantile(scores[:, k], 80) for k in range(h)])
    half = q[None] * np.array([mase_scale(y[:c0], 24) for y in ys])[:, None]
    lo, hi = res.intervals["DLinear"][80.0]
    f = res.forecasts["DLinear"].to_numpy()
    np.testing.assert_allclose(hi - f, half.reshape(-1), rtol=1e-6)
    np.testing.assert_allclose(f - lo, half.reshape(-1), rtol=1e-6)


def test_holdout_trains_once_and_retrain_twice_and_their_calibration_forecasts_differ(monkeypatch):
    from frozenvit.forecasting.training import NeuralForecaster

    calls = []
    fit = NeuralForecaster.fit
    monkeypatch.setattr(NeuralForecaster, "fit", lambda self, series, val=None: (calls.append(max(map(len, series))),
                                                                                   fit(self, series, val))[1])
    ys = [g["y"].to_numpy() for _, g in _panel(n_series=12, n=160).groupby("unique_id", sort=False)]
    cuts, ccuts = np.full((12, 1), 148), np.full((12, 1), 136)
    p1, c1, _ = _tiny_dlinear().forecast_with_calibration(ys, cuts, ccuts, 12, global_calibration="holdout")
    assert calls == [148]                                    # one training, on the history before c_0
    p2, c2, _ = _tiny_dlinear().forecast_with_calibration(ys, cuts, ccuts, 12, global_calibration="retrain")
    assert calls == [148, 148, 136]                          # the test's training, then one before c_0 - h
    np.testing.assert_array_equal(p1, p2)
    assert not np.allclose(c1, c2)


@pytest.mark.parametrize("kw", [dict(calibration_windows=2), dict(calibration_windows=1, val_size=0)])
def test_holdout_refuses_calibration_windows_the_model_trained_on(kw):
    """Windows outside the held-out tail are training targets of the first cutoff's model: in-sample errors,
    too small; holdout refuses them, before any training, instead of calibrating on them."""
    model = _tiny_dlinear(val_size=kw.get("val_size"))
    with pytest.raises(SeriesError, match="validation tail"):
        backtest(_panel(n_series=6, n=200), [SeasonalNaive(24), model], h=12, n_windows=1, season_length=24,
                 levels=(80,), calibration_windows=kw["calibration_windows"])
    res = backtest(_panel(n_series=6, n=200), [model], h=12, n_windows=1, season_length=24, levels=(80,),
                   calibration_windows=kw["calibration_windows"], global_calibration="retrain")
    assert res.global_calibration == "retrain"
    ok = _tiny_dlinear(val_size=24)                           # a tail of 2 windows holds 2 calibration windows
    backtest(_panel(n_series=6, n=200), [ok], h=12, n_windows=1, season_length=24, levels=(80,),
             calibration_windows=2)
    from frozenvit.backbone.suite.errors import ParameterError

    with pytest.raises(ParameterError, match="global_calibration"):
        backtest(_panel(n_series=6, n=200), [ok], h=12, season_length=24, levels=(80,), global_calibration="x")


@pytest.mark.parametrize("how", ["holdout", "retrain"])
def test_no_calibration_mode_lets_values_after_the_first_cutoff_reach_its_intervals(how):
    df = _panel(n_series=8, n=260)
    models = [_tiny_dlinear(h=24, input_size=48, max_epochs=1)]
    kw = dict(h=24, n_windows=2, season_length=24, levels=(80,), calibration_windows=1, global_calibration=how)
    a = backtest(df, models, **kw)
    first = a.forecasts["cutoff"].min()
    poisoned = df.copy()
    poisoned.loc[poisoned["ds"] > first, "y"] *= 7
    b = backtest(poisoned, models, **kw)
    w0 = (a.forecasts["cutoff"] == first).to_numpy()
    for ia, ib in zip(a.intervals["DLinear"][80.0], b.intervals["DLinear"][80.0]):
        assert np.isfinite(ia[w0]).all()
        np.testing.assert_array_equal(ia[w0], ib[w0])
