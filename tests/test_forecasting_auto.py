"""AutoForecaster (`--models auto`): a per-series choice validated inside each training history only."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from frozenvit.backbone.suite.errors import ParameterError
from frozenvit.forecasting import DLinear, Naive, SeasonalNaive, Theta, backtest
from frozenvit.forecasting.auto import MEDIAN, AutoForecaster, combine_validated, effective_weights


def _panel(n_series: int = 6, n: int = 200, seed: int = 0, lengths=None) -> pd.DataFrame:
    """Half the series seasonal (seasonal naive wins), half a random walk (naive wins)."""
    rng = np.random.default_rng(seed)
    parts = []
    for i in range(n_series):
        m = n if lengths is None else lengths[i]
        t = np.arange(m)
        y = (10 + 5 * np.sin(2 * np.pi * t / 12) + rng.normal(0, 0.1, m)) if i % 2 == 0 else \
            50 + np.cumsum(rng.normal(0, 1, m))
        parts.append(pd.DataFrame({"unique_id": f"s{i}", "ds": t, "y": y}))
    return pd.concat(parts, ignore_index=True)


def _series(df: pd.DataFrame) -> list[np.ndarray]:
    return [g["y"].to_numpy() for _, g in df.groupby("unique_id", sort=False)]


def test_select_takes_each_series_validated_best_candidate():
    ys = _series(_panel())
    cuts = np.array([[y.size - 12] for y in ys])
    auto = AutoForecaster([Naive(), SeasonalNaive(12)], how="select", windows=8)
    preds, errors = auto.candidate_forecasts(ys, cuts, 12)
    assert errors.shape == (2, 6, 8) and np.isfinite(errors).all()
    chosen = errors.mean(axis=2).argmin(axis=0)
    assert chosen.tolist() == [1, 0, 1, 0, 1, 0]              # seasonal series: snaive; random walks: naive
    out, _ = auto.forecast_cutoffs(ys, cuts, 12)
    np.testing.assert_array_equal(out, preds[chosen, np.arange(6)])


def test_weights_sum_to_one_per_series_and_favour_the_smaller_error():
    errors = np.array([[1.0, 4.0], [3.0, np.nan]])
    w = AutoForecaster([Naive(), SeasonalNaive(12)], how="weights").weights(errors)
    np.testing.assert_allclose(w.sum(axis=0), 1.0)
    assert w[0, 0] == pytest.approx(0.75) and w[:, 1].tolist() == [1.0, 0.0]


def test_global_takes_the_candidate_best_on_average_for_every_series():
    errors = np.array([[1.0, 1.0, 1.0], [0.5, 3.0, 0.9]])       # mean 1.0 against 1.47
    w = AutoForecaster([Naive(), SeasonalNaive(12)], how="global").weights(errors)
    assert w.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]


def test_a_series_without_a_validated_candidate_takes_the_first_that_forecasts_it():
    preds = np.stack([np.full((1, 1, 2), np.nan), np.full((1, 1, 2), 7.0)])          # (C=2, S=1, W=1, h=2)
    np.testing.assert_array_equal(combine_validated(preds, np.zeros((2, 1))), np.full((1, 1, 2), 7.0))


def test_a_candidate_with_too_long_a_look_back_is_left_out_for_the_short_series():
    df = _panel(lengths=[200, 200, 200, 200, 60, 60])
    net = DLinear(h=12, input_size=96, max_epochs=1, progress=False)
    auto = AutoForecaster([SeasonalNaive(12), net])
    ys = _series(df)
    preds, errors = auto.candidate_forecasts(ys, np.array([[y.size - 12] for y in ys]), 12)
    assert np.isnan(preds[1, 4:]).all() and np.isnan(errors[1, 4:]).all()
    assert np.isfinite(preds[1, :4]).all() and np.isfinite(errors[1, :4, 0]).all()
    res = backtest(df, [auto], h=12, season_length=12)
    assert res.forecasts["unique_id"].nunique() == 6 and np.isfinite(res.forecasts["Auto"]).all()


def test_values_after_the_first_cutoff_do_not_change_the_choice_or_the_first_window(poison_after):
    """Poison every value after the first cutoff: the choice and window 0's forecasts stay the same."""
    df = _panel()
    net = DLinear(h=12, input_size=36, max_epochs=2, val_size=12, progress=False)
    kw = dict(h=12, n_windows=3, season_length=12)
    models = [AutoForecaster([Naive(), SeasonalNaive(12), net], how="weights")]
    a = backtest(df, models, **kw)
    first = a.forecasts["cutoff"].min()
    poisoned = poison_after(df, first)
    b = backtest(poisoned, models, **kw)
    w0 = (a.forecasts["cutoff"] == first).to_numpy()
    np.testing.assert_array_equal(a.forecasts.loc[w0, "Auto"], b.forecasts.loc[w0, "Auto"])
    assert not np.allclose(a.forecasts.loc[~w0, "Auto"], b.forecasts.loc[~w0, "Auto"])
    ys_a, ys_b = _series(df), _series(poisoned)
    cuts = np.array([[y.size - 36, y.size - 24, y.size - 12] for y in ys_a])
    ea = models[0].candidate_forecasts(ys_a, cuts, 12)[1]
    eb = models[0].candidate_forecasts(ys_b, cuts, 12)[1]
    np.testing.assert_array_equal(ea, eb)                    # the validation errors: history only


