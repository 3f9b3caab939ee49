"""forecasting: PatchTST and DLinear beside statistical baselines, evaluated by rolling-origin
backtests with MASE per horizon step. Imports no vision code.

    from frozenvit.forecasting import read_wide_csv, backtest, SeasonalNaive, ETS, DLinear, PatchTST
    df = read_wide_csv("ETTh2.csv")                                   # long: unique_id, ds, y
    res = backtest(df, [SeasonalNaive(24), ETS(24), DLinear(h=48), PatchTST(h=48)],
                   h=48, n_windows=8, season_length=24)
    res.mase_by_horizon()                                             # model x step
    backtest(df, [SeasonalNaive(24), DLinear(h=48)], h=48, n_windows=8, season_length=24,
             input_size="auto", short_series="skip")                  # look-back from the data
    backtest(df, [ETS(24), Ensemble([ETS(24), DLinear(h=48)], how="median")], h=48,
             levels=(80, 95)).interval_summary()                      # conformal coverage and MSIS
    forecast(df, [ETS(24), DLinear(h=48)], h=48, season_length=24).frame   # the next 48 values

Every model is a scikit-learn estimator with one contract, `Forecaster.forecast_cutoffs`, which
`backtest` calls for all of them alike. Names are imported on first use (PEP 562): `frozenvit --help`
does not load torch or statsforecast.
"""
from __future__ import annotations

from frozenvit.backbone.suite.lazy import lazy_exports

_API = {
    "auto": ("AutoForecaster",),
    "backtest": ("BacktestResult", "SeasonWarning", "UndefinedMASEWarning", "backtest"),
    "base": ("Forecaster", "ParameterError"),
    "baselines": ("ARIMA", "ETS", "LocalModel", "Naive", "SeasonalNaive", "StatsForecastModel", "Theta"),
    "data": ("long_to_wide", "read_long_csv", "read_m4", "read_wide_csv", "validate", "wide_to_long"),
    "dlinear": ("DLinear", "DLinearConfig", "DLinearNet"),
    "ensemble": ("Ensemble",),
    "future": ("Forecast", "forecast", "future_stamps"),
    "errors": ("SeriesError",),
    "fallback": ("WithFallback",),
    "frozen_vit": ("FrozenViTForecaster", "FrozenViTConfig", "FrozenViTNet", "trainable_parameters"),
    "intervals": ("conformal_bounds", "conformal_quantile"),
    "layers": ("RevIN", "FastDropout", "patch_count", "patchify"),
    "lookback": ("ShortSeriesWarning", "auto_input_size", "fitting_input_size"),
    "metrics": ("DMResult", "coverage", "diebold_mariano", "interval_score_terms", "mase", "mase_scale", "msis",
                "smape"),
    "paper": ("paper_config", "paper_protocol"),
    "patchtst": ("PatchTST", "PatchTSTConfig", "PatchTSTNet"),
    "training": ("NeuralForecaster",),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _API, globals())
