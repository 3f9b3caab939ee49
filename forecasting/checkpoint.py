"""A neural forecaster's training state after an epoch, saved so that a stopped run continues exactly.

One folder, replaced atomically as a whole (`atomic_dir`): model.safetensors (the weights now),
best.safetensors (the best-validation weights so far), optim.safetensors (Adam's moments and step
counts), rng.safetensors (torch's generator, which draws the dropout masks) and state.json (the
epoch to run next, early-stopping counters, history, the optimizer's param groups, the scheduler's
state, numpy's generator, which orders the windows, and a fingerprint of the hyperparameters and the
data). No pickle. Resuming with other hyperparameters or other data is refused (`CheckpointMismatch`).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from frozenvit.backbone.suite.artifacts import atomic_dir, write_json
from frozenvit.backbone.suite.errors import ArtifactError
from frozenvit.backbone.suite.optimizer import load_optimizer, optimizer_tensors

KIND = "forecasting.checkpoint"
FORMAT_VERSION = 1


class CheckpointMismatch(ArtifactError):
    """The checkpoint to resume was written by a run with other hyperparameters or other data."""


@dataclass
class TrainingState:
    """What the loop carries from one epoch to the next, besides the network and the optimizer."""
    epoch: int = 0                          # the next epoch to run
    best: float = float("inf")
    bad: int = 0                            # epochs since the best validation loss
    stopped: bool = False                   # early stopping fired: nothing is left to run
    history: list = field(default_factory=list)
    best_state: dict | None = None          # name -> tensor, the best weights so far


def fingerprint(params: dict, arrays: Sequence[np.ndarray]) -> dict:
    """What must match for a checkpoint to be resumed: the training hyperparameters and the data."""
    digest = hashlib.sha256()
    for a in arrays:
        digest.update(str(a.shape).encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    keep = {k: v for k, v in params.items() if k not in ("progress", "device", "checkpoint_dir", "resume")}
    return {"params": json.loads(json.dumps(keep)), "data_sha256": digest.hexdigest()}


def unfinished(folder: str | Path) -> list[Path]:
    """The checkpoints under `folder` (any depth) of trainings that stopped before their last epoch and
    before early stopping: what `resume` would continue."""
    out = []
    for state in sorted(Path(folder).rglob("state.json")):
        try:
            st = json.loads(state.read_text())
            done = st["stopped"] or st["epoch"] >= st["fingerprint"]["params"]["max_epochs"]
        except (OSError, ValueError, KeyError, TypeError):
            continue                                          # not a checkpoint of ours
        if st.get("kind") == KIND and not done:
            out.append(state.parent)
    return out


def save(path: str | Path, net: nn.Module, opt: torch.optim.Optimizer, sched, rng: np.random.Generator,
         state: TrainingState, stamp: dict) -> None:
    """Write the state after an epoch; the folder is replaced only once everything is written."""
    from safetensors.torch import save_file

    moments, groups = optimizer_tensors(opt)
    with atomic_dir(path, KIND, flag="checkpoint", keep_edits=False) as tmp:
        save_file({k: v.detach().contiguous() for k, v in net.state_dict().items()}, str(tmp / "model.safetensors"))
        if state.best_state is not None:
            save_file({k: v.contiguous() for k, v in state.best_state.items()}, str(tmp / "best.safetensors"))
        save_file(moments, str(tmp / "optim.safetensors"))
        save_file({"torch": torch.get_rng_state()}, str(tmp / "rng.safetensors"))
        write_json(tmp / "state.json", {
            "kind": KIND, "format_version": FORMAT_VERSION, "fingerprint": stamp,
            "epoch": state.epoch, "best": state.best if np.isfinite(state.best) else None, "bad": state.bad,
            "stopped": state.stopped, "history": state.history, "param_groups": groups,
            "scheduler": sched.state_dict() if sched is not None else None,
            "numpy_rng": rng.bit_generator.state})


def load(path: str | Path, net: nn.Module, opt: torch.optim.Optimizer, sched, rng: np.random.Generator,
         stamp: dict) -> TrainingState:
    """Restore network, optimizer, scheduler and both generators in place; return the loop's state."""
    from safetensors.torch import load_file

    from frozenvit.backbone.suite.artifacts import verify_files

    path = Path(path)
    try:
        verify_files(path)                   # every file as written: a damaged one is named, never half-read
    except ArtifactError as e:
        raise ArtifactError(f"checkpoint {path} cannot be resumed: {e}. Start again without --resume") from None
    try:
        st = json.loads((path / "state.json").read_text())
        weights = load_file(str(path / "model.safetensors"))
        optim = load_file(str(path / "optim.safetensors"))
        torch_rng = load_file(str(path / "rng.safetensors"))["torch"]
        best = load_file(str(path / "best.safetensors")) if (path / "best.safetensors").is_file() else None
    except (OSError, ValueError, KeyError) as e:
        raise ArtifactError(f"checkpoint {path} cannot be read ({e}); start again without --resume") from e
    if st.get("kind") != KIND or st.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(f"{path} is not a format-{FORMAT_VERSION} training checkpoint; start again without "
                            "--resume")
    if st["fingerprint"] != stamp:
        what = "data" if st["fingerprint"]["data_sha256"] != stamp["data_sha256"] else "hyperparameters " + ", ".join(
            sorted(k for k in stamp["params"] if st["fingerprint"]["params"].get(k) != stamp["params"][k]))
        raise CheckpointMismatch(f"checkpoint {path} was written by a run with other {what}; resume with the "
                                 "stopped run's options and data, or start again without --resume")
    net.load_state_dict(weights)
    load_optimizer(opt, optim, st["param_groups"])
    if sched is not None:
        sched.load_state_dict(st["scheduler"])
    rng.bit_generator.state = st["numpy_rng"]
    torch.set_rng_state(torch_rng)
    history = [{k: float("nan") if v is None else v for k, v in r.items()} for r in st["history"]]   # JSON null: NaN
    return TrainingState(epoch=st["epoch"], best=float("inf") if st["best"] is None else st["best"], bad=st["bad"],
                         stopped=st["stopped"], history=history, best_state=best)
