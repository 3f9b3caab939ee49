"""Fits shared inside one backtest: a model that runs alone and as one of `auto`'s candidates is fitted once.

    with shared_fits():                       # backtest opens it around its models
        fitted = once(model, "fit", histories, lambda: clone(model).fit(histories))

`once` computes on the first call and hands the same result to every later call that asks for the same
work: the same class, the same hyperparameters (less those that change no forecast: progress, checkpoint
folder, resume) and the same data, compared by content (a digest of the arrays' bytes). Outside
`shared_fits` nothing is kept and `once` just computes.
"""
from __future__ import annotations

import contextlib
import hashlib
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Sequence, TypeVar

import numpy as np

T = TypeVar("T")
_STORE: ContextVar[dict | None] = ContextVar("frozenvit_forecasting_shared_fits", default=None)
NO_EFFECT = ("progress", "checkpoint_dir", "resume")      # hyperparameters that change no forecast


@contextlib.contextmanager
def shared_fits() -> Iterator[None]:
    """Inside: `once` keeps its results; they are dropped on leaving the outermost one. Nested inside
    another, it shares that one's results, so several backtests in one outer `shared_fits` (the same
    data with other seeds, say) fit a model that does not change between them once."""
    if _STORE.get() is not None:
        yield
        return
    token = _STORE.set({})
    try:
        yield
    finally:
        _STORE.reset(token)


def _digest(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _params(model: Any) -> tuple:
    """The hyperparameters that matter, plain values as they are, objects (a backbone) by identity."""
    plain = (int, float, str, bool, type(None), tuple)
    return tuple((k, v if isinstance(v, plain) else ("object", id(v)))
                 for k, v in sorted(model.get_params(deep=False).items()) if k not in NO_EFFECT)


def once(model: Any, what: str, data: Sequence[np.ndarray], compute: Callable[[], T]) -> T:
    """`compute()`, or inside `shared_fits` the result of the same work done before (see the module doc)."""
    store = _STORE.get()
    if store is None:
        return compute()
    key = (type(model).__name__, what, _params(model), _digest(data))
    if key not in store:
        store[key] = compute()
    out = store[key]
    return out.copy() if isinstance(out, np.ndarray) else out
