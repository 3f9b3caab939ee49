"""Rolling-origin backtests with MASE per horizon step.

For each series, window w = 0..n_windows-1 has its cutoff after position
c_w = T - h - (n_windows - 1 - w) * step_size: the history is y[:c_w], the truth y[c_w:c_w + h].
Every model forecasts through one contract, `Forecaster.forecast_cutoffs` (forecasting.base):
local (statistical) models refit at every cutoff on the history only; global (neural) models
train once on every series' history before the first cutoff (or again every `refit_every`
windows, on the history before that window) and forecast each window from its own look-back.
The MASE scale of a window is computed from that window's history only.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from .base import Forecaster
from .data import DS, ID, Y, validate
from .errors import SeriesError
from .metrics import diebold_mariano, mase_scale, smape_terms

METRICS = ("mase", "smape", "mae", "mse")


@dataclass
class BacktestResult:
    """Forecasts of every model at every (series, cutoff, step), like statsforecast's cross_validation.

    forecasts: columns unique_id, cutoff, ds, step (1..h), y, <one column per model>
    scales: unique_id, cutoff, scale (MASE denominator from the history before the cutoff)
    """

    forecasts: pd.DataFrame
    scales: pd.DataFrame
    models: list[str]
    h: int
    season_length: int
    n_windows: int = 1                             # cutoffs per series, as asked
    step_size: int | None = None                   # steps between a series' cutoffs (default h)
    mase_season: int | None = None                 # lag of MASE's scale (default season_length)
    fitted: dict = field(default_factory=dict)     # alias -> the model fitted last, where one outlives a window
    seconds: dict = field(default_factory=dict)    # alias -> wall seconds (fit + predict)

    def errors(self, metric: str) -> pd.DataFrame:
        """Per-row error terms of `metric` for each model: columns unique_id, cutoff, step, <models>."""
        f = self.forecasts
        y = f[Y].to_numpy()
        out = f[[ID, "cutoff", "step"]].copy()
        if metric == "mase":
            scale = f.merge(self.scales, on=[ID, "cutoff"], how="left")["scale"].to_numpy()
        for m in self.models:
            p = f[m].to_numpy()
            if metric == "mase":
                out[m] = np.abs(y - p) / scale
            elif metric == "smape":
                out[m] = smape_terms(y, p)
            elif metric == "mae":
                out[m] = np.abs(y - p)
            elif metric == "mse":
                out[m] = (y - p) ** 2
            else:
                raise ValueError(f"unknown metric {metric!r}; use one of {METRICS}")
        return out

    def by_horizon(self, metric: str = "mase") -> pd.DataFrame:
        """model x horizon step (1..h): the metric averaged over series and cutoffs."""
        e = self.errors(metric)
        return e.groupby("step")[self.models].mean().T.rename_axis("model")

    def mase_by_horizon(self) -> pd.DataFrame:
        return self.by_horizon("mase")

    def per_series(self, metric: str = "mase") -> pd.DataFrame:
        """unique_id x model: the metric averaged over that series' cutoffs and steps."""
        return self.errors(metric).groupby(ID, sort=False)[self.models].mean()

    def overall(self, metric: str = "mase") -> pd.Series:
        """model -> the metric averaged per series first, then over series (M4's convention)."""
        return self.per_series(metric).mean()

    def mase(self) -> pd.Series:
        return self.overall("mase")

    def dm_test(self, baseline: str | None = None, loss: str = "mase") -> pd.DataFrame:
        """Diebold-Mariano test of each model against `baseline` (default: the seasonal naive).

        Loss differential d = loss(model) - loss(baseline) with `loss` one of the METRICS' terms
        (scaled absolute error by default). With several series: d is averaged per series and
        the test runs across series (independent units). With one series: d per step of every
        window, in time order, with a Newey-West lag of h - 1. Negative statistic: model better.
        """
        base = baseline or self._default_baseline()
        if base not in self.models:
            raise ValueError(f"baseline {base!r} is not among the models {self.models}")
        e = self.errors(loss).sort_values([ID, "cutoff", "step"])
        rows = []
        for m in self.models:
            if m == base:
                continue
            d = e[m] - e[base]
            if e[ID].nunique() > 1:
                r = diebold_mariano(d.groupby(e[ID], sort=False).mean().to_numpy(), lag=0)
            else:
                r = diebold_mariano(d.to_numpy(), lag=self.h - 1)
            rows.append({"model": m, "baseline": base, "dm_stat": r.statistic, "p_value": r.p_value,
                         "mean_diff": r.mean_diff, "n": r.n})
        return pd.DataFrame(rows).set_index("model") if rows else pd.DataFrame()

    def _default_baseline(self) -> str:
        return next((m for m in self.models if m.startswith("SeasonalNaive")), self.models[0])

    def summary(self) -> pd.DataFrame:
        """model x (MASE, sMAPE, MAE, MSE, DM statistic and p-value vs the baseline, seconds)."""
        out = pd.DataFrame({k.upper() if k != "smape" else "sMAPE": self.overall(k) for k in METRICS})
        dm = self.dm_test() if len(self.models) > 1 else pd.DataFrame()
        if not dm.empty:
            out = out.join(dm[["dm_stat", "p_value"]])
        out["seconds"] = pd.Series(self.seconds)
        return out.rename_axis("model")

    def cutoffs(self) -> dict[str, list]:
        """unique_id -> its cutoffs (the last timestamp of each window's history), in order."""
        return {str(uid): g.tolist() for uid, g in self.scales.groupby(ID, sort=False)["cutoff"]}

    def to_dict(self) -> dict:
        """Settings, per-series cutoffs (timestamps as ISO text), summary rows and MASE by step: JSON-ready."""
        hz = self.mase_by_horizon()
        def stamp(c):
            return c.isoformat() if isinstance(c, pd.Timestamp) else int(c)
        return {"h": self.h, "season_length": self.season_length,
                "mase_season": self.season_length if self.mase_season is None else self.mase_season,
                "models": self.models,
                "n_series": int(self.forecasts[ID].nunique()), "n_windows": self.n_windows,
                "step_size": self.step_size or self.h,
                "cutoffs": {uid: [stamp(c) for c in cs] for uid, cs in self.cutoffs().items()},
                "summary": self.summary().reset_index().to_dict(orient="records"),
                "mase_by_horizon": {m: [float(v) for v in hz.loc[m]] for m in self.models}}


