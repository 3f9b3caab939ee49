"""Pictures of a backtest: forecasts against actuals (with their intervals), MASE and interval
coverage by horizon step; and of a forecast of the future (`plot_future`).

Figures are built with matplotlib's object API (no pyplot state, no backend switching). Legends lie outside the
axes (below the panels, or right of them), so that they hide no line.
"""
from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Sequence

import pandas as pd
from matplotlib.figure import Figure

from frozenvit.backbone.suite.artifacts import atomic_write_bytes

from .backtest import BacktestResult
from .data import DS, ID, Y

if TYPE_CHECKING:
    from .future import Forecast


#: one colour per model in every figure (matplotlib's default cycle), so that a model looks the same in each
MODEL_COLOURS = {"SeasonalNaive": "C0", "ETS": "C1", "Theta": "C2", "DLinear": "C3", "ARIMA": "C4", "PatchTST": "C5",
                 "Auto": "C6", "Naive": "C8"}


def colours(names: Sequence[str]) -> dict[str, str]:
    """name -> colour: MODEL_COLOURS for a model named as frozenvit names it (an interval set "ETS/own" as its
    model), the colours no named model of this figure takes for the others, in order."""
    out = {n: MODEL_COLOURS.get(str(n).split("/")[0]) for n in names}
    taken = {c for c in out.values() if c}
    free = [f"C{i}" for i in range(10) if f"C{i}" not in taken] or [f"C{i}" for i in range(10)]
    others = [n for n in names if out[n] is None]
    out.update({n: free[k % len(free)] for k, n in enumerate(others)})
    return out


def save_png(fig: Figure, path: str | os.PathLike, dpi: int = 110) -> None:
    """Write `fig` as a PNG atomically: the old file or the new one, never half of one."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")     # a legend outside the axes stays whole
    atomic_write_bytes(path, buf.getvalue())


def plot_future(fc: "Forecast", df: pd.DataFrame, series: Sequence[str] | None = None, n_series: int = 3,
                history: int | None = None) -> Figure:
    """One panel per series: the end of its history and every model's forecast of the next h values, shaded by
    that model's intervals where it has them (lighter: wider level); the last value marked by a dotted line."""
    f = fc.frame
    series = list(series or list(fc.last)[:n_series])
    fig = Figure(figsize=(11, 2.6 * len(series)), layout="constrained")
    axes = fig.subplots(len(series), 1, squeeze=False)[:, 0]
    history = history if history is not None else max(3 * fc.h, 2 * fc.season_length)
    colour = colours(fc.models)
    for ax, uid in zip(axes, series):
        fu, hist = f[f[ID] == uid], df[df[ID].astype(str) == uid].tail(history)
        ax.plot(hist[DS], hist[Y], color="k", lw=1.2, label="history")
        for m in fc.models:
            ax.plot(fu[DS], fu[m], color=colour[m], lw=1.2, label=m)
            for lv in fc.levels[::-1]:
                lo, hi = f"{m}-lo-{lv:g}", f"{m}-hi-{lv:g}"
                if lo in fu:
                    ax.fill_between(fu[DS], fu[lo], fu[hi], color=colour[m], alpha=0.12, lw=0)
        if len(hist):
            ax.axvline(hist[DS].iloc[-1], color="0.7", ls=":", lw=0.8)
        ax.set_title(str(uid), fontsize=9, loc="left")
    _legend_below(fig, axes[0], ncol=min(len(fc.models) + 1, 6))
    return fig


def _legend_below(fig: Figure, ax, ncol: int, **kw) -> None:
    """The legend of `ax`'s lines under the figure's axes, outside them: it hides no data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", fontsize=8, ncol=ncol, **kw)


def _legend_right(fig: Figure, ax, **kw) -> None:
    """The legend of `ax`'s lines right of the figure's axes, outside them: it hides no data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right upper", **kw)


def plot_forecasts(res: BacktestResult, df: pd.DataFrame | None = None, series: Sequence[str] | None = None,
                   n_series: int = 3, history: int | None = None) -> Figure:
    """One panel per series: history (from `df`, when given), actuals and every model's forecasts
    at each cutoff, shaded by its conformal intervals when the backtest has them (lighter: wider
    level), cutoffs marked with dotted lines."""
    f = res.forecasts
    series = list(series or list(dict.fromkeys(f[ID]))[:n_series])
    fig = Figure(figsize=(11, 2.6 * len(series)), layout="constrained")
    axes = fig.subplots(len(series), 1, squeeze=False)[:, 0]
    history = history if history is not None else 3 * res.h
    colour = colours(res.models)
    for ax, uid in zip(axes, series):
        fu = f[f[ID] == uid]
        if df is not None:
            hist = df[(df[ID] == uid) & (df[DS] <= fu["cutoff"].min())].tail(history)
            ax.plot(hist[DS], hist[Y], color="0.55", lw=1, label="history")
        ax.plot(fu[DS], fu[Y], color="k", lw=1.3, label="actual")
        for m in res.models:
            for j, (_, w) in enumerate(fu.groupby("cutoff")):
                ax.plot(w[DS], w[m], color=colour[m], lw=1.1, label=m if j == 0 else None)
                for lv in res.levels[::-1]:
                    lo, hi = res.intervals[m][lv]
                    ax.fill_between(w[DS], lo[w.index], hi[w.index], color=colour[m], alpha=0.12, lw=0)
        for c in fu["cutoff"].unique():
            ax.axvline(c, color="0.7", ls=":", lw=0.8)
        ax.set_title(str(uid), fontsize=9, loc="left")
    _legend_below(fig, axes[0], ncol=min(len(res.models) + 2, 6))
    return fig


def plot_mase_by_horizon(res: BacktestResult, log: bool = False) -> Figure:
    """MASE per horizon step, one line per model (averaged over series and cutoffs)."""
    hz = res.mase_by_horizon()
    fig = Figure(figsize=(8, 3.6), layout="constrained")
    ax = fig.subplots()
    colour = colours(res.models)
    for m in res.models:
        ax.plot(hz.columns, hz.loc[m], color=colour[m], marker="." if res.h <= 48 else None,
                label=f"{m} ({res.mase()[m]:.3f})")
    ax.axhline(1.0, color="0.6", lw=0.8, ls="--")
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("horizon step")
    ax.set_ylabel("MASE")
    _legend_right(fig, ax, fontsize=8, title="overall MASE", title_fontsize=8)
    return fig


def plot_coverage(res: BacktestResult) -> Figure:
    """Interval coverage per horizon step, one panel per level, one line per interval set, the nominal
    level dashed."""
    fig = Figure(figsize=(8, 2.8 * len(res.levels)), layout="constrained")
    axes = fig.subplots(len(res.levels), 1, squeeze=False)[:, 0]
    for ax, lv in zip(axes, res.levels):
        cov = 100 * res.coverage_by_horizon(lv)
        colour = colours(list(cov.index))
        for lab in cov.index:
            ax.plot(cov.columns, cov.loc[lab], color=colour[lab], lw=1.1, label=lab,
                    ls="--" if "/own" in str(lab) else "-")
        ax.axhline(lv, color="0.3", lw=0.9, ls="--")
        ax.set_ylabel(f"coverage of {lv:g} % (%)")
    axes[-1].set_xlabel("horizon step")
    _legend_right(fig, axes[0], fontsize=7)
    return fig
