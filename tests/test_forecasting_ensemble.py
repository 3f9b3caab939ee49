"""Forecast combinations: the median/mean of the members' columns, members fitted once, members
added as columns and tested against the combination, the CLI's `median(a,b)` syntax."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.cli import main
from frozenvit.forecasting import Ensemble, Naive, SeasonalNaive, backtest
from frozenvit.forecasting.ensemble import parse_models


def _panel(n_series: int = 5, n: int = 150, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t,
                                    "y": 10 + 2 * np.sin(2 * np.pi * t / 12 + i) + 0.05 * t + rng.normal(0, 0.4, n)})
                      for i in range(n_series)], ignore_index=True)


class WeeklyNaive(SeasonalNaive):
    """A second seasonal naive under its own alias, so that three members have distinct names."""


class CountingNaive(Naive):
    """Naive that counts its `forecast_cutoffs` calls (class-wide, reset by the test)."""

    calls = 0

    def forecast_cutoffs(self, *args, **kw):
        CountingNaive.calls += 1
        return super().forecast_cutoffs(*args, **kw)


def test_median_and_mean_are_the_elementwise_median_and_mean_of_the_members():
    members = [SeasonalNaive(12), Naive(), WeeklyNaive(6)]
    res = backtest(_panel(), [Ensemble(members, "median"), Ensemble(members, "mean")], h=6, n_windows=2,
                   season_length=12)
    cols = res.forecasts[[m.alias for m in members]].to_numpy()
    np.testing.assert_allclose(res.forecasts["median(SeasonalNaive,Naive,WeeklyNaive)"], np.median(cols, axis=1))
    np.testing.assert_allclose(res.forecasts["mean(SeasonalNaive,Naive,WeeklyNaive)"], cols.mean(axis=1))


def test_a_member_that_also_runs_alone_is_fitted_once():
    CountingNaive.calls = 0
    solo = CountingNaive()
    res = backtest(_panel(), [Ensemble([CountingNaive(), SeasonalNaive(12)]), solo, SeasonalNaive(12)], h=6,
                   season_length=12)
    assert CountingNaive.calls == 1                         # an equal model, not the same object: still reused
    assert res.models == ["median(CountingNaive,SeasonalNaive)", "CountingNaive", "SeasonalNaive"]
    CountingNaive.calls = 0
    backtest(_panel(), [Ensemble([solo, SeasonalNaive(12)]), solo], h=6, season_length=12, levels=(80,))
    assert CountingNaive.calls == 2                         # once for the windows, once for the calibration


def test_members_not_named_alone_become_columns_and_are_tested_against_the_combination():
    res = backtest(_panel(n_series=8), [Ensemble([SeasonalNaive(12), Naive()], "mean")], h=6, season_length=12)
    assert res.models == ["mean(SeasonalNaive,Naive)", "SeasonalNaive", "Naive"]
    dm = res.dm_vs_members()
    assert list(dm.index) == [("mean(SeasonalNaive,Naive)", "SeasonalNaive"), ("mean(SeasonalNaive,Naive)", "Naive")]
    direct = res.dm_test(baseline="Naive").loc["mean(SeasonalNaive,Naive)"]
    assert dm.loc[("mean(SeasonalNaive,Naive)", "Naive"), "p_value"] == direct["p_value"]
    assert res.to_dict()["ensembles"] == {"mean(SeasonalNaive,Naive)": ["SeasonalNaive", "Naive"]}


def test_an_ensemble_has_conformal_intervals_from_its_combined_calibration_forecasts():
    res = backtest(_panel(n_series=20), [Ensemble([SeasonalNaive(12), Naive()], "mean")], h=6, season_length=12,
                   levels=(80,), calibration_windows=1)
    lo, hi = res.intervals["mean(SeasonalNaive,Naive)"][80.0]
    f = res.forecasts["mean(SeasonalNaive,Naive)"].to_numpy()
    assert np.isfinite(lo).all() and (lo < f).all() and (f < hi).all()


def test_ensemble_refuses_one_member_or_an_unknown_rule():
    from frozenvit.backbone.suite.errors import InvalidParameterError, ParameterError

    with pytest.raises(ParameterError, match="two or more"):
        backtest(_panel(), [Ensemble([Naive()])], h=6, season_length=12)
    with pytest.raises(InvalidParameterError, match="'how' parameter of Ensemble must be"):
        backtest(_panel(), [Ensemble([Naive(), SeasonalNaive(12)], "vote")], h=6, season_length=12)


def test_parse_models_reads_combinations_and_names():
    names = ("snaive", "ets", "dlinear")
    assert parse_models("snaive, MEDIAN(ets, dlinear),mean(snaive,ets)", names) == [
        "snaive", ("median", ("ets", "dlinear")), ("mean", ("snaive", "ets"))]
    for bad, why in [("median(ets)", "two or more"), ("median(ets,ets)", "two or more"), ("vote(ets,snaive)", "vote"),
                     ("median(ets,dlinear", "unbalanced"), ("median(mean(ets,snaive),dlinear)", "nested"),
                     ("median(ets,prophet)", "prophet"), ("ets,ets", "twice"), (",", "at least one")]:
        with pytest.raises(ValueError, match=why):
            parse_models(bad, names)


def test_cli_runs_a_combination_and_writes_its_dm_tests(tmp_path):
    path = tmp_path / "p.csv"
    _panel(n_series=6).to_csv(path, index=False)
    out = tmp_path / "out"
    assert main(["forecast", "backtest", "--csv", str(path), "--h", "6", "--windows", "2", "--season-length", "12",
                 "--models", "snaive,mean(snaive,naive)", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["models"] == ["SeasonalNaive", "mean(SeasonalNaive,Naive)", "Naive"]
    assert [(r["ensemble"], r["member"]) for r in summary["dm_vs_members"]] == [
        ("mean(SeasonalNaive,Naive)", "SeasonalNaive"), ("mean(SeasonalNaive,Naive)", "Naive")]
