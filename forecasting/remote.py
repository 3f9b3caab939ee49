"""Global (neural) models of a backtest on Ray: one task per model, all series, as in the local run.

With `backtest(..., engine="ray")` the statistical models fan out by series (baselines.LocalModel);
a global model trains once on every series, so the unit of work is the model itself. Each one goes
out as one Ray task as soon as the backtest starts, so that the networks train on the cluster at the
same time as each other and as the statistical models' fits, and the calling process only collects.

A task asks the cluster for as many CPUs as torch uses in this process (at most the cluster's) and
sets torch to that many threads: the same seed and the same thread count give the same weights as
the local run. Checkpoints (`checkpoint_dir`) are written by the worker, so on a multi-machine
cluster that folder must be on storage every node sees. Ray reruns the task of a worker that dies.
"""
from __future__ import annotations

import time
from typing import Any, Iterable, Sequence

import numpy as np

from .base import Forecaster
from .baselines import LocalModel
from .ensemble import Ensemble, same_model
from .fallback import WithFallback


def trains_globally(model: Forecaster) -> bool:
    """True for a model whose backtest is one training over every series (the neural ones)."""
    inner = model.model if isinstance(model, WithFallback) else model
    return not isinstance(inner, (LocalModel, Ensemble))


def leaves(models: Iterable[Forecaster]) -> list[Forecaster]:
    """The models a backtest runs, ensembles opened up into their members, each once."""
    out: list[Forecaster] = []
    for m in models:
        for leaf in (leaves(m.members) if isinstance(m, Ensemble) else [m]):
            if not any(same_model(leaf, o) for o in out):
                out.append(leaf)
    return out


def _train_and_forecast(model: Forecaster, series: Sequence[np.ndarray], cutoffs: np.ndarray,
                        calib_cutoffs: np.ndarray, h: int, threads: int, kw: dict[str, Any]) -> tuple:
    """The task: `model.forecast_with_calibration` at `threads` torch threads, its seconds, and what auto
    chose (`choice_`; None for another model)."""
    import torch

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    preds, calib, fitted = model.forecast_with_calibration(series, cutoffs, calib_cutoffs, h, **kw)
    return preds, calib, fitted, time.perf_counter() - t0, getattr(model, "choice_", None)


class GlobalRuns:
    """The Ray tasks of a backtest's global models, submitted at once, collected one by one."""

    def __init__(self, models: Iterable[Forecaster], series: Sequence[np.ndarray], cutoffs: np.ndarray,
                 calib_cutoffs: np.ndarray, h: int, **kw: Any) -> None:
        import torch

        from frozenvit.backbone.suite.engine import cluster_cpus, import_ray

        ray = import_ray()
        self._ray = ray
        threads = max(1, min(torch.get_num_threads(), cluster_cpus(ray)))
        task = ray.remote(num_cpus=threads, max_retries=3)(_train_and_forecast)
        kw = {**kw, "progress": False}                 # a worker has no terminal; the caller's bar counts models
        refs = [ray.put(series), ray.put(np.asarray(cutoffs)), ray.put(np.asarray(calib_cutoffs))]
        self._pending = [(m, task.remote(m, *refs, h, threads, kw)) for m in leaves(models) if trains_globally(m)]

    def take(self, model: Forecaster) -> tuple[np.ndarray, np.ndarray, Forecaster, float, Any] | None:
        """`model`'s (forecasts, calibration forecasts, fitted model, seconds, auto's choice), waiting for its task;
        None when `model` was not sent out (a statistical model or an ensemble)."""
        for i, (m, ref) in enumerate(self._pending):
            if same_model(m, model):
                del self._pending[i]
                return self._ray.get(ref)
        return None