def test_auto_gets_conformal_intervals_like_any_model():
    res = backtest(_panel(), [AutoForecaster([Naive(), SeasonalNaive(12)])], h=12, n_windows=2, season_length=12,
                   levels=(80,), calibration_windows=1)
    lo, hi = res.intervals["Auto"][80.0]
    assert np.isfinite(lo).any() and (lo <= hi)[np.isfinite(lo)].all()


def test_auto_refuses_no_candidates_twice_named_candidates_and_an_unknown_rule():
    with pytest.raises(ParameterError):
        AutoForecaster([]).check_params()
    with pytest.raises(ParameterError):
        AutoForecaster([Naive(), Naive()]).check_params()
    with pytest.raises(InvalidParameterError):
        AutoForecaster([Naive()], how="best").check_params()


def test_the_cli_builds_auto_over_its_own_candidates():
    from frozenvit.forecasting.cli import make_models
    from frozenvit.forecasting.defaults import AUTO_CANDIDATES

    ets, auto = make_models(["ets", "auto"], h=12, season_length=12, input_size=48)
    assert [m.alias for m in auto.candidates] == ["SeasonalNaive", "Theta", "ETS", "DLinear", "PatchTST"]
    assert len(AUTO_CANDIDATES) == 5
    assert all(c is not ets for c in auto.candidates)
    # its medians are the command's two median columns: of all five, and of all but seasonal naive
    assert [n for n, _ in auto.medians()] == [MEDIAN, "median(Theta,ETS,DLinear,PatchTST)"]
    from frozenvit.forecasting.defaults import BACKTEST_COMMAND
    assert re.findall(r"median\([^)]*\)", BACKTEST_COMMAND["models"]) == \
        ["median(theta,ets,dlinear,patchtst)", "median(snaive,theta,ets,dlinear,patchtst)"]


def test_a_median_of_named_members_is_one_more_candidate_validated_where_they_all_are():
    """median_of=[("Naive", "SeasonalNaive")]: one more row after the median of all three, the median (the mean)
    of those two, its error where both are validated; a series too short to validate keeps it only where both
    members forecast it; a median naming a stranger or one member is refused."""
    cands = [Naive(), SeasonalNaive(12), SeasonalNaive(24)]
    auto = AutoForecaster(cands, median_of=[("Naive", "SeasonalNaive")])
    assert [n for n, _ in auto.medians()] == [MEDIAN, "median(Naive,SeasonalNaive)"]
    df = _panel()
    series = [g["y"].to_numpy(float) for _, g in df.groupby("unique_id", sort=False)]
    cutoffs = np.array([[len(y) - 24, len(y) - 12] for y in series])
    preds, errors = auto.candidate_forecasts(series, cutoffs, 12)
    assert preds.shape[0] == errors.shape[0] == 5
    np.testing.assert_allclose(preds[4], preds[:2].mean(axis=0))
    np.testing.assert_allclose(preds[3], np.median(preds[:3], axis=0))
    # series 2: no validation; forecast by Naive and SeasonalNaive(24) only, so neither median is its candidate
    errors = np.array([[1.0, 1.0, np.nan], [2.0, 2.0, np.nan], [2.0, 2.0, np.nan], [1.5, 1.5, np.nan], [0.5, 0.5, np.nan]])
    forecasts = np.ones((5, 3), dtype=bool)
    forecasts[1, 2] = False
    w = AutoForecaster(cands, top=1, median_of=[("Naive", "SeasonalNaive")]).weights(errors, forecasts)
    assert w[:, 0].tolist() == [0, 0, 0, 0, 1] and w[:, 2].tolist() == [1, 0, 0, 0, 0]
    for bad in ([("Naive", "Theta")], [("Naive",)], [("Naive", "Naive", "SeasonalNaive")]):
        with pytest.raises(ParameterError):
            AutoForecaster(cands, median_of=bad).check_params()


