"""The control loop's brain: frames -> preprocess -> frozen encoder -> policy head -> actions.

`VisuomotorAgent` serves several environments in lockstep (one batch through the encoder per
step), keeps a frame stack per environment slot, and can time each stage with a `StageTimer`.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from .policy import PatchTokenPolicy, PolicyEnsemble


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
    """Acts for environment slots from their latest frames and proprioception.

        agent = VisuomotorAgent(policy, backbone)          # checks the policy was trained on this backbone
        agent.reset()                                      # forget all frame stacks
        a = agent.act([frame], proprio[None], slots=[0])   # (1, 4)
    """

    def __init__(self, policy: PatchTokenPolicy | PolicyEnsemble, backbone: Any, *, check: bool = True) -> None:
        if check:
            policy.check_backbone(backbone)
        self.policy = policy
        self.backbone = backbone
        self.block = int(policy.meta_["block"])
        self.frames = int(policy.frames)
        self.uses_cls = policy.uses_cls
        self._stacks: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}

    def reset(self, slots: Sequence[int] | None = None) -> None:
        """Start new episodes in `slots` (all when None): their frame stacks are dropped."""
        if slots is None:
            self._stacks.clear()
        for s in slots or ():
            self._stacks.pop(s, None)

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

    def act(self, frames: Sequence[np.ndarray], proprio: np.ndarray, slots: Sequence[int] | None = None,
            timer: StageTimer = _NULL) -> np.ndarray:
        """Actions (B, 4) for B frames (H, W, 3) uint8 and proprio (B, 4) of environment `slots`."""
        slots = list(range(len(frames))) if slots is None else list(slots)
        if len(slots) != len(frames) or len(frames) != len(proprio):
            raise ValueError(f"got {len(frames)} frames, {len(proprio)} proprio rows, {len(slots)} slots")
        tokens, cls = self.encode(frames, timer)
        with timer("head"):
            toks, clss = [], []
            for i, s in enumerate(slots):
                t_new = tokens[i:i + 1]                                             # (1, N, C)
                c_new = cls[i:i + 1] if cls is not None else None                  # (1, C)
                if s in self._stacks and self.frames > 1:
                    t_old, c_old = self._stacks[s]
                    t_stk = torch.cat([t_old[1:], t_new])                           # (F, N, C)
                    c_stk = torch.cat([c_old[1:], c_new]) if c_new is not None else None
                else:                                                              # episode start: repeat
                    t_stk = t_new.expand(self.frames, -1, -1)
                    c_stk = c_new.expand(self.frames, -1) if c_new is not None else None
                self._stacks[s] = (t_stk, c_stk)
                toks.append(t_stk)
                clss.append(c_stk)
            batch_t = torch.stack(toks)                                             # (B, F, N, C)
            batch_c = torch.stack(clss) if cls is not None else None                # (B, F, C)
            return self.policy.predict(batch_t, batch_c, np.asarray(proprio, dtype=np.float32))
