"""The forecasting Python API as a new user met it: each mistake is a named error, raised before any model
runs where it can be, that names the Python call to write (not a command-line flag)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from frozenvit.backbone.suite.errors import ArtifactError, OutputConflict, ParameterError
from frozenvit.forecasting import (ETS, DLinear, Naive, SeasonalNaive, SeriesError, Theta, backtest, forecast,
                                   validate, wide_to_long)


def _y(n: int = 300, level: float = 10.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return level + 3 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.3, n)


def _long(y: np.ndarray, uid: str = "a") -> pd.DataFrame:
    return pd.DataFrame({"unique_id": uid, "ds": np.arange(len(y)), "y": y})


def _net(**kw) -> DLinear:
    return DLinear(**{"h": 12, "input_size": 48, "max_epochs": 1, "progress": False, **kw})


class Spy(Naive):
    """Naive that counts its runs: a model listed first, to see that a later model's mistake stops all work."""

    runs = 0

    def forecast_cutoffs(self, *args, **kw):
        Spy.runs += 1
        return super().forecast_cutoffs(*args, **kw)


@pytest.fixture()
def spy() -> Spy:
    Spy.runs = 0
    return Spy()


# 1. ETS settings statsforecast cannot fit

@pytest.mark.parametrize("spec", ["ZNN", "ANN", "MNN"])
def test_a_damped_ets_without_a_trend_is_refused_by_check_params(spec):
    with pytest.raises(ParameterError, match=r"damped=True damps a trend.*model='AAN'"):
        ETS(24, model=spec, damped=True).check_params()


def test_a_multiplicative_ets_on_values_at_or_below_zero_is_a_series_error_with_the_cure():
    with pytest.raises(SeriesError, match=r"values <= 0.*model='ZZZ'"):
        ETS(24, model="MAM").fit(_y(level=-50.0))


@pytest.mark.parametrize("task", [backtest, forecast])
def test_multiplicative_ets_on_a_nonpositive_series_is_refused_before_any_model_runs(spy, task):
    df = pd.concat([_long(_y(), "pos"), _long(_y(level=-50.0), "neg")], ignore_index=True)
    with pytest.raises(SeriesError, match=r"series 'neg' has a value <= 0.*model='ZZZ'"):
        task(df, [spy, ETS(24, model="MAM")], h=24, season_length=24)
    assert Spy.runs == 0


# 2. unsorted rows and missing values: the cure in Python's terms, and the command's

def test_unsorted_rows_name_validate_sort_and_the_cure_works():
    df = _long(_y()).sample(frac=1.0, random_state=0)
    with pytest.raises(SeriesError, match=r"validate\(df, sort=True\).*--sort") as e:
        backtest(df, [Naive()], h=24)
    assert "(sort=True)" not in str(e.value)
    backtest(validate(df, sort=True), [Naive()], h=24)


@pytest.mark.parametrize("hole", ["nan", "gap"])
def test_missing_values_name_validate_fill_and_the_cure_works(hole):
    df = _long(_y())
    df = df.assign(y=df["y"].where(df.index != 100)) if hole == "nan" else df.drop(index=100)
    with pytest.raises(SeriesError, match=r"validate\(df, fill='ffill'\).*--fill ffill") as e:
        forecast(df, [Naive()], h=24)
    assert "(fill=)" not in str(e.value)
    forecast(validate(df, fill="ffill"), [Naive()], h=24)


# 3. networks take lists of series and of contexts

@pytest.mark.parametrize("given", [lambda y: y, lambda y: y[:, None], lambda y: 7, lambda y: pd.Series(y)],
                         ids=["1-D array", "2-D array", "a number", "pandas Series"])
def test_a_network_fitted_on_one_series_says_to_pass_a_list(given):
    with pytest.raises(SeriesError, match=r"takes a list of series.*DLinear\.fit\(\[y\]\)"):
        _net().fit(given(_y()))


@pytest.mark.parametrize("given", [lambda y: y, lambda y: 12], ids=["1-D array", "a horizon"])
def test_a_network_predicting_from_one_array_says_to_pass_a_list_of_contexts(given):
    model = _net().fit([_y()])
    with pytest.raises(SeriesError, match=r"takes contexts.*DLinear\.predict\(\[y\]\)"):
        model.predict(given(_y()))
    assert model.predict([_y()]).shape == (1, 12)


