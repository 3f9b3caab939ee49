"""Rolling-origin backtests with MASE per horizon step.

For each series, window w = 0..n_windows-1 has its cutoff after position
c_w = T - h - (n_windows - 1 - w) * step_size: the history is y[:c_w], the truth y[c_w:c_w + h].
Local (statistical) models are refitted at every cutoff on the history only. Global (neural)
models are trained once on every series' history before the first cutoff (or again every
`refit_every` windows, on the history before that window) and then forecast each window from
its own look-back. The MASE scale of a window is computed from that window's history only.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from frozenvit.backbone.suite.progress import progress_bar

from .baselines import SeasonalNaive
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
    fitted: dict = field(default_factory=dict)     # alias -> last fitted global model
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
        for m in self.models:
            if m.startswith("SeasonalNaive"):
                return m
        return self.models[0]

    def summary(self) -> pd.DataFrame:
        """model x (MASE, sMAPE, MAE, MSE, DM statistic and p-value vs the baseline, seconds)."""
        out = pd.DataFrame({k.upper() if k != "smape" else "sMAPE": self.overall(k) for k in METRICS})
        dm = self.dm_test() if len(self.models) > 1 else pd.DataFrame()
        if not dm.empty:
            out = out.join(dm[["dm_stat", "p_value"]])
        out["seconds"] = pd.Series(self.seconds)
        return out.rename_axis("model")

    def to_dict(self) -> dict:
        hz = self.mase_by_horizon()
        return {"h": self.h, "season_length": self.season_length, "models": self.models,
                "n_series": int(self.forecasts[ID].nunique()), "n_windows": int(self.scales["cutoff"].nunique()),
                "summary": self.summary().reset_index().to_dict(orient="records"),
                "mase_by_horizon": {m: [float(v) for v in hz.loc[m]] for m in self.models}}


def _cutoff_positions(T: int, h: int, n_windows: int, step_size: int) -> list[int]:
    return [T - h - (n_windows - 1 - w) * step_size for w in range(n_windows)]


def backtest(df: pd.DataFrame, models: Sequence, h: int, n_windows: int = 1, step_size: int | None = None,
             season_length: int = 1, refit_every: int | None = None, progress: bool | None = None) -> BacktestResult:
    """Rolling-origin evaluation of `models` on a long frame (unique_id, ds, y); see the module doc.

    Raises SeriesError when a series is too short for the history the models need plus
    h + (n_windows - 1) * step_size values to forecast.
    """
    if h < 1 or n_windows < 1:
        raise SeriesError(f"need h >= 1 and n_windows >= 1, got h={h}, n_windows={n_windows}")
    step_size = h if step_size is None else int(step_size)
    aliases = [m.alias for m in models]
    if len(set(aliases)) != len(aliases):
        raise ValueError(f"model aliases must be unique, got {aliases}; subclass or wrap to rename")
    df = validate(df)
    need_hist = max([season_length + 1] + [m.min_train_length() for m in models if m.is_global])
    need = need_hist + h + (n_windows - 1) * step_size
    series = {uid: (g[DS].to_numpy(), g[Y].to_numpy(dtype=float)) for uid, g in df.groupby(ID, sort=False)}
    for uid, (_, y) in series.items():
        if y.size < need:
            raise SeriesError(f"series {uid!r} has {y.size} values; this backtest needs {need} "
                              f"(history {need_hist} + h {h} + {n_windows - 1} more windows of {step_size})")
    cuts = {uid: _cutoff_positions(y.size, h, n_windows, step_size) for uid, (_, y) in series.items()}

    rows = []     # one frame per (series, window)
    scale_rows = []
    for uid, (ds, y) in series.items():
        for c in cuts[uid]:
            rows.append(pd.DataFrame({ID: uid, "cutoff": ds[c - 1], DS: ds[c: c + h], "step": np.arange(1, h + 1),
                                      Y: y[c: c + h]}))
            scale_rows.append({ID: uid, "cutoff": ds[c - 1], "scale": mase_scale(y[:c], season_length)})
    frame = pd.concat(rows, ignore_index=True)
    scales = pd.DataFrame(scale_rows)
    if scales["scale"].isna().any():
        bad = scales.loc[scales["scale"].isna(), ID].unique()[:5].tolist()
        raise SeriesError(f"MASE is undefined for series {bad}: their history is constant over the "
                          f"season_length={season_length} difference; drop them or use another season_length")

    fitted, seconds = {}, {}
    for model in models:
        t0 = time.perf_counter()
        if model.is_global:
            preds, fitted[model.alias] = _run_global(model, series, cuts, h, n_windows, refit_every, progress)
        else:
            preds = _run_local(model, series, cuts, h, progress)
        seconds[model.alias] = time.perf_counter() - t0
        frame[model.alias] = preds
    return BacktestResult(frame, scales, aliases, h, season_length, fitted, seconds)


def _run_local(model, series: dict, cuts: dict, h: int, progress: bool | None) -> np.ndarray:
    out = []
    it = progress_bar(series.items(), desc=model.alias, disable=None if progress is None else not progress, leave=False)
    for uid, (_, y) in it:
        for c in cuts[uid]:
            f = copy.deepcopy(model).fit(y[:c]).predict(h)                  # history only: y[:c]
            out.append(np.asarray(f, dtype=float).reshape(h))
    return np.concatenate(out)


def _run_global(model, series: dict, cuts: dict, h: int, n_windows: int, refit_every: int | None,
                progress: bool | None):
    L = int(model.input_size)
    every = refit_every or n_windows
    preds = {(uid, w): None for uid in series for w in range(n_windows)}
    fitted = None
    for w0 in range(0, n_windows, every):
        # train on each series' history before this block's first cutoff
        hist = [y[: cuts[uid][w0]] for uid, (_, y) in series.items()]
        fitted = copy.deepcopy(model)
        if progress is not None:
            fitted.progress = progress
        fitted.fit(hist)
        for w in range(w0, min(w0 + every, n_windows)):
            keys = list(series)
            ctx = np.stack([series[uid][1][cuts[uid][w] - L: cuts[uid][w]] for uid in keys])  # (S, L)
            f = fitted.predict(ctx)                                                           # (S, h)
            for uid, row in zip(keys, f):
                preds[(uid, w)] = row
    return np.concatenate([preds[(uid, w)] for uid in series for w in range(n_windows)]), fitted
