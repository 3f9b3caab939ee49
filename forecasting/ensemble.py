"""Forecast combinations: the mean or median of member models' forecasts.

    Ensemble([ETS(24), DLinear(h=48), PatchTST(h=48)], how="median")     # alias median(ETS,DLinear,PatchTST)

Each member forecasts every window its own way (fitted once per cutoff, or trained once, as it
would alone); the ensemble combines their forecasts step by step. In `backtest`, a member that
also runs alone (or in another ensemble) is fitted once and its forecasts are reused.

On the command line an ensemble is written as its rule applied to model names,
`--models snaive,ets,median(ets,dlinear,patchtst)`: the rule is what a reader needs first, and the
text reads as what it computes.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
from sklearn.utils._param_validation import StrOptions

from frozenvit.backbone.suite.errors import ParameterError

from .base import Forecaster

RULES = ("mean", "median")


def combine(forecasts: Sequence[np.ndarray], how: str) -> np.ndarray:
    """Members' forecasts, each (...), combined elementwise by `how` (mean or median) -> (...)."""
    if how not in RULES:
        raise ParameterError(f"how must be one of {RULES}, got {how!r}")
    stack = np.stack([np.asarray(f, dtype=float) for f in forecasts])                   # (M, ...)
    return stack.mean(axis=0) if how == "mean" else np.median(stack, axis=0)


class Ensemble(Forecaster):
    """The mean or median (`how`) of the forecasts of two or more `members` (distinct aliases)."""

    _parameter_constraints = {"members": [list, tuple], "how": [StrOptions(set(RULES))]}

    def __init__(self, members: Sequence[Forecaster], how: str = "median", alias: str | None = None) -> None:
        self.members = members
        self.how = how
        self.alias = alias

    def _default_alias(self) -> str:
        return f"{self.how}({','.join(m.alias for m in self.members)})"

    def min_history(self) -> int:
        return max(m.min_history() for m in self.members)

    def check_params(self) -> "Ensemble":
        """Also ParameterError for fewer than two members or a member named twice; each member checked."""
        super().check_params()
        aliases = [m.alias for m in self.members]
        if len(aliases) < 2 or len(set(aliases)) < len(aliases):
            raise ParameterError(f"an Ensemble needs two or more members of distinct aliases, got {aliases}")
        for m in self.members:
            m.check_params()
        return self

    def forecast_cutoffs(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                         refit_every: int | None = None, progress: bool | None = None) -> tuple[np.ndarray, None]:
        """Every member's forecasts (see `Forecaster.forecast_cutoffs`), combined; nothing to save."""
        self.check_params()
        preds = [m.forecast_cutoffs(series, cutoffs, h, refit_every=refit_every, progress=progress)[0]
                 for m in self.members]
        return combine(preds, self.how), None


def assemble(specs: Sequence, built: dict) -> list[Forecaster]:
    """Models from parsed specs (`parse_models`) and the model built for each name: an ensemble's
    members are those same objects, so that a member also named alone is fitted once."""
    return [built[s] if isinstance(s, str) else Ensemble([built[n] for n in s[1]], s[0]) for s in specs]


def same_model(a: Forecaster, b: Forecaster) -> bool:
    """Whether `a` and `b` give the same forecasts: the same object, or the same class and parameters."""
    return a is b or (type(a) is type(b) and a.get_params(deep=False) == b.get_params(deep=False))


_ENSEMBLE = re.compile(r"^(\w+)\((.*)\)$")


def parse_models(text: str, names: Sequence[str]) -> list:
    """'snaive,ets,median(ets,dlinear)' -> ['snaive', 'ets', ('median', ('ets', 'dlinear'))].

    Names must come from `names`; an ensemble is a rule out of RULES applied to two or more distinct
    names. Raises ValueError with the reason, in the command's words.
    """
    parts, depth, start = [], 0, 0
    text = text.strip().lower()
    for i, ch in enumerate(text + ","):
        depth += (ch == "(") - (ch == ")")
        if depth < 0 or depth > 1:
            raise ValueError(f"unbalanced or nested parentheses in {text!r}; write e.g. median(ets,dlinear)")
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced parentheses in {text!r}; write e.g. median(ets,dlinear)")
    out: list = []
    for part in filter(None, parts):
        m = _ENSEMBLE.match(part)
        if m is None:
            out.append(part)
            continue
        how, members = m.group(1), tuple(n.strip() for n in m.group(2).split(",") if n.strip())
        if how not in RULES:
            raise ValueError(f"unknown combination {how!r} in {part!r}; use {' or '.join(RULES)}")
        if len(members) < 2 or len(set(members)) < len(members):
            raise ValueError(f"{part!r} needs two or more distinct models")
        out.append((how, members))
    unknown = [n for p in out for n in ([p] if isinstance(p, str) else p[1]) if n not in names]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; choose from {','.join(names)} or combine them as "
                         f"median(a,b,...) or mean(a,b,...)")
    if not out:
        raise ValueError(f"name at least one model out of {','.join(names)}")
    if len(set(out)) < len(out):
        raise ValueError(f"a model is named twice in {text!r}")
    return out