# 4. what a backtest leaves on the models given

def test_backtest_leaves_only_history_on_the_models_given_whether_or_not_they_carry_a_season():
    df = _long(_y(400))
    given = [ETS(history="auto"), Theta(history="auto"), ETS(24, history="auto", alias="ETS24")]
    before = [set(vars(m)) for m in given]
    backtest(df, given, h=24, n_windows=2, season_length=24, progress=False)
    assert [set(vars(m)) - b for m, b in zip(given, before)] == [{"history_"}] * 3
    assert all(m.season_length in (None, 24) and not hasattr(m, "model_") for m in given)


# 5. the local models' horizon

@pytest.mark.parametrize("h", [2.7, 0, -1, True, "3"])
def test_local_predict_refuses_a_horizon_that_is_not_a_whole_number_of_steps(h):
    with pytest.raises(ParameterError, match="whole number of steps >= 1"):
        SeasonalNaive(24).fit(_y()).predict(h)


def test_local_predict_takes_an_integral_float_or_numpy_horizon():
    model = SeasonalNaive(24).fit(_y())
    assert model.predict(3.0).shape == model.predict(np.int64(3)).shape == (3,)


# 6. a network of another horizon, and devices

@pytest.mark.parametrize("task", [backtest, forecast])
def test_a_network_of_another_horizon_is_refused_before_any_model_runs(spy, task):
    with pytest.raises(SeriesError, match=r"forecasts h=48 steps but the \w+ asks for h=12"):
        task(_long(_y()), [spy, _net(h=48)], h=12, season_length=24)
    assert Spy.runs == 0


def test_a_device_torch_cannot_parse_is_refused_by_check_params():
    with pytest.raises(ParameterError, match=r"device='banana' is not a torch device"):
        _net(device="banana").check_params()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_on_a_machine_without_it_is_refused_before_training():
    with pytest.raises(ParameterError, match=r"device='cuda'.*no CUDA device.*device='cpu'"):
        _net(device="cuda").fit([_y()])


# 7. saving and loading from Python

def test_save_into_a_users_folder_names_no_command_line_flag(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(OutputConflict) as e:
        _net().fit([_y()]).save(tmp_path / "mine")
    assert "--out" not in str(e.value) and (tmp_path / "mine" / "notes.txt").read_text() == "mine"


def test_load_of_a_file_in_the_folder_says_to_pass_the_folder(tmp_path):
    _net().fit([_y()]).save(tmp_path / "dl")
    with pytest.raises(ArtifactError, match=r"config\.json is a file; pass the folder.*DLinear\.load\("):
        DLinear.load(tmp_path / "dl" / "config.json")


# 8. float32 and large levels

def test_a_network_forecasts_a_series_shifted_by_1e8_as_the_series_itself():
    rng = np.random.default_rng(0)
    t = np.arange(24 * 20)
    y = np.cumsum(10 + 5 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.5, t.size))      # steps of ~10
    small = _net(h=24, input_size=96, max_epochs=2).fit([y[:-24]]).predict([y[:-24]])
    big = _net(h=24, input_size=96, max_epochs=2).fit([y[:-24] + 1e8]).predict([y[:-24] + 1e8])
    np.testing.assert_allclose(big - 1e8, small, atol=0.01)       # float32 alone: off by ~8 (its step at 1e8)


# 10. exports and wide frames

def test_parameter_error_is_importable_from_forecasting():
    from frozenvit.forecasting import ParameterError as Exported

    assert Exported is ParameterError


def test_a_wide_frame_with_a_time_index_is_told_the_wide_to_long_call_that_converts_it():
    idx = pd.date_range("2024-01-01", periods=24 * 10, freq="h")
    df = pd.DataFrame({"a": _y(len(idx)), "b": _y(len(idx), seed=1)}, index=idx)
    with pytest.raises(SeriesError, match=r"wide_to_long\(df\.reset_index\(\), time_col='index', "
                                          r"columns=list\(df\.columns\)\)"):
        backtest(df, [Naive()], h=24)
    long = wide_to_long(df.reset_index(), time_col="index", columns=list(df.columns))
    assert backtest(long, [Naive()], h=24).forecasts["unique_id"].nunique() == 2
