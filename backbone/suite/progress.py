"""Progress that a person sees on a terminal and a log file sees too.

`progress_bar(...)` takes tqdm's arguments. With `disable=None` (the suite's default: "when someone can
see it") a terminal gets a tqdm bar, and stderr redirected to a file or pipe gets plain lines instead,
one at most every FROZENVIT_PROGRESS_SECONDS (default 10), and on closing the last state once, unless a
line already showed it (nothing for jobs under 2 s), each with count, rate and ETA:

    bc attention: 40/200 epoch [00:31<02:05, 1.28 epoch/s] loss=0.0123

`disable=True` shows nothing; `disable=False` forces a tqdm bar. A caller that passes tqdm's
`mininterval` sets the lines' interval too (`mininterval=0`: a line at every update, e.g. every epoch).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Iterable

from tqdm.auto import tqdm


class _LogLines:
    """The subset of tqdm the suite uses (iterate, update, set_postfix, close, context manager), as log lines."""

    def __init__(self, iterable: Iterable | None = None, total: float | None = None, desc: str | None = None,
                 unit: str = "it", initial: float = 0, interval: float | None = None,
                 mininterval: float | None = None, **_: Any) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)   # type: ignore[arg-type]
        self.total, self.desc, self.unit, self.n, self.initial = total, desc or "", unit, initial, initial
        if interval is None:                      # tqdm's `mininterval`, when a caller sets it, holds for lines too
            interval = float(os.environ.get("FROZENVIT_PROGRESS_SECONDS", 10)) if mininterval is None else mininterval
        self.interval = interval
        self.start = self.last = time.monotonic()
        self.postfix = ""
        self.closed = False
        self.lines = 0
        self.shown: tuple | None = None           # (count, postfix) of the last line printed

    def __iter__(self):
        try:
            for item in self.iterable:   # type: ignore[union-attr]
                yield item
                self.update(1)
        finally:                         # a loop left early (break) closes too
            self.close()

    def __enter__(self) -> "_LogLines":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **kw: Any) -> None:
        items = {**(ordered_dict or {}), **kw}
        self.postfix = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in items.items())

    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self._emit(now)

    def line(self, now: float | None = None) -> str:
        elapsed = (now or time.monotonic()) - self.start
        done = self.n - self.initial
        rate = done / elapsed if elapsed > 0 and done > 0 else None
        left = (self.total - self.n) / rate if rate and self.total is not None else None
        fmt = tqdm.format_interval
        count = f"{self.n:g}/{self.total:g}" if self.total is not None else f"{self.n:g}"
        eta = f"<{fmt(left)}" if left is not None else ""
        speed = f", {rate:.3g} {self.unit}/s" if rate else ""
        tail = f" {self.postfix}" if self.postfix else ""
        return f"{self.desc}: {count} {self.unit} [{fmt(elapsed)}{eta}{speed}]{tail}"

    def _emit(self, now: float | None = None) -> None:
        print(self.line(now), file=sys.stderr, flush=True)
        self.lines += 1
        self.shown = (self.n, self.postfix)

    def close(self) -> None:
        """The last state, unless a line already showed it or the whole thing was too quick to need any
        (under 2 s and nothing shown yet)."""
        if not self.closed:
            self.closed = True
            if self.shown != (self.n, self.postfix) and \
                    (self.lines or time.monotonic() - self.start >= min(2.0, self.interval)):
                self._emit()


def progress_bar(iterable: Iterable | None = None, *, disable: bool | None = None, **kw: Any) -> Any:
    """A tqdm bar on a terminal, log lines when stderr is redirected (disable=None), nothing when disable=True."""
    if disable is True:
        return tqdm(iterable, disable=True, **kw)
    if disable is None and not sys.stderr.isatty():
        return _LogLines(iterable, **kw)
    return tqdm(iterable, **kw)