@pytest.mark.slow
def test_auto_on_ray_gives_the_local_forecasts(tmp_path):
    pytest.importorskip("ray")
    df = _panel()
    models = [AutoForecaster([Naive(), SeasonalNaive(12)])]
    kw = dict(h=12, n_windows=2, season_length=12, levels=(80,))
    local = backtest(df, models, **kw)
    on_ray = backtest(df, models, **kw, engine="ray", workers=2)
    pd.testing.assert_frame_equal(on_ray.forecasts_with_intervals(), local.forecasts_with_intervals())
    pd.testing.assert_frame_equal(on_ray.auto_weights(), local.auto_weights())      # the choice made in the task


def test_global_weights_are_the_same_for_every_series_that_all_candidates_forecast():
    errors = np.array([[1.0, 2.0, 2.0], [2.0, 1.0, np.nan]])       # relative means over series 0, 1: 1.5, 1.5
    w = AutoForecaster([Naive(), SeasonalNaive(12)], how="global_weights").weights(errors)
    np.testing.assert_allclose(w[:, :2], 0.5)
    assert w[:, 2].tolist() == [1.0, 0.0]


def test_global_chooses_for_the_short_series_by_their_own_validation_errors():
    """Series that a candidate cannot forecast form their own group: the best of theirs, not the long series'."""
    errors = np.array([[0.9, 0.9, 1.0, 1.0],            # snaive
                       [0.7, 0.7, 4.0, 4.0],            # ETS: best on the long series, worst on the short
                       [0.5, 0.5, np.nan, np.nan]])     # a neural candidate: the long series only
    w = AutoForecaster([Naive(), SeasonalNaive(12), DLinear(h=12)], how="global").weights(errors)
    assert w.argmax(axis=0).tolist() == [2, 2, 0, 0]


def test_series_the_network_cannot_forecast_are_not_grouped_with_those_it_forecasts_unvalidated():
    """Validated by the same candidates is not enough for one group: series 0-1 are forecast by the network
    (too short for its validation training), series 2-3 are not (too short for its look-back). Each pair
    takes the best of its own errors, and the short pair exactly what auto over the statistical candidates
    alone gives them (the command's forecast of them in the network's column: forecasting.lookback)."""
    errors = np.array([[1.0, 1.0, 2.0, 2.0],            # Naive: best where the network forecasts
                       [1.5, 1.5, 1.0, 1.0],            # seasonal naive: best on the short pair
                       [np.nan] * 4])                   # the network: validated nowhere
    forecasts = np.array([[True] * 4, [True] * 4, [True, True, False, False]])
    auto = AutoForecaster([Naive(), SeasonalNaive(12), DLinear(h=12)], how="global")
    w = auto.weights(errors, forecasts)
    assert w.argmax(axis=0).tolist() == [0, 0, 1, 1] and (w.max(axis=0) == 1).all()
    local = AutoForecaster([Naive(), SeasonalNaive(12)], how="global", median=False)
    np.testing.assert_array_equal(w[:2, 2:], local.weights(errors[:2, 2:]))
    assert (auto.weights(errors)[:, 0] == auto.weights(errors)[:, 2]).all()     # without `forecasts`: one group


def test_a_network_run_alone_and_as_a_candidate_of_auto_trains_once(monkeypatch):
    """backtest shares fits (forecasting.reuse): DLinear alone and inside auto is one training for the
    backtest's cutoffs (plus auto's own for its validation window), same forecasts."""
    from frozenvit.forecasting.training import NeuralForecaster

    trainings = []
    fit = NeuralForecaster.fit
    monkeypatch.setattr(NeuralForecaster, "fit", lambda self, *a, **k: trainings.append(1) or fit(self, *a, **k))
    net = dict(h=12, input_size=24, max_epochs=1, progress=False)
    res = backtest(_panel(), [DLinear(**net), AutoForecaster([SeasonalNaive(12), DLinear(**net, checkpoint_dir=None)])],
                   h=12, n_windows=2, season_length=12)
    assert len(trainings) == 2                                # cutoffs (shared), validation window
    alone = DLinear(**net).forecast_cutoffs(_series(_panel()), np.array([[188, 200] for _ in range(6)]) - 12, 12)[0]
    np.testing.assert_allclose(res.forecasts["DLinear"].to_numpy(), alone.reshape(-1))


