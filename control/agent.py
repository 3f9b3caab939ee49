"""The control loop's brain: frames -> preprocess -> frozen encoder -> policy head -> actions.

`VisuomotorAgent` serves several environments in lockstep (one batch through the encoder per
step) and can time each stage with a `StageTimer`. For a head of one frame (the default) it keeps no
state between steps: each action depends on that step's frame and proprioception only. For a head of
F > 1 frames it keeps each environment's last F - 1 frames' tokens, and `reset` forgets them.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

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


class VisuomotorAgent:
    """Acts for a batch of environments from their latest frames and proprioception.

        agent = VisuomotorAgent(policy, backbone)          # checks the policy was trained on this backbone
        a = agent.act([frame], proprio[None])              # (1, 4)

    `policy`: a fitted PatchTokenPolicy, or a latency.UntrainedHead when only timing matters.
    """

    def __init__(self, policy: Any, backbone: Any, *, check: bool = True) -> None:
        if check:
            policy.check_backbone(backbone)
        self.policy = policy
        self.backbone = backbone
        self.blocks = token_blocks(policy.meta_)
        self.uses_cls = policy.uses_cls
        self.frames = int(getattr(policy, "frames", 1))
        self._past: dict[Any, list[tuple[torch.Tensor, torch.Tensor | None]]] = {}   # slot -> older frames

    def reset(self, slots: Iterable[Any] | None = None) -> None:
        """A new episode starts in these environment slots (None: all): forget their earlier frames. A loop
        calls it before each episode's first `act`; a head of one frame has nothing to forget."""
        if slots is None:
            self._past.clear()
        for s in slots or ():
            self._past.pop(s, None)

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
        """Actions (B, 4) for B frames (H, W, 3) uint8 and proprio (B, 4). One head call per step.

        slots: which environment each row is (None: rows 0..B-1), for a head of several frames to stack each
        row's frame on that environment's earlier ones."""
        if len(frames) != len(proprio):
            raise ValueError(f"got {len(frames)} frames and {len(proprio)} proprio rows")
        tokens, cls = self.encode(frames, timer)
        with timer("head"):
            if self.frames > 1:
                tokens, cls = self._stack(tokens, cls, range(len(frames)) if slots is None else slots)
            return _row_by_row(self.policy.predict, tokens, cls, np.asarray(proprio, dtype=np.float32))

    def _stack(self, tokens: torch.Tensor, cls: torch.Tensor | None, slots: Sequence[Any]
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, N, C) -> (B, F, N, C) (and cls (B, C) -> (B, F, C)): each row after its slot's last F - 1
        frames, the episode's first frame repeated where there are fewer (as the policy was trained)."""
        if len(slots) != len(tokens):
            raise ValueError(f"got {len(slots)} slots for {len(tokens)} frames")
        F = self.frames
        rows_t, rows_c = [], []
        for i, s in enumerate(slots):
            now = (tokens[i], None if cls is None else cls[i])
            past = self._past.setdefault(s, [])
            seq = [past[0] if past else now] * (F - 1 - len(past)) + past + [now]  # (F,) oldest first
            rows_t.append(torch.stack([t for t, _ in seq]))
            if cls is not None:
                rows_c.append(torch.stack([c for _, c in seq]))
            past.append(now)
            del past[:-(F - 1)]
        return torch.stack(rows_t), (torch.stack(rows_c) if cls is not None else None)


def _row_by_row(head: Callable[..., np.ndarray], *inputs: Any) -> np.ndarray:
    """head(*inputs) one row at a time, stacked. The head's matrix products round differently for
    different batch sizes (~1e-6), and the closed loop can turn that into a different episode; row by
    row, an episode's actions do not depend on which episodes share its step (lockstep slots, Ray
    chunks, a resumed journal). The encoder needs no such care (its rows are equal at any batch
    size, tests/test_control_loop.py); the head costs ~1 ms a row against ~30 ms to encode one."""
    n = len(inputs[0])
    return np.concatenate([head(*(None if x is None else x[i:i + 1] for x in inputs)) for i in range(n)])
