"""An optimizer's state as flat tensors and JSON, so that training checkpoints need no pickle.

`optimizer_tensors(opt)` -> ({"<param index>.<key>": tensor}, param groups as JSON-ready dicts);
`load_optimizer(opt, tensors, groups)` puts them back. Used by every trainer's checkpoints (distillation,
forecasters, control policies); safetensors holds the tensors, JSON the groups.

`warmup_cosine(step, total, warmup)` is the one learning-rate schedule: linear warm-up over the first
`warmup` share of the steps, then cosine decay to zero.
"""
from __future__ import annotations

import math
from typing import Any


def optimizer_tensors(opt: Any) -> tuple[dict, list[dict]]:
    """Moments and step counts as {"i.key": tensor} (a placeholder when there is no state yet: safetensors
    refuses an empty file), and the param groups (lr, betas, ...)."""
    import torch

    sd = opt.state_dict()
    tensors = {f"{i}.{k}": v if torch.is_tensor(v) else torch.tensor(v)
               for i, st in sd["state"].items() for k, v in st.items()}
    return tensors or {"_": torch.zeros(0)}, [dict(g) for g in sd["param_groups"]]


def load_optimizer(opt: Any, tensors: dict, groups: list[dict]) -> None:
    """Restore what `optimizer_tensors` gave, after a JSON round trip of `groups` (betas back to tuples)."""
    state: dict[int, dict] = {}
    for key, v in tensors.items():
        if key != "_":
            i, k = key.split(".", 1)
            state.setdefault(int(i), {})[k] = v
    groups = [{**g, "betas": tuple(g["betas"])} if "betas" in g else g for g in groups]
    opt.load_state_dict({"state": state, "param_groups": groups})


def warmup_cosine(step: int, total: int, warmup: float = 0.05) -> float:
    """Learning-rate factor in [0, 1] at `step` of `total`: linear warm-up over `warmup` of the steps, then cosine."""
    warm = max(1, int(total * warmup + 1e-9))
    if step < warm:
        return (step + 1) / warm
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm))))