def test_fits_are_shared_only_inside_a_backtest():
    from frozenvit.forecasting.reuse import once, shared_fits

    calls = []
    model = SeasonalNaive(12)
    work = lambda: calls.append(1) or np.zeros(3)            # noqa: E731
    once(model, "x", [np.arange(3)], work), once(model, "x", [np.arange(3)], work)
    with shared_fits():
        once(model, "x", [np.arange(3)], work), once(model, "x", [np.arange(3)], work)
        once(model, "x", [np.arange(4)], work)                 # other data: other work
        once(SeasonalNaive(24), "x", [np.arange(3)], work)     # other hyperparameters: other work
    assert len(calls) == 2 + 1 + 1 + 1


def test_backtests_inside_one_outer_shared_fits_fit_an_unchanged_model_once(monkeypatch):
    """Two backtests of other seeds in one outer `shared_fits`: the statistical model (no seed) fits
    once, each seed's network trains for itself; leaving the outer one drops everything."""
    from frozenvit.forecasting.reuse import shared_fits

    calls = []
    each = SeasonalNaive._each_cutoff                          # the fits behind forecast_cutoffs
    monkeypatch.setattr(SeasonalNaive, "_each_cutoff", lambda self, *a, **k: calls.append(1) or each(self, *a, **k))
    net = dict(h=12, input_size=24, max_epochs=1, progress=False)
    run = lambda seed: backtest(_panel(), [SeasonalNaive(12), DLinear(**net, seed=seed)], h=12,  # noqa: E731
                                n_windows=2, season_length=12).forecasts["DLinear"].to_numpy()
    with shared_fits():
        a, b = run(0), run(1)
    assert len(calls) == 1 and not np.allclose(a, b)
    run(0)
    assert len(calls) == 2


def test_global_averages_the_candidates_within_tolerance_of_the_best():
    errors = np.array([[1.0, 1.0], [1.1, 1.1], [2.0, 2.0]])        # means 1.0, 1.1 (within 20 %), 2.0
    cands = [Naive(), SeasonalNaive(12), SeasonalNaive(24)]
    np.testing.assert_allclose(AutoForecaster(cands).weights(errors), [[0.5, 0.5], [0.5, 0.5], [0, 0]])
    assert AutoForecaster(cands, top=1).weights(errors)[:, 0].tolist() == [1.0, 0.0, 0.0]
    assert AutoForecaster(cands, tolerance=0.05).weights(errors)[:, 0].tolist() == [1.0, 0.0, 0.0]


def test_a_series_too_short_to_validate_takes_the_rule_of_the_others_for_its_candidates():
    errors = np.array([[2.0, 2.0, np.nan], [1.0, 1.0, np.nan], [0.1, np.nan, np.nan]])   # series 2: no window
    forecasts = np.array([[True, True, True], [True, True, True], [True, False, False]])   # not the third model
    w = AutoForecaster([Naive(), SeasonalNaive(12), SeasonalNaive(24)], top=1).weights(errors, forecasts)
    assert w[:, 2].tolist() == [0.0, 1.0, 0.0]                     # the best of the two it can use, over series 0, 1


def test_the_default_auto_ignores_values_after_the_first_cutoff_short_series_and_shared_fits_included():
    """Default rule, a series too short for any validation window, DLinear also run alone (one training):
    poisoning every value after the first cutoff leaves the first window's forecasts as they were."""
    df = _panel(lengths=[200, 200, 200, 200, 200, 40])
    net = dict(h=12, input_size=24, max_epochs=2, progress=False)
    models = [DLinear(**net), AutoForecaster([Naive(), SeasonalNaive(12), DLinear(**net)])]
    kw = dict(h=12, n_windows=2, season_length=12, short_series="statistical")
    with pytest.warns(UserWarning, match="s5"):
        a = backtest(df, models, **kw)
    first = a.scales.groupby("unique_id")["cutoff"].min()
    poisoned = df.copy()
    after = poisoned["ds"].to_numpy() > first.loc[poisoned["unique_id"]].to_numpy()
    poisoned.loc[after, "y"] = poisoned.loc[after, "y"] * 5 + 100
    with pytest.warns(UserWarning, match="s5"):
        b = backtest(poisoned, models, **kw)
    w0 = (a.forecasts["cutoff"].to_numpy() == first.loc[a.forecasts["unique_id"]].to_numpy())
    np.testing.assert_array_equal(a.forecasts.loc[w0, "Auto"], b.forecasts.loc[w0, "Auto"])
    assert not np.allclose(a.forecasts.loc[~w0, "Auto"], b.forecasts.loc[~w0, "Auto"])


