"""Rolling-origin backtests: no leakage past a cutoff, and the neural models learn."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from frozenvit.forecasting import (ETS, DLinear, Forecaster, Naive, PatchTST, PatchTSTConfig, SeasonalNaive,
                                   SeriesError, UndefinedMASEWarning, backtest, mase_scale)


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


def test_changing_values_after_a_cutoff_leaves_its_forecasts_unchanged(poison_after):
    df = _sines()
    models = [SeasonalNaive(24), _tiny_dlinear(), _tiny_patchtst()]
    a = backtest(df, models, h=24, n_windows=3, season_length=24, refit_every=1)
    first_cut = a.forecasts["cutoff"].min()
    poisoned = poison_after(df, first_cut)
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
    with pytest.raises(SeriesError, match=r"'s0' has 150 values \(and 1 more of the 2 series: s1\); this backtest "
                                          r"needs 216 .*, or drop those series"):
        backtest(df, [SeasonalNaive(24), _tiny_dlinear()], h=24, n_windows=2, season_length=24)
    long_one = pd.concat([df[df["unique_id"] == "s0"], _sines(n=400, n_series=1).assign(unique_id="long")])
    with pytest.raises(SeriesError, match=r"'s0' has 150 values; this backtest needs 216"):   # the one short series
        backtest(long_one, [SeasonalNaive(24), _tiny_dlinear()], h=24, n_windows=2, season_length=24)


def test_flat_histories_are_forecast_and_scored_without_mase():
    df = _sines(n=200, n_series=4)
    df.loc[df["unique_id"].isin(["s0", "s2"]), "y"] = 5.0              # s0 and s2 never change
    df.loc[(df["unique_id"] == "s3") & (df["ds"] < 160), "y"] = 0.0   # s3 starts late: its first window is flat
    with pytest.warns(UndefinedMASEWarning, match=r"undefined for 5 of the 8 windows, of 3 of the 4 series "
                                                  r"\(s0, s2, s3\)"):
        res = backtest(df, [SeasonalNaive(24), Naive()], h=24, n_windows=2, season_length=24)
    assert res.mase_undefined["ids"] == ["s0", "s2", "s3"] and res.mase_undefined["windows"] == 5
    assert res.forecasts["unique_id"].nunique() == 4                  # every series is forecast
    f = res.forecasts
    y, p = f["y"].to_numpy(), f["SeasonalNaive"].to_numpy()
    scale = np.array([mase_scale(df.loc[(df["unique_id"] == u) & (df["ds"] <= c), "y"].to_numpy(), 24)
                      for u, c in zip(f["unique_id"], f["cutoff"])])
    per_series = pd.DataFrame({"u": f["unique_id"], "e": np.abs(y - p) / scale}).groupby("u")["e"].mean()
    assert np.isclose(res.mase()["SeasonalNaive"], per_series.dropna().mean())   # over the windows with a MASE
    assert set(per_series.dropna().index) == {"s1", "s3"}
    assert np.isclose(res.overall("mae")["SeasonalNaive"],
                      pd.Series(np.abs(y - p)).groupby(f["unique_id"].to_numpy()).mean().mean())   # MAE over all
    assert np.isfinite(res.summary().loc["Naive", ["MASE", "MAE"]].astype(float)).all()
    assert res.to_dict()["mase_undefined"]["ids"] == ["s0", "s2", "s3"]


def test_backtest_refuses_when_no_window_has_a_mase():
    df = _sines(n=200, n_series=2)
    df["y"] = 5.0
    with pytest.raises(SeriesError, match=r"MASE is undefined for every window of the 2 series \(s0, s1\).*"
                                          r"--mase-season"):
        backtest(df, [SeasonalNaive(24)], h=24, n_windows=2, season_length=24)


def test_ets_drops_seasonality_when_history_is_shorter_than_two_seasons():
    y = 5 + np.sin(np.arange(40) / 2.0)
    f = ETS(season_length=24).fit(y).predict(6)
    assert f.shape == (6,) and np.isfinite(f).all()


def test_ets_beats_naive_on_a_trending_seasonal_series():
    t = np.arange(120)
    y = 50 + 0.5 * t + 5 * np.sin(2 * np.pi * t / 12) + np.random.default_rng(0).normal(0, 0.2, t.size)
    f = ETS(season_length=12).fit(y[:108]).predict(12)
    assert np.mean(np.abs(f - y[108:])) < 0.25 * np.mean(np.abs(SeasonalNaive(12).fit(y[:108]).predict(12) - y[108:]))


class _LastSeen(Forecaster):
    """A forecaster written against the protocol alone: repeats the value before each cutoff."""

    def forecast_cutoffs(self, series, cutoffs, h, *, refit_every=None, progress=None):
        last = np.array([[y[c - 1] for c in cs] for y, cs in zip(series, cutoffs)])       # (S, W)
        return np.repeat(last[..., None], h, axis=-1), None                               # (S, W, h)


def test_backtest_runs_any_forecaster_through_the_one_protocol():
    df = _sines(n=200)
    res = backtest(df, [_LastSeen(), Naive()], h=6, n_windows=3, season_length=24)
    np.testing.assert_array_equal(res.forecasts["_LastSeen"], res.forecasts["Naive"])
    assert res.fitted == {}                                # nothing outlives a window of these two


def test_estimators_have_scikit_learn_params_clone_and_repr():
    m = PatchTST(h=24, d_model=8, n_heads=2)
    twin = clone(m).set_params(lr=0.5)
    assert twin.get_params() == {**m.get_params(), "lr": 0.5} and m.lr == 1e-3
    assert repr(m) == "PatchTST(d_model=8, h=24, n_heads=2)"
    assert m.net_config == PatchTSTConfig(input_size=336, h=24, d_model=8, n_heads=2)
    assert repr(SeasonalNaive(12)) == "SeasonalNaive(season_length=12)"


def test_patchtst_config_refuses_a_network_that_cannot_be_built():
    from frozenvit.backbone.suite.errors import ParameterError

    with pytest.raises(ParameterError, match="not divisible"):
        PatchTSTConfig(input_size=96, h=24, d_model=10, n_heads=4)
    with pytest.raises(ParameterError, match="shorter than one patch"):
        PatchTSTConfig(input_size=8, h=24)


def test_a_neural_model_refuses_a_backtest_of_another_horizon():
    with pytest.raises(SeriesError, match="forecasts h=24 steps but the backtest asks for h=12"):
        backtest(_sines(), [_tiny_dlinear()], h=12, n_windows=1, season_length=24)


@pytest.mark.parametrize("setting", [{"step_size": 0}, {"n_windows": 0}, {"h": -1}, {"season_length": 0},
                                     {"refit_every": 0}])
def test_backtest_refuses_settings_below_one_instead_of_reinterpreting_them(setting):
    kw = {"h": 6, "n_windows": 2, "season_length": 24, **setting}
    with pytest.raises(SeriesError, match=f"{next(iter(setting))} >= 1"):
        backtest(_sines(n=200), [Naive()], **kw)


def test_windows_of_series_of_different_lengths_are_counted_as_asked():
    df = pd.concat([_sines(n=200, n_series=1), _sines(n=230, n_series=1).assign(unique_id="s9")])
    df["ds"] = pd.Timestamp("2021-01-01") + pd.to_timedelta(df["ds"], unit="h")
    res = backtest(df, [Naive()], h=6, n_windows=1, season_length=24)
    assert res.scales["cutoff"].nunique() == 2                  # two timestamps, yet one window per series
    assert res.to_dict()["n_windows"] == 1
    assert {k: len(v) for k, v in res.cutoffs().items()} == {"s0": 1, "s9": 1}
