"""The control loop's brain: frames -> preprocess -> frozen encoder -> policy head -> actions.

`VisuomotorAgent` serves several environments in lockstep (one batch through the encoder per
step) and can time each stage with a `StageTimer`. It remembers, per environment slot and episode,
what a policy with action chunks or a velocity input needs: the overlapping chunks predicted so far
(`TemporalEnsemble`) and the last proprio reading. `reset(slots)` at each new episode.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from .policy import check_chunking


class StageTimer:
    """Wall-clock milliseconds per named stage, one entry per call: `with timer("encode"): ...`."""

    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = defaultdict(list)
        self.enabled = True

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.ms[stage].append((time.perf_counter() - t0) * 1e3)


_NULL = StageTimer()
_NULL.enabled = False


class TemporalEnsemble:
    """ACT's temporal ensembling (Zhao et al. 2023) for several environment slots at once.

    At every step each slot's policy predicts the next k actions. The action taken at step t is the
    weighted mean of the predictions for step t made at steps t-k+1..t (fewer early in an episode),
    with weights exp(-decay * i), i = 0 for the oldest of them (ACT's convention: decay > 0 favours
    older predictions, 0 is a plain mean), normalised to sum 1. With k = 1 it returns each prediction
    unchanged. `reset(slots)` forgets what a slot has predicted (a new episode)."""

    def __init__(self, chunk: int, decay: float) -> None:
        check_chunking(chunk, decay)
        self.chunk, self.decay = int(chunk), float(decay)
        self._past: dict[Any, list[np.ndarray]] = {}        # slot -> the last <= k chunks (k, A), oldest first

    def reset(self, slots: Iterable[Any] | None = None) -> None:
        if slots is None:
            self._past.clear()
        for s in slots or ():
            self._past.pop(s, None)

    def weights(self, n: int) -> np.ndarray:
        """(n,) normalised weights of n overlapping predictions, oldest first."""
        w = np.exp(-self.decay * np.arange(n))
        return w / w.sum()

    def __call__(self, slots: Sequence[Any], chunks: np.ndarray) -> np.ndarray:
        """chunks (B, k, A), this step's predictions of slots[b] -> (B, A) actions to take now."""
        if self.chunk == 1:
            return chunks[:, 0]
        out = np.empty((len(slots), chunks.shape[2]), dtype=chunks.dtype)
        for b, s in enumerate(slots):
            past = self._past.setdefault(s, [])
            past.append(chunks[b])
            del past[:-self.chunk]
            n = len(past)                                   # past[j] was predicted n-1-j steps ago
            now = np.stack([p[n - 1 - j] for j, p in enumerate(past)])             # (n, A), oldest first
            out[b] = self.weights(n) @ now
        return out


class VisuomotorAgent:
    """Acts for a batch of environments from their latest frames and proprioception.

        agent = VisuomotorAgent(policy, backbone)          # checks the policy was trained on this backbone
        a = agent.act([frame], proprio[None])              # (1, 4)

    `policy`: a fitted PatchTokenPolicy, or a latency.UntrainedHead when only timing matters.
    A policy with chunk > 1 or velocity keeps state per environment slot: call `reset()` (or
    `reset([slot])`) when an episode starts, and pass `slots` to `act` when the batch's rows are not
    environments 0..B-1.
    """

    def __init__(self, policy: Any, backbone: Any, *, check: bool = True) -> None:
        if check:
            policy.check_backbone(backbone)
        self.policy = policy
        self.backbone = backbone
        self.block = int(policy.meta_["block"])
        self.uses_cls = policy.uses_cls
        self.ensemble = TemporalEnsemble(getattr(policy, "chunk", 1), getattr(policy, "chunk_decay", 0.0))
        self.velocity = bool(getattr(policy, "velocity", False))
        self._last_proprio: dict[Any, np.ndarray] = {}

    def reset(self, slots: Iterable[Any] | None = None) -> None:
        """Forget the episode so far of these environment slots (None: all): a new episode starts."""
        slots = None if slots is None else list(slots)
        self.ensemble.reset(slots)
        if slots is None:
            self._last_proprio.clear()
        for s in slots or ():
            self._last_proprio.pop(s, None)

    def encode(self, frames: Sequence[np.ndarray], timer: StageTimer = _NULL
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, N, C) patch tokens and (B, C) CLS (or None) of B uint8 frames."""
        with timer("preprocess"):
            pixels = self.backbone.preprocess(list(frames)).pixels                 # (B, 3, H, W)
        with timer("encode"):
            grids, prefix = self.backbone.forward_pixels(pixels, [self.block])
            tokens = grids[self.block].flatten(2).transpose(1, 2)                  # (B, N, C)
            cls = prefix[self.block][:, 0] if self.uses_cls else None              # (B, C)
        return tokens, cls

    def act(self, frames: Sequence[np.ndarray], proprio: np.ndarray, timer: StageTimer = _NULL,
            slots: Sequence[Any] | None = None) -> np.ndarray:
        """Actions (B, 4) for B frames (H, W, 3) uint8 and proprio (B, 4) of environment slots `slots`
        (None: 0..B-1). One head call per step; with action chunks, the temporal ensemble of each slot's."""
        if len(frames) != len(proprio):
            raise ValueError(f"got {len(frames)} frames and {len(proprio)} proprio rows")
        slots = list(range(len(frames))) if slots is None else list(slots)
        if len(slots) != len(frames):
            raise ValueError(f"got {len(slots)} slots for {len(frames)} frames")
        tokens, cls = self.encode(frames, timer)
        with timer("head"):
            prop = np.asarray(proprio, dtype=np.float32)
            if not self.velocity and self.ensemble.chunk == 1:
                return _row_by_row(self.policy.predict, tokens, cls, prop)
            vel = None
            if self.velocity:
                vel = np.stack([p - self._last_proprio.get(s, p) for s, p in zip(slots, prop)])   # (B, P)
                self._last_proprio.update(zip(slots, prop.copy()))
            return self.ensemble(slots, _row_by_row(self.policy.predict_chunk, tokens, cls, prop, vel))


def _row_by_row(head: Callable[..., np.ndarray], *inputs: Any) -> np.ndarray:
    """head(*inputs) one row at a time, stacked. The head's matrix products round differently for
    different batch sizes (~1e-6), and the closed loop can turn that into a different episode; row by
    row, an episode's actions do not depend on which episodes share its step (lockstep slots, Ray
    chunks, a resumed journal). The encoder needs no such care (its rows are equal at any batch
    size, tests/test_control_loop.py); the head costs ~1 ms a row against ~30 ms to encode one."""
    n = len(inputs[0])
    return np.concatenate([head(*(None if x is None else x[i:i + 1] for x in inputs)) for i in range(n)])
