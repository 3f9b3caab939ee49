"""The control loop's brain: frames -> preprocess -> frozen encoder -> policy head -> actions.

`VisuomotorAgent` serves several environments in lockstep (one batch through the encoder per
step) and can time each stage with a `StageTimer`.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np
import torch


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
        self.block = int(policy.meta_["block"])
        self.uses_cls = policy.uses_cls

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

    def act(self, frames: Sequence[np.ndarray], proprio: np.ndarray, timer: StageTimer = _NULL) -> np.ndarray:
        """Actions (B, 4) for B frames (H, W, 3) uint8 and proprio (B, 4)."""
        if len(frames) != len(proprio):
            raise ValueError(f"got {len(frames)} frames and {len(proprio)} proprio rows")
        tokens, cls = self.encode(frames, timer)
        with timer("head"):
            return self.policy.predict(tokens, cls, np.asarray(proprio, dtype=np.float32))
