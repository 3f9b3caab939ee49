"""Rolling-origin backtests: no leakage past a cutoff, and the neural models learn."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


from frozenvit.forecasting import ETS, DLinear, PatchTST, SeasonalNaive, SeriesError, backtest



def _sines(n: int = 400, n_series: int = 2, noise: float = 0.3, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    parts = []
    for i in range(n_series):
        y = 10 + 3 * np.sin(2 * np.pi * t / 24 + i) + 2 * np.sin(2 * np.pi * t / 7) + rng.normal(0, noise, n)
        parts.append(pd.DataFrame({"unique_id": f"s{i}", "ds": t, "y": y}))
    return pd.concat(parts, ignore_index=True)


def _tiny_patchtst(**kw) -> PatchTST:
    return PatchTST(h=24, input_size=96, d_model=16, n_heads=2, d_ff=32, n_layers=1, lr=3e-3, max_epochs=6,
                    batch_size=64, val_size=48, progress=False, **kw)


def _tiny_dlinear(**kw) -> DLinear:
    return DLinear(h=24, input_size=96, lr=1e-2, max_epochs=6, val_size=48, progress=False, **kw)


def test_changing_values_after_a_cutoff_leaves_its_forecasts_unchanged():
    df = _sines()
    models = [SeasonalNaive(24), _tiny_dlinear(), _tiny_patchtst()]
    a = backtest(df, models, h=24, n_windows=3, season_length=24, refit_every=1)
    first_cut = a.forecasts["cutoff"].min()
    poisoned = df.copy()
    after = poisoned["ds"] > first_cut
    poisoned.loc[after, "y"] = poisoned.loc[after, "y"] * 5 + 100
    b = backtest(poisoned, models, h=24, n_windows=3, season_length=24, refit_every=1)
    cols = [m.alias for m in models]
    w0a = a.forecasts[a.forecasts["cutoff"] == first_cut]
    w0b = b.forecasts[b.forecasts["cutoff"] == first_cut]
    pd.testing.assert_frame_equal(w0a[cols], w0b[cols])
    pd.testing.assert_frame_equal(a.scales[a.scales["cutoff"] == first_cut], b.scales[b.scales["cutoff"] == first_cut])
    later = a.forecasts["cutoff"] > first_cut                              # the poison does reach later windows
    assert not np.allclose(a.forecasts.loc[later, cols[-1]], b.forecasts.loc[later, cols[-1]])


def test_dlinear_and_patchtst_learn_a_noisy_sine_well_below_seasonal_naive():
    df = _sines(n=600, n_series=1)
    models = [SeasonalNaive(24), _tiny_dlinear(), _tiny_patchtst()]
    for m in models[1:]:
        m.max_epochs = 25
    res = backtest(df, models, h=24, n_windows=3, season_length=24)
    mase = res.mase()
    assert mase["DLinear"] < 0.5 * mase["SeasonalNaive"]
    assert mase["PatchTST"] < 0.5 * mase["SeasonalNaive"]
    dm = res.dm_test()
    assert (dm["dm_stat"] < 0).all() and (dm["p_value"] < 0.01).all()


def test_backtest_rejects_series_too_short_for_lookback_and_windows():
    df = _sines(n=150)
    with pytest.raises(SeriesError, match=r"has 150 values; this backtest needs 216"):
        backtest(df, [SeasonalNaive(24), _tiny_dlinear()], h=24, n_windows=2, season_length=24)


def test_ets_drops_seasonality_when_history_is_shorter_than_two_seasons():
    y = 5 + np.sin(np.arange(40) / 2.0)
    f = ETS(season_length=24).fit(y).predict(6)
    assert f.shape == (6,) and np.isfinite(f).all()


def test_ets_beats_naive_on_a_trending_seasonal_series():
    t = np.arange(120)
    y = 50 + 0.5 * t + 5 * np.sin(2 * np.pi * t / 12) + np.random.default_rng(0).normal(0, 0.2, t.size)
    f = ETS(season_length=12).fit(y[:108]).predict(12)
    assert np.mean(np.abs(f - y[108:])) < 0.25 * np.mean(np.abs(SeasonalNaive(12).fit(y[:108]).predict(12) - y[108:]))
