"""Every forecaster's contract for its hyperparameters and its state: a value no fit can use is sklearn's
InvalidParameterError (ParameterError for a combination), raised before any work; "not fitted" is sklearn's
NotFittedError; `save` returns the artifact's Path."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.errors import InvalidParameterError, NotFittedError, ParameterError
from frozenvit.forecasting import (ETS, DLinear, Ensemble, FrozenViTForecaster, Naive, PatchTST, SeasonalNaive,
                                   WithFallback, backtest)

BAD = {
    "PatchTST lr": lambda: PatchTST(h=4, lr=-1.0),
    "PatchTST norm": lambda: PatchTST(h=4, norm="group"),
    "PatchTST dropout": lambda: PatchTST(h=4, dropout=1.5),
    "PatchTST lr_schedule": lambda: PatchTST(h=4, lr_schedule="cosine"),
    "DLinear loss": lambda: DLinear(h=4, loss="huber"),
    "DLinear max_epochs": lambda: DLinear(h=4, max_epochs=0),
    "FrozenViTForecaster n_blocks": lambda: FrozenViTForecaster(h=4, n_blocks=0),
    "SeasonalNaive season_length": lambda: SeasonalNaive(0),
    "ETS season_length": lambda: ETS(season_length=-2),
    "Ensemble how": lambda: Ensemble([Naive(), SeasonalNaive(4)], how="vote"),
    "WithFallback model": lambda: WithFallback("dlinear", SeasonalNaive(4)),
}
COMBINATIONS = {
    "PatchTST d_model / n_heads": lambda: PatchTST(h=4, input_size=32, d_model=10, n_heads=4),
    "PatchTST input_size < patch_len": lambda: PatchTST(h=4, input_size=8),
    "DLinear val_size < h": lambda: DLinear(h=4, input_size=16, val_size=2),
    "Ensemble of one": lambda: Ensemble([Naive()]),
}


def _panel(n: int = 80) -> pd.DataFrame:
    t = np.arange(n)
    return pd.DataFrame({"unique_id": "a", "ds": t, "y": 5 + np.sin(t / 2) + 0.01 * t})


@pytest.mark.parametrize("make", BAD.values(), ids=BAD.keys())
def test_a_bad_hyperparameter_is_sklearns_invalid_parameter_error_before_any_work(make):
    with pytest.raises(InvalidParameterError):
        backtest(_panel(), [make()], h=4, season_length=4)


@pytest.mark.parametrize("make", COMBINATIONS.values(), ids=COMBINATIONS.keys())
def test_a_combination_no_model_can_use_is_a_parameter_error(make):
    with pytest.raises(ParameterError):
        make().check_params()


def test_a_bad_hyperparameter_is_refused_by_fit_too():
    with pytest.raises(InvalidParameterError, match="loss"):
        DLinear(h=4, input_size=16, loss="huber").fit([np.ones(40)])
    with pytest.raises(InvalidParameterError, match="season_length"):
        SeasonalNaive(0).fit(np.ones(10))


@pytest.mark.parametrize("model", [DLinear(h=4, input_size=16), SeasonalNaive(4)], ids=["neural", "local"])
def test_predict_before_fit_is_not_fitted_error(model):
    with pytest.raises(NotFittedError, match="not fitted"):
        model.predict([np.ones(20)]) if isinstance(model, DLinear) else model.predict(4)


def test_save_before_fit_is_not_fitted_error_and_after_fit_returns_the_path(tmp_path):
    model = DLinear(h=4, input_size=16, max_epochs=1, progress=False)
    with pytest.raises(NotFittedError):
        model.save(tmp_path / "m")
    got = model.fit([np.sin(np.arange(60) / 3)]).save(str(tmp_path / "m"))
    assert got == Path(tmp_path / "m") and isinstance(got, Path)


@pytest.mark.parametrize("kw", [{"input_size": "big"}, {"input_size": 0}, {"short_series": "drop"}],
                         ids=["input_size text", "input_size 0", "short_series"])
def test_a_bad_look_back_or_short_series_setting_of_backtest_is_a_parameter_error(kw):
    with pytest.raises(ParameterError):
        backtest(_panel(), [SeasonalNaive(4), DLinear(h=4, input_size=16)], h=4, season_length=4, **kw)
