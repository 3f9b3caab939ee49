"""The control loop's brain: frames -> preprocess -> frozen encoder -> policy head -> actions.

`VisuomotorAgent` serves several environments in lockstep (one batch through the encoder per
step) and can time each stage with a `StageTimer`. It keeps no state between steps: each action
depends on that step's frame and proprioception only.
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

    def reset(self, slots: Iterable[Any] | None = None) -> None:
        """A new episode starts in these environment slots (None: all). Nothing to forget: the agent has
        kept no state between steps since action chunks and the velocity input went (control/RESULTS.md);
        kept for loops written while it had some (benchmarks/control_endpoints.py)."""

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

    def act(self, frames: Sequence[np.ndarray], proprio: np.ndarray, timer: StageTimer = _NULL) -> np.ndarray:
        """Actions (B, 4) for B frames (H, W, 3) uint8 and proprio (B, 4). One head call per step."""
        if len(frames) != len(proprio):
            raise ValueError(f"got {len(frames)} frames and {len(proprio)} proprio rows")
        tokens, cls = self.encode(frames, timer)
        with timer("head"):
            return _row_by_row(self.policy.predict, tokens, cls, np.asarray(proprio, dtype=np.float32))


def _row_by_row(head: Callable[..., np.ndarray], *inputs: Any) -> np.ndarray:
    """head(*inputs) one row at a time, stacked. The head's matrix products round differently for
    different batch sizes (~1e-6), and the closed loop can turn that into a different episode; row by
    row, an episode's actions do not depend on which episodes share its step (lockstep slots, Ray
    chunks, a resumed journal). The encoder needs no such care (its rows are equal at any batch
    size, tests/test_control_loop.py); the head costs ~1 ms a row against ~30 ms to encode one."""
    n = len(inputs[0])
    return np.concatenate([head(*(None if x is None else x[i:i + 1] for x in inputs)) for i in range(n)])
