"""The control loop's brain: frames -> preprocess -> frozen encoder -> policy head -> actions.

`VisuomotorAgent` serves several environments in lockstep (one batch through the encoder per
step) and can time each stage with a `StageTimer`. For a policy with action chunks it remembers, per
environment slot and episode, the chunks predicted so far (`TemporalEnsemble`): `reset(slots)` when an
episode starts. A one-action policy keeps no state between steps.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from frozenvit.backbone.suite.errors import ParameterError

from .defaults import DEFAULT_CHUNK_DECAY
from .errors import PolicyError
from .features import token_blocks


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

    At every step each slot's policy predicts the next k actions. The action taken at step t is the weighted
    mean of the predictions for step t made at steps t-k+1..t (fewer early in an episode), weights
    exp(-decay * i), i = 0 for the oldest of them (ACT's convention: decay > 0 favours older predictions, 0 is
    a plain mean), normalised to sum 1. With k = 1 it returns each prediction unchanged. `reset(slots)`
    forgets what a slot has predicted (a new episode)."""

    def __init__(self, chunk: int, decay: float = DEFAULT_CHUNK_DECAY) -> None:
        if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
            raise ParameterError(f"chunk must be an integer >= 1 (actions predicted per frame), got {chunk!r}")
        if isinstance(decay, bool) or not isinstance(decay, (int, float, np.number)) or not decay >= 0:
            raise ParameterError(f"decay must be a number >= 0 (0: a plain mean of the overlapping predictions), "
                                 f"got {decay!r}")
        self.chunk, self.decay = int(chunk), float(decay)
        self._past: dict[Any, list[np.ndarray]] = {}        # slot -> its last <= k chunks (k, A), oldest first

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
        out = np.empty((len(slots), chunks.shape[2]))                # float64, as the weighted mean comes
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
    A policy with chunk > 1 keeps state per environment slot: call `reset()` (or `reset([slot])`) when an
    episode starts, and pass `slots` to `act` when the batch's rows are not environments 0..B-1.
    """

    def __init__(self, policy: Any, backbone: Any, *, check: bool = True) -> None:
        if check:
            policy.check_backbone(backbone)
        self.policy = policy
        self.backbone = backbone
        self.blocks = token_blocks(policy.meta_)
        self.uses_cls = policy.uses_cls
        self.ensemble = TemporalEnsemble(getattr(policy, "chunk", 1))

    def reset(self, slots: Iterable[Any] | None = None) -> None:
        """A new episode starts in these environment slots (None: all): forget their chunks so far."""
        self.ensemble.reset(None if slots is None else list(slots))

    def encode(self, frames: Sequence[np.ndarray], timer: StageTimer = _NULL
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, N, C) patch tokens and (B, C) CLS (or None) of B uint8 frames."""
        with timer("preprocess"):
            pixels = self.backbone.preprocess(list(frames)).pixels                 # (B, 3, H, W)
        with timer("encode"):
            grids, prefix = self.backbone.forward_pixels(pixels, self.blocks)
            tokens = torch.cat([grids[b].flatten(2).transpose(1, 2) for b in self.blocks], -1)   # (B, N, C)
            cls = torch.cat([prefix[b][:, 0] for b in self.blocks], -1) if self.uses_cls else None  # (B, C)
        return tokens, cls

    def act(self, frames: Sequence[np.ndarray], proprio: np.ndarray, timer: StageTimer = _NULL,
            slots: Sequence[Any] | None = None) -> np.ndarray:
        """Actions (B, 4) for B frames (H, W, 3) uint8 and proprio (B, 4) of environment slots `slots` (None:
        0..B-1); for one frame a (4,) proprio is taken as its one row. One head call per step; with action chunks,
        the temporal ensemble of each slot's chunks."""
        prop = np.asarray(proprio, dtype=np.float32)
        if prop.ndim == 1 and len(frames) == 1:
            prop = prop[None]                                                       # one frame, one (4,) row
        if prop.ndim != 2 or len(frames) != len(prop):
            raise PolicyError(f"got {len(frames)} frame{'s' * (len(frames) != 1)} and proprio of shape "
                              f"{prop.shape}; proprio must be (n_frames, 4), one row per frame")
        slots = list(range(len(frames))) if slots is None else list(slots)
        if len(slots) != len(frames) or len(set(slots)) != len(slots):
            raise ValueError(f"got slots {slots} for {len(frames)} frames: one distinct slot per frame")
        tokens, cls = self.encode(frames, timer)
        with timer("head"):
            if self.ensemble.chunk == 1:
                return _row_by_row(self.policy.predict, tokens, cls, prop)
            return self.ensemble(slots, _row_by_row(self.policy.predict_chunk, tokens, cls, prop))


def _row_by_row(head: Callable[..., np.ndarray], *inputs: Any) -> np.ndarray:
    """head(*inputs) one row at a time, stacked. The head's matrix products round differently for
    different batch sizes (~1e-6), and the closed loop can turn that into a different episode; row by
    row, an episode's actions do not depend on which episodes share its step (lockstep slots, Ray
    chunks, a resumed journal). The encoder needs no such care (its rows are equal at any batch
    size, tests/test_control_loop.py); the head costs ~1 ms a row against ~30 ms to encode one."""
    n = len(inputs[0])
    return np.concatenate([head(*(None if x is None else x[i:i + 1] for x in inputs)) for i in range(n)])