def test_global_ranks_by_relative_errors_so_one_series_with_large_errors_does_not_decide():
    """Naive is best on three series of four; seasonal naive's mean absolute error is the smaller only because
    of the fourth series' large errors. Relative to each series' least error, naive wins."""
    errors = np.array([[1.0, 1.0, 1.0, 40.0],       # naive: mean 10.75, mean relative 1.083
                       [1.5, 1.5, 1.5, 30.0]])      # snaive: mean 8.625, mean relative 1.375
    w = AutoForecaster([Naive(), SeasonalNaive(12)], top=1).weights(errors)
    assert w[:, 0].tolist() == [1.0, 0.0]


def test_a_network_is_validated_by_a_training_that_never_saw_the_window():
    """A neural candidate's validation forecast comes from a network trained on the history before the window
    (its own early stopping included), not from the network of the first cutoff, which early-stopped on it."""
    ys = _series(_panel())
    net = dict(h=12, input_size=24, max_epochs=2, progress=False)
    cuts = np.array([[y.size - 24, y.size - 12] for y in ys])
    auto = AutoForecaster([SeasonalNaive(12), DLinear(**net)], median=False, windows=1)
    preds, errors = auto.candidate_forecasts(ys, cuts, 12)
    errors = errors[:, :, 0]
    val = cuts[:, :1] - 12
    second = DLinear(**net).forecast_cutoffs(ys, val, 12)[0][:, 0]                                     # (S, h)
    truth = np.stack([y[c - 12: c] for y, c in zip(ys, cuts[:, 0])])
    scale = np.array([np.abs(np.diff(y[: c])).mean() for y, c in zip(ys, val[:, 0])])
    np.testing.assert_allclose(errors[1], np.abs(second - truth).mean(axis=1) / scale)
    np.testing.assert_array_equal(preds[1], DLinear(**net).forecast_cutoffs(ys, cuts, 12)[0])


def test_a_series_too_short_for_the_second_training_is_forecast_but_not_validated_by_the_network():
    df = _panel(lengths=[200, 200, 200, 200, 66, 66])     # 66 - 12: the first cutoff's 24 + 12 + 12 fit, not 12 more
    ys = _series(df)
    net = DLinear(h=12, input_size=24, max_epochs=1, progress=False)
    cuts = np.array([[y.size - 12] for y in ys])
    preds, errors = AutoForecaster([SeasonalNaive(12), net]).candidate_forecasts(ys, cuts, 12)
    assert np.isfinite(preds[1]).all()
    assert np.isfinite(errors[1, :4]).all() and np.isnan(errors[1, 4:]).all()


def test_each_series_is_validated_on_the_windows_every_validating_candidate_can_forecast():
    """Windows of h back from the first cutoff, as many as the history before each allows (a statistical
    model: more than h values; a network: its min_history, 24 + 12 + 12), the same for every candidate
    that validates the series' nearest window; at most `windows`."""
    net = DLinear(h=12, input_size=24, max_epochs=1, progress=False)
    auto = AutoForecaster([SeasonalNaive(12), net], windows=8)
    counts = auto.validation_windows(np.array([188, 100, 60, 50]), 12)
    assert counts.tolist() == [[8, 4, 1, 3], [8, 4, 1, 0]]


def test_a_network_forecasts_its_validation_windows_from_one_training_before_the_earliest():
    ys = _series(_panel())
    net = dict(h=12, input_size=24, max_epochs=2, progress=False)
    cuts = np.array([[y.size - 12] for y in ys])
    errors = AutoForecaster([SeasonalNaive(12), DLinear(**net)], median=False,
                            windows=3).candidate_forecasts(ys, cuts, 12)[1]
    windows = cuts - np.array([[36, 24, 12]])                                            # earliest first
    f = DLinear(**net).forecast_cutoffs(ys, windows, 12)[0]                              # one training
    truth = np.stack([np.stack([y[c: c + 12] for c in cs]) for y, cs in zip(ys, windows)])
    scale = np.array([np.abs(np.diff(y[: c - 12])).mean() for y, c in zip(ys, cuts[:, 0])])
    np.testing.assert_allclose(errors[1][:, ::-1], np.abs(f - truth).mean(axis=2) / scale[:, None])


