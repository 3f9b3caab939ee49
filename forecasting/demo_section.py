"""The forecasting section of `frozenvit demo`: a rolling backtest on a small real series, then its future.

Data: the Mauna Loa CO2 record that ships with statsmodels (weekly 1958-2001, offline),
averaged to months (526 values; the 5 months with no weekly reading are filled by linear interpolation,
which `validate(fill="interpolate")` does here and `--fill interpolate` does on the command line). Season 12,
horizon 24.
"""
from __future__ import annotations

import time

import pandas as pd

from frozenvit.backbone.suite.report import DemoContext, Section


def co2_monthly() -> pd.DataFrame:
    """Monthly mean CO2 (ppm) as a long frame; months with no weekly reading are NaN here."""
    import statsmodels.api as sm

    weekly = sm.datasets.co2.load_pandas().data["co2"]
    monthly = weekly.resample("MS").mean()
    return pd.DataFrame({"unique_id": "co2", "ds": monthly.index, "y": monthly.to_numpy()})


_CLI_NAMES = {"SeasonalNaive": "snaive", "Naive": "naive", "ETS": "ets"}   # model alias -> --models name


def _co2_axes(fig):
    """Name the value axis with its unit: the record is in parts per million (mole fraction in dry air)."""
    for ax in fig.axes:
        ax.set_ylabel("CO2 (ppm)")
    return fig


def _band_legend(fig, levels):
    """Add the interval bands to the first panel's legend: plot_future shades each level at alpha 0.12, one over
    the other, so the narrower (80 %) band is the darker one."""
    from matplotlib.patches import Patch

    ax = fig.axes[0]
    handles, labels = ax.get_legend_handles_labels()
    levels = sorted(levels)
    for k, lv in enumerate(levels):
        alpha = 1 - (1 - 0.12) ** (len(levels) - k)         # level k lies under the len - k bands as wide or wider
        handles.append(Patch(color="0.3", alpha=alpha, lw=0))
        labels.append(f"{lv:g} % interval")
    ax.legend(handles, labels, fontsize=8, ncol=min(len(handles), 6), loc="upper left")
    return fig


def section(ctx: DemoContext) -> Section:
    from .backtest import backtest
    from .baselines import ETS, Naive, SeasonalNaive
    from .data import validate
    from .dlinear import DLinear
    from .future import forecast
    from .patchtst import PatchTST
    from .plots import plot_forecasts, plot_future, plot_mase_by_horizon

    sec = Section("Forecasting: PatchTST and DLinear against seasonal-naive, naive and ETS", order=30)
    try:
        raw = co2_monthly()
    except Exception as e:  # statsmodels is the `forecast` extra
        return sec.text(f"statsmodels (the 'forecast' extra) is not installed, so its CO2 data is absent: {e}")
    df = validate(raw, fill="interpolate")
    h, m = 24, 12
    windows = 2 if ctx.quick else 4
    epochs = 2 if ctx.quick else 30
    neural = dict(h=h, input_size=120, max_epochs=epochs, patience=5, val_size=2 * h, progress=False, seed=0)
    models = [SeasonalNaive(m), Naive(), *([] if ctx.quick else [ETS(m)]), DLinear(lr=1e-2, batch_size=32, **neural),
              PatchTST(d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.1, lr=3e-3, batch_size=32, **neural)]
    t0 = time.perf_counter()
    res = backtest(df, models, h=h, n_windows=windows, step_size=h, season_length=m)
    took = time.perf_counter() - t0
    sec.text(f"Mauna Loa CO2, monthly means {df['ds'].min():%Y-%m} to {df['ds'].max():%Y-%m} ({len(df)} values; "
             f"{int(raw['y'].isna().sum())} months had no weekly reading and were filled by linear interpolation, "
             "because the demo asks for it: validate(fill='interpolate'), --fill interpolate on the command line; "
             "without it such gaps are refused). Rolling-origin backtest: "
             f"{windows} cutoffs {h} months apart, horizon {h}, season {m}. Statistical models are refitted at "
             f"every cutoff; DLinear and PatchTST train once on the history before the first cutoff. MASE is "
             f"scaled by the seasonal-naive error of each window's own history. Run time {took:.0f} s.")
    summary = res.summary().reset_index()
    sec.table(summary.rename(columns={"dm_stat": "DM vs snaive", "p_value": "DM p"}).to_dict(orient="records"))
    hz = res.mase_by_horizon()
    steps = [s for s in (1, 3, 6, 12, 18, 24) if s in hz.columns]
    sec.table([{"model": mdl, **{f"MASE h={s}": float(hz.loc[mdl, s]) for s in steps}} for mdl in res.models])
    sec.figure(_co2_axes(plot_forecasts(res, df, n_series=1, history=96)),
               "Forecasts at each cutoff against the actual CO2 (ppm); dotted lines: the cutoffs.",
               alt="Mauna Loa CO2 in ppm with each model's 24-month forecasts at every backtest cutoff")
    sec.figure(plot_mase_by_horizon(res), "MASE by horizon step (averaged over cutoffs); dashed: MASE 1.",
               alt="MASE of each model by horizon step, 1 to 24 months")
    ahead = [SeasonalNaive(m), *([] if ctx.quick else [ETS(m)])]
    fc = forecast(df, ahead, h=h, season_length=m, levels=(80, 95))
    drawn = " and ".join(fc.models)
    sec.figure(_band_legend(_co2_axes(plot_future(fc, df, n_series=1, history=96)), fc.levels),
               f"The next {h} months after the record ends ({fc.frame['ds'].min():%Y-%m} on): {drawn}, as "
               f"`frozenvit forecast predict --models {','.join(_CLI_NAMES.get(a, a.lower()) for a in fc.models)}` "
               f"makes them, with conformal 80 % (darker) and 95 % (lighter) intervals sized by the errors of "
               f"{fc.calibration_windows} earlier windows of {h} months. The command's default, auto, picks among "
               "SeasonalNaive, Theta, ETS, DLinear and PatchTST (and medians of them) by validation error and "
               "writes its choice to auto_weights.csv; the demo draws ETS alone, which trains no network. "
               "SeasonalNaive (each month of the last year repeated) is drawn as the reference that MASE is "
               "scaled by.",
               alt=f"Mauna Loa CO2 in ppm: the last 8 years and the next {h} months forecast by {drawn}, with "
                   "80 % and 95 % bands")
    return sec
