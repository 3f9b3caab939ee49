"""Metrics against hand-computed and published golden values, and Diebold-Mariano vs scipy."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from frozenvit.forecasting import Naive, SeasonalNaive, backtest, diebold_mariano, read_m4

M4 = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "m4_hourly"


def test_seasonal_naive_backtest_matches_hand_computed_mase():
    # y = t^2, m = 2, h = 2, two windows of step 2.
    # window 0: history [0,1,4,9] -> forecast [4,9] vs [16,25]; scale mean(4, 8) = 6
    # window 1: history [0..25]   -> forecast [16,25] vs [36,49]; scale mean(4, 8, 12, 16) = 10
    df = pd.DataFrame({"unique_id": "sq", "ds": np.arange(8), "y": np.arange(8.0) ** 2})
    res = backtest(df, [SeasonalNaive(2)], h=2, n_windows=2, step_size=2, season_length=2)
    assert res.forecasts["cutoff"].unique().tolist() == [3, 5]
    np.testing.assert_allclose(res.forecasts["SeasonalNaive"], [4, 9, 16, 25])
    np.testing.assert_allclose(res.scales["scale"], [6, 10])
    np.testing.assert_allclose(res.mase_by_horizon().loc["SeasonalNaive"], [2.0, 38 / 15])
    assert res.mase()["SeasonalNaive"] == pytest.approx(34 / 15)
    smape = np.mean([200 * 12 / 20, 200 * 16 / 34, 200 * 20 / 52, 200 * 24 / 74])
    assert res.overall("smape")["SeasonalNaive"] == pytest.approx(smape)


def test_diebold_mariano_without_lag_is_the_one_sample_t_test():
    d = np.random.default_rng(0).normal(0.3, 1.0, 40)
    r = diebold_mariano(d, lag=0)
    ref = stats.ttest_1samp(d, 0.0)
    assert r.statistic == pytest.approx(ref.statistic)
    assert r.p_value == pytest.approx(ref.pvalue)


def test_diebold_mariano_hac_variance_widens_for_autocorrelated_differentials():
    rng = np.random.default_rng(1)
    e = rng.normal(size=400)
    d = 0.1 + np.convolve(e, np.ones(6), mode="valid")          # MA(5): positively autocorrelated
    assert abs(diebold_mariano(d, lag=5).statistic) < abs(diebold_mariano(d, lag=0).statistic)


@pytest.mark.skipif(not (M4 / "Hourly-train.csv").is_file(), reason="../shared/data/m4_hourly absent")
def test_m4_hourly_seasonal_naive_reproduces_official_mase():
    df = read_m4(M4 / "Hourly-train.csv", M4 / "Hourly-test.csv")
    res = backtest(df, [SeasonalNaive(24), Naive()], h=48, n_windows=1, season_length=24)
    mase = res.mase()
    assert round(mase["SeasonalNaive"], 3) == 1.193
    assert round(res.overall("smape")["SeasonalNaive"], 3) == 13.912
    assert round(mase["Naive"], 3) == 11.608
    assert round(res.overall("smape")["Naive"], 3) == 43.003
    by_h = res.mase_by_horizon().loc["SeasonalNaive"]
    golden = {1: 0.711, 6: 0.763, 12: 1.017, 24: 0.778, 25: 1.147, 36: 1.503, 48: 1.355}
    assert {k: round(float(by_h[k]), 3) for k in golden} == golden