def test_global_judges_on_every_validation_window_not_the_nearest_alone():
    errors = np.array([[[1.0, 2.0, 2.0], [1.0, 2.0, 2.0]],          # naive: best on the nearest window only
                       [[1.2, 1.0, 1.0], [1.2, 1.0, 1.0]]])         # snaive: best on the two before it
    w = AutoForecaster([Naive(), SeasonalNaive(12)], top=1).weights(errors)
    assert w.tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert AutoForecaster([Naive(), SeasonalNaive(12)], top=1).weights(errors[:, :, :1]).tolist() == [[1.0, 1.0],
                                                                                                      [0.0, 0.0]]


def test_the_backtest_records_what_auto_forecast_each_series_with_and_it_is_those_candidates_mix():
    df = _panel()
    cands = [Naive(), SeasonalNaive(12), Theta(12)]
    res = backtest(df, [AutoForecaster(cands), *cands], h=12, n_windows=2, season_length=12)
    choice = res.choices["Auto"]
    assert choice.candidates == ["Naive", "SeasonalNaive", "Theta", MEDIAN]
    assert choice.weights.shape == (6, 4) and np.allclose(choice.weights.sum(axis=1), 1)
    f = res.forecasts
    median = np.median(f[["Naive", "SeasonalNaive", "Theta"]].to_numpy(), axis=1)
    for i, (_, g) in enumerate(f.groupby("unique_id", sort=False)):      # auto = its weights times the candidates
        parts = np.column_stack([g["Naive"], g["SeasonalNaive"], g["Theta"], median[g.index]])
        np.testing.assert_allclose(g["Auto"], parts @ choice.weights[i], rtol=1e-10)
    combos = choice.combinations()
    assert sum(c["series"] for c in combos) == 6 and " of 6 series" in choice.describe()
    table = res.auto_weights()
    assert list(table.columns) == ["model", "unique_id", "Naive", "SeasonalNaive", "Theta", MEDIAN]
    assert list(table["unique_id"]) == [f"s{i}" for i in range(6)]
    assert res.to_dict()["auto_choices"]["Auto"]["combinations"] == combos


def test_autos_choice_is_that_of_the_backtest_windows_when_intervals_calibrate_on_earlier_ones():
    df = _panel()
    kw = dict(h=12, n_windows=2, season_length=12)
    plain = backtest(df, [AutoForecaster([Naive(), SeasonalNaive(12)], how="select")], **kw)
    with_levels = backtest(df, [AutoForecaster([Naive(), SeasonalNaive(12)], how="select")], **kw,
                           levels=(80,), calibration_windows=2)
    np.testing.assert_array_equal(with_levels.choices["Auto"].weights, plain.choices["Auto"].weights)


def test_a_series_of_no_validated_candidate_is_recorded_with_the_candidate_that_forecast_it():
    preds = np.stack([np.full((2, 1, 3), np.nan), np.full((2, 1, 3), 5.0)])          # (C=2, S=2, W=1, h=3)
    w = effective_weights(preds, np.array([[0.0, 0.0], [0.0, 1.0]]))
    np.testing.assert_array_equal(w, [[0.0, 0.0], [1.0, 1.0]])
    np.testing.assert_array_equal(combine_validated(preds, w), np.full((2, 1, 3), 5.0))


def test_a_series_too_short_to_validate_takes_no_median_of_fewer_candidates_than_the_validated_one():
    """Series 2 has no validation window and only the first three candidates forecast it: its median (of
    three) is not the median of five validated on series 0, so it takes the rule of the three over series 0
    and 1, which the median would have won."""
    cands = [Naive(), SeasonalNaive(12), SeasonalNaive(24), DLinear(h=4), DLinear(h=4, input_size=24)]
    errors = np.array([[3.0, 3.0, np.nan], [1.0, 1.0, np.nan], [2.0, 2.0, np.nan],
                       [0.6, np.nan, np.nan], [0.6, np.nan, np.nan], [0.5, np.nan, np.nan]])     # last row: median
    forecasts = np.array([[True] * 3, [True] * 3, [True] * 3, [True, False, False], [True, False, False],
                          [True] * 3])
    w = AutoForecaster(cands, top=1).weights(errors, forecasts)
    assert w[:, 2].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