def _cutoff_positions(T: int, h: int, n_windows: int, step_size: int) -> list[int]:
    return [T - h - (n_windows - 1 - w) * step_size for w in range(n_windows)]


def backtest(df: pd.DataFrame, models: Sequence[Forecaster], h: int, n_windows: int = 1,
             step_size: int | None = None, season_length: int = 1, refit_every: int | None = None,
             progress: bool | None = None, mase_season: int | None = None) -> BacktestResult:
    """Rolling-origin evaluation of `models` on a long frame (unique_id, ds, y); see the module doc.

    MASE's scale is the in-sample mean absolute difference at lag `mase_season` (default
    `season_length`, the season the models were given); the two may differ, e.g. a model told of a
    weekly season scored against the daily one.

    `step_size` defaults to h. Raises SeriesError when a setting is below 1, or when a series is
    too short for the history the models need plus h + (n_windows - 1) * step_size values to forecast.
    """
    step_size = h if step_size is None else step_size
    mase_season = season_length if mase_season is None else mase_season
    for name, v in (("h", h), ("n_windows", n_windows), ("step_size", step_size), ("season_length", season_length),
                    ("mase_season", mase_season), ("refit_every", 1 if refit_every is None else refit_every)):
        if int(v) != v or v < 1:
            raise SeriesError(f"backtest needs {name} >= 1 (an integer), got {v!r}")
    h, n_windows, step_size, season_length = int(h), int(n_windows), int(step_size), int(season_length)
    mase_season = int(mase_season)
    aliases = [m.alias for m in models]
    if len(set(aliases)) != len(aliases):
        raise ValueError(f"model aliases must be unique, got {aliases}; subclass or wrap to rename")
    df = validate(df)
    need_hist = max([season_length + 1, mase_season + 1] + [m.min_history() for m in models])
    need = need_hist + h + (n_windows - 1) * step_size
    ids, ds, ys = [], [], []
    for uid, g in df.groupby(ID, sort=False):
        ids.append(uid), ds.append(g[DS].to_numpy()), ys.append(g[Y].to_numpy(dtype=float))
        if len(g) < need:
            raise SeriesError(f"series {uid!r} has {len(g)} values; this backtest needs {need} (history {need_hist} "
                              f"+ --h {h} + {n_windows - 1} more --windows of --step-size {step_size}); use a smaller "
                              "--h, fewer --windows, a smaller --step-size or a shorter --input-size")
    cuts = np.array([_cutoff_positions(y.size, h, n_windows, step_size) for y in ys])      # (S, W)

    rows, scale_rows = [], []          # one frame per (series, window)
    for uid, t, y, cs in zip(ids, ds, ys, cuts):
        for c in cs:
            rows.append(pd.DataFrame({ID: uid, "cutoff": t[c - 1], DS: t[c: c + h], "step": np.arange(1, h + 1),
                                      Y: y[c: c + h]}))
            scale_rows.append({ID: uid, "cutoff": t[c - 1], "scale": mase_scale(y[:c], mase_season)})
    frame = pd.concat(rows, ignore_index=True)
    scales = pd.DataFrame(scale_rows)
    if scales["scale"].isna().any():
        bad = scales.loc[scales["scale"].isna(), ID].unique()[:5].tolist()
        raise SeriesError(f"MASE is undefined for series {bad}: their history does not change over "
                          f"{mase_season} steps (the MASE season: --mase-season, else --season-length); drop them "
                          "or use another --mase-season")

    fitted, seconds = {}, {}
    for model in models:
        t0 = time.perf_counter()
        preds, last = model.forecast_cutoffs(ys, cuts, h, refit_every=refit_every, progress=progress)  # (S, W, h)
        seconds[model.alias] = time.perf_counter() - t0
        frame[model.alias] = preds.reshape(-1)
        if last is not None:
            fitted[model.alias] = last
    return BacktestResult(frame, scales, aliases, h, season_length, n_windows, step_size, mase_season, fitted,
                          seconds)
