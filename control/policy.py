"""PatchTokenPolicy: behaviour cloning of a small head on cached frozen patch tokens.

    cache = cache_features("runs/demos/reach", bb)                  # encode every demo frame once
    pol = PatchTokenPolicy("attention", AttentionConfig(queries=4), seed=0).fit(cache)
    pol.save("runs/policies/reach-attn")                           # config.json + model.safetensors
    pol = PatchTokenPolicy.load("runs/policies/reach-attn")
    actions = pol.predict(tokens, cls, proprio)                     # (B, N, C), (B, C) or None, (B, 4) -> (B, 4)

By default (chunk=8) the head predicts the next k actions of every frame (`predict_chunk`,
(B, k, 4); `predict` gives the first of them). A frame's targets are the actions of its own and the next k-1
frames of its demo, the demo's last action repeated past its end. `VisuomotorAgent` acts by the temporal
ensemble of the overlapping chunks (ACT, Zhao et al. 2023: weights exp(-m * i), i = 0 for the oldest
prediction, m = control.defaults.DEFAULT_CHUNK_DECAY).

With augment=True and a cache holding K augmented views per frame (`cache_features(..., views=K)`), every
training sample is the clean frame or one of its K views, drawn uniformly per sample and epoch.

Training is seeded (weights, shuffling) and can checkpoint every few epochs, after the last, and when it
is stopped (KeyboardInterrupt: the last epoch it finished); `fit` with the same `checkpoint_dir` resumes
from the last checkpoint (optimizer moments and shuffling generator included), so a resumed run ends
where an uninterrupted one would, bit for bit.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import Interval, StrOptions

from frozenvit.backbone.errors import ArtifactError
from frozenvit.backbone.suite.artifacts import (atomic_dir, check_artifact_dir, check_tensor_metadata, config_digest,
                                                read_config, tensor_metadata, write_json)
from frozenvit.backbone.suite.errors import OutputConflict, ParameterError, ParameterErrorMixin
from frozenvit.backbone.suite.optimizer import load_optimizer, optimizer_tensors, warmup_cosine
from frozenvit.backbone.suite.progress import progress_bar

from .defaults import (DEFAULT_BATCH_SIZE, DEFAULT_BC_STEPS, DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHUNK,
                       DEFAULT_HIDDEN, DEFAULT_LR, DEFAULT_POOLING, DEFAULT_PRECISION, DEFAULT_SEED, MAX_BATCH_SIZE,
                       MAX_CHUNK, MAX_HIDDEN, POOLINGS, PRECISIONS)
from .errors import DemoError, PolicyError
from .features import FeatureCache, check_backbone, resolve_precision, save_tensors, token_blocks
from .head import AttentionConfig, HeadConfig, PolicyHead, bc_loss

KIND = "control.policy"
FORMAT_VERSION = 3


class PatchTokenPolicy(ParameterErrorMixin, BaseEstimator):
    """Visuomotor policy head trained by behaviour cloning on frozen patch tokens.

    pooling: "attention" | "cls" | "mean" (control.head).
    attention: AttentionConfig for pooling "attention" (None: its defaults); with another pooling
        it must stay None.
    hidden: width of the MLP's hidden layers (1 to MAX_HIDDEN).
    epochs: passes over the cache; None: as many as make about `DEFAULT_BC_STEPS` optimizer steps
        (`bc_epochs`), so that training takes about the same time whatever the number of demo frames.
    batch_size, lr, weight_decay, seed: the BC schedule (AdamW, 5% warm-up, cosine decay; seeded
        initialisation and shuffling).
    chunk: actions predicted per frame (k, 1 to MAX_CHUNK; 1: one action).
    augment: train on the cache's augmented views too, when it holds some (`cache_features(views=K)`): each
        sample of each epoch reads the clean frame or one of its K views, uniformly (seeded by `seed`). No
        effect on a cache without views.
    precision: arithmetic of attention pooling's two products with the tokens during training, "float32",
        "bfloat16" (the normalised tokens held in bfloat16, not float16) or "auto" (bfloat16 where the CPU
        multiplies it natively, `features.native_bfloat16`); weights, gradients and everything else stay
        float32, and `predict` is float32 always.
    A hyperparameter out of its range, or one that contradicts another or the features, is a ParameterError
    (sklearn's InvalidParameterError), raised by `fit` and `head_config` before any work.
    Learned attributes: head_ (PolicyHead), proprio_mean_/proprio_std_ (P,), meta_ (dict: the
    backbone, block and demos the tokens came from, `features.feature_meta`, with the demos' configurations as
    `train_configs`), history_ (mean BC loss per epoch), n_samples_.
    """

    _parameter_constraints: dict = {
        "pooling": [StrOptions(set(POOLINGS))],
        "attention": [AttentionConfig, None],
        "hidden": [Interval(Integral, 1, MAX_HIDDEN, closed="both")],
        "epochs": [Interval(Integral, 1, None, closed="left"), None],
        "batch_size": [Interval(Integral, 1, MAX_BATCH_SIZE, closed="both")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "seed": [Interval(Integral, -2**63, 2**64 - 1, closed="both")],     # what torch.manual_seed takes
        "chunk": [Interval(Integral, 1, MAX_CHUNK, closed="both")],
        "augment": ["boolean"],
        "precision": [StrOptions(set(PRECISIONS))],
    }

    def __init__(self, pooling: str = DEFAULT_POOLING, attention: AttentionConfig | None = None, *,
                 hidden: int = DEFAULT_HIDDEN, epochs: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 lr: float = DEFAULT_LR, weight_decay: float = 1e-4, seed: int = DEFAULT_SEED,
                 chunk: int = DEFAULT_CHUNK, augment: bool = True, precision: str = DEFAULT_PRECISION) -> None:
        self.pooling = pooling
        self.attention = attention
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.seed = seed
        self.chunk = chunk
        self.augment = augment
        self.precision = precision

    @property
    def uses_cls(self) -> bool:
        """Whether the head reads the CLS token (pooling "cls")."""
        return self.pooling == "cls"

    def head_config(self, meta: dict[str, Any], proprio_dim: int = 4, action_dim: int = 4) -> HeadConfig:
        """The head this policy gets on tokens described by `meta` (embed_dim, grid, has_cls, as in
        `backbone_meta`). Raises ParameterError when the hyperparameters contradict each other or the tokens."""
        self._validate_params()
        cfg = HeadConfig(int(meta["embed_dim"]), tuple(meta["grid"]), proprio_dim, action_dim, pooling=self.pooling,
                         attention=self.attention, hidden=self.hidden, norm_groups=len(token_blocks(meta)),
                         chunk=int(self.chunk))
        if cfg.uses_cls and meta.get("has_cls") is False:
            raise ParameterError(f"pooling {self.pooling!r} reads the CLS token and "
                                 f"{meta.get('backbone', 'the backbone')} has none; use pooling 'attention' or 'mean'")
        return cfg

    # -- training ---------------------------------------------------------------------------------
    def fit(self, cache: FeatureCache, *, checkpoint_dir: str | Path | None = None,
            checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY, progress: bool | None = None) -> "PatchTokenPolicy":
        """Behaviour cloning on `cache` (squared error of predicted and expert actions; with chunk k, of each
        frame's next k). Returns self.

        checkpoint_dir: saved every `checkpoint_every` epochs (an integer >= 1, else ParameterError) and after the
        last, and resumed from when it holds a checkpoint. Training stopped by KeyboardInterrupt (Ctrl-C) saves the
        last epoch it finished before the interrupt goes on (the state at that epoch's end, kept in memory as each
        epoch ends; nothing new when the folder holds that epoch already), so that a stopped run loses only the
        epoch it was in and resumes bit for bit like an uninterrupted one. Before any work, a folder that is a
        finished policy (OutputConflict) or a checkpoint of other hyperparameters or other features, or a damaged
        one (ArtifactError), is refused (`check_checkpoint`)."""
        if not (isinstance(checkpoint_every, Integral) and not isinstance(checkpoint_every, bool)
                and checkpoint_every >= 1):
            raise ParameterError(f"checkpoint_every must be an integer >= 1 (epochs between checkpoints), got "
                                 f"{checkpoint_every!r}")
        if len(cache) == 0:
            raise DemoError("the feature cache is empty")
        M, N, C = cache.tokens.shape
        P, A = cache.proprio.shape[1], cache.actions.shape[1]
        cfg = self.head_config(dict(cache.meta, embed_dim=C, has_cls=cache.cls is not None), P, A)
        if cfg.num_tokens != N:
            raise DemoError(f"the cache says grid {cfg.grid} but holds {N} tokens per frame; rebuild the cache")
        ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
        made = self.check_checkpoint(ckpt, cache.meta, M) if ckpt is not None else None
        head = self._build(cfg)
        mean = cache.proprio.mean(0)
        std = cache.proprio.std(0).clamp_min(1e-3)
        targets = cache.actions if cfg.chunk == 1 else cache.actions[chunk_rows(cache, cfg.chunk)].flatten(1)  # (M, k*A)
        opt = torch.optim.AdamW(head.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        gen = torch.Generator().manual_seed(self.seed)
        K = cache.views if self.augment else 0
        dtype = torch.bfloat16 if resolve_precision(self.precision) == "bfloat16" else torch.float32
        inputs = _prepare_inputs(head, cache, K, dtype)                             # (M*(K+1), N, C) or (M*(K+1), C)
        steps_per_epoch = math.ceil(M / self.batch_size)
        epochs = self.epochs if self.epochs is not None else bc_epochs(M, self.batch_size)
        total = epochs * steps_per_epoch
        start_epoch, history = 0, []
        if made is not None:
            start_epoch, history = self._resume(ckpt, made, head, opt, gen)

        self.meta_ = {k: v for k, v in cache.meta.items() if k != "configs"}
        if "configs" in cache.meta:                   # so that an evaluation can tell its configurations are held out
            self.meta_["train_configs"] = sorted(int(c) for c in cache.meta["configs"])
        self.proprio_mean_, self.proprio_std_ = mean, std
        self.n_samples_ = M
        head.train()
        bar = progress_bar(range(start_epoch, epochs), desc=f"bc {self.pooling}", unit="epoch", total=epochs,
                           initial=start_epoch, disable=None if progress is None else not progress)  # resumed: k of all
        saved, end = start_epoch, None               # the epoch the checkpoint holds; the last epoch's end
        try:
            for epoch in bar:
                perm = torch.randperm(M, generator=gen)
                pick = torch.randint(0, K + 1, (M,), generator=gen) if K else None      # (M,) 0: clean, k: view k
                tot = 0.0
                for s in range(steps_per_epoch):
                    step = epoch * steps_per_epoch + s
                    for g in opt.param_groups:                                          # cosine decay, 5% warm-up
                        g["lr"] = self.lr * warmup_cosine(step, total)
                    rows = perm[s * self.batch_size:(s + 1) * self.batch_size]         # (B,)
                    at = rows * (K + 1) + (pick[rows] if pick is not None else 0)   # (B,) frame r, view k: r*(K+1)+k
                    x = inputs.index_select(0, at)                                      # (B, N, C) or (B, C)
                    x = x if x.dtype == dtype else x.float()                            # bfloat16 tokens stay so
                    prop = (cache.proprio[rows] - mean) / std                           # (B, P)
                    pred, penalty = head.forward_prepared(x, prop, return_penalty=True)  # (B, k*A)
                    loss = bc_loss(pred, targets[rows])
                    opt.zero_grad(set_to_none=True)
                    (loss + penalty).backward()
                    opt.step()
                    tot += loss.item() * len(rows)                                      # history: the BC loss alone
                history.append(tot / M)
                bar.set_postfix(loss=f"{history[-1]:.4f}")
                if ckpt is None:
                    continue
                if (epoch + 1) % checkpoint_every == 0 or epoch + 1 == epochs:
                    self.head_, self.history_ = head, history
                    self._checkpoint(ckpt, opt, gen, epoch + 1)
                    saved = epoch + 1
                else:                                     # what a Ctrl-C in the next epoch saves (small: the head)
                    end = dict(epoch=epoch + 1, head=copy.deepcopy(head.state_dict()),
                               opt=copy.deepcopy(opt.state_dict()), gen=gen.get_state(), history=list(history))
        except KeyboardInterrupt:                     # stopped mid-epoch: save the last epoch's end, then stop
            if ckpt is not None and end is not None and end["epoch"] > saved:
                head.load_state_dict(end["head"])
                opt.load_state_dict(end["opt"])
                gen.set_state(end["gen"])
                self.head_, self.history_ = head, end["history"]
                self._checkpoint(ckpt, opt, gen, end["epoch"])
            raise
        self.head_ = head.eval()
        self.history_ = history
        return self

    def _build(self, cfg: HeadConfig) -> PolicyHead:
        with torch.random.fork_rng(devices=[]):           # seeded init without touching the global RNG
            torch.manual_seed(self.seed)
            return PolicyHead(cfg)

    # -- inference --------------------------------------------------------------------------------
    def predict(self, tokens: torch.Tensor, cls: torch.Tensor | None, proprio: torch.Tensor | np.ndarray) -> np.ndarray:
        """Actions (B, A) in [-1, 1] for tokens (B, N, C), cls (B, C) or None, raw proprio (B, P): with chunk > 1
        the first action of each frame's chunk (VisuomotorAgent ensembles the whole chunks instead)."""
        return self.predict_chunk(tokens, cls, proprio)[:, 0]

    @torch.inference_mode()
    def predict_chunk(self, tokens: torch.Tensor, cls: torch.Tensor | None, proprio: torch.Tensor | np.ndarray
                      ) -> np.ndarray:
        """The next `chunk` actions (B, k, A) in [-1, 1] of each frame; arguments as `predict`'s."""
        self._check_fitted()
        tokens, cls, prop = self._check_inputs(tokens, cls, proprio)
        prop = (prop - self.proprio_mean_) / self.proprio_std_                      # (B, P)
        out = self.head_(tokens.float(), None if cls is None else cls.float(), prop)  # (B, k*A)
        return out.clamp(-1.0, 1.0).view(len(prop), self.head_.cfg.chunk, -1).numpy()

    def _check_inputs(self, tokens: Any, cls: Any, proprio: Any
                      ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """tokens, cls and proprio as tensors, or PolicyError naming the shapes this head takes: tokens (B, N, C)
        (a torch tensor or numpy array), cls (B, C) or None, proprio (B, P), B >= 1 frames."""
        cfg = self.head_.cfg
        N, C, P = cfg.num_tokens, cfg.embed_dim, cfg.proprio_dim
        want = f"tokens (B, {N}, {C}), cls (B, {C}) or None and proprio (B, {P}), B >= 1 frames"

        def tensor(x: Any, name: str) -> torch.Tensor:
            if isinstance(x, torch.Tensor):
                return x
            if isinstance(x, np.ndarray) and (x.dtype.kind in "fiu"):
                return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
            raise PolicyError(f"{name} must be a torch tensor or numpy array of numbers, got "
                              f"{type(x).__name__}{'' if not isinstance(x, np.ndarray) else ' of ' + str(x.dtype)}; "
                              f"this head takes {want}")

        tokens = tensor(tokens, "tokens")
        if tokens.ndim != 3 or tuple(tokens.shape[1:]) != (N, C):
            one = " (one frame: tokens[None], proprio[None])" if tuple(tokens.shape) == (N, C) else ""
            raise PolicyError(f"tokens must be (B, {N}, {C}), got {tuple(tokens.shape)}{one}; this head takes {want}")
        B = tokens.shape[0]
        if B == 0:
            raise PolicyError(f"no frames to predict for (tokens {tuple(tokens.shape)}); this head takes {want}")
        if cls is not None:
            cls = tensor(cls, "cls")
            if self.uses_cls and tuple(cls.shape) != (B, C):
                raise PolicyError(f"cls must be (B, {C}) = ({B}, {C}) for {B} frames of tokens, got "
                                  f"{tuple(cls.shape)}; this head takes {want}")
            cls = cls if self.uses_cls else None                                    # unread by other poolings
        if isinstance(proprio, torch.Tensor):
            proprio = proprio.detach().cpu().numpy()
        try:
            prop = np.asarray(proprio, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise PolicyError(f"proprio must be numbers, (B, {P}), got {type(proprio).__name__} ({e}); this head "
                              f"takes {want}") from e
        if prop.shape != (B, P):
            raise PolicyError(f"proprio must be (B, {P}) = ({B}, {P}) for {B} frames of tokens, got "
                              f"{prop.shape}; this head takes {want}")
        for name, x in (("tokens", tokens), ("cls", cls), ("proprio", torch.from_numpy(prop))):
            if x is not None and x.is_floating_point() and not bool(torch.isfinite(x).all()):
                bad = int((~torch.isfinite(x)).sum())
                raise PolicyError(f"{name} holds {bad} value{'s' * (bad != 1)} that {'are' if bad != 1 else 'is'} "
                                  "not finite (NaN or infinite): the head would act on them; check the encoder's "
                                  "output or the proprioception")
        return tokens, cls, torch.from_numpy(prop)

    def check_backbone(self, backbone: Any) -> None:
        """Raise ArtifactError unless `backbone` is the one this policy was trained on; its cure names the command
        line's options and the Python call that give the policy's own encoder (`encoder_for_policy(policy)`)."""
        self._check_fitted()
        check_backbone(self.meta_, backbone)

    # -- artifacts --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the policy directory atomically: config.json + model.safetensors. OutputConflict (nothing
        written) where `path` holds anything but an earlier policy of frozenvit's."""
        self._check_fitted()
        with atomic_dir(path, KIND, flag="policy folder") as tmp:
            self._write(tmp)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "PatchTokenPolicy":
        """A saved policy; ArtifactError if `path` holds none, one of another format (retrain), or was edited."""
        cfg = read_config(path, KIND, FORMAT_VERSION)
        check_tensor_metadata(Path(path) / "model.safetensors", cfg)
        params = dict(cfg["params"])
        att = params.pop("attention")
        pol = cls(attention=AttentionConfig(**att) if att else None, **params)
        t = load_file(str(Path(path) / "model.safetensors"))
        pol.head_ = pol._build(HeadConfig.from_dict(cfg["head"]))
        state = {k[len("head."):]: v for k, v in t.items() if k.startswith("head.")}
        try:
            pol.head_.load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise ArtifactError(f"{path}: weights do not fit the stored configuration ({e}); retrain") from e
        pol.head_.eval()
        pol.proprio_mean_, pol.proprio_std_ = t["proprio_mean"], t["proprio_std"]
        pol.meta_, pol.history_, pol.n_samples_ = cfg["meta"], cfg["history"], cfg["n_samples"]
        return pol

    def _params(self) -> dict[str, Any]:
        """get_params() as JSON: the attention options as a dict."""
        p = self.get_params()
        p["attention"] = None if p["attention"] is None else dataclasses.asdict(p["attention"])
        return p

    def _tensors(self) -> dict[str, torch.Tensor]:
        tensors = {f"head.{k}": v.detach().contiguous() for k, v in self.head_.state_dict().items()}
        tensors["proprio_mean"] = self.proprio_mean_.contiguous()
        tensors["proprio_std"] = self.proprio_std_.contiguous()
        return tensors

    def _write(self, directory: Path) -> None:
        cfg = dict(kind=KIND, format_version=FORMAT_VERSION, params=self._params(), head=self.head_.cfg.to_dict(),
                   meta=self.meta_, history=list(self.history_), n_samples=int(self.n_samples_))
        save_tensors(self._tensors(), directory / "model.safetensors", metadata=tensor_metadata(cfg))
        write_json(directory / "config.json", cfg)

    def _checkpoint(self, ckpt: Path, opt: torch.optim.Optimizer, gen: torch.Generator, epoch: int) -> None:
        moments, groups = optimizer_tensors(opt)
        state = {f"opt.{k}": v.detach().clone().contiguous() for k, v in moments.items()}
        state["generator"] = gen.get_state()
        with atomic_dir(ckpt, KIND, flag="--checkpoint", keep_edits=False) as tmp:
            self._write(tmp)
            save_tensors(state, tmp / "train_state.safetensors")
            write_json(tmp / "train_state.json", dict(epoch=epoch, param_groups=groups))

    def check_checkpoint(self, checkpoint_dir: str | Path, meta: dict[str, Any], n_samples: int,
                         flag: str = "--checkpoint") -> dict | None:
        """Refuse, before any work, a checkpoint folder that `fit` on features described by `meta` (`FeatureCache.meta`,
        or `features.feature_meta` before encoding) of `n_samples` frames cannot resume: what `check_checkpoint_dir`
        refuses, a damaged checkpoint, and one made with other hyperparameters or on other features (encoder,
        blocks, input size, precision, views, or other demos: another task, camera, frame size, rendering, expert or
        content) - ArtifactError naming what differs. Returns the checkpoint's config, or None when the folder holds
        no checkpoint yet (absent or empty)."""
        ckpt = Path(checkpoint_dir)
        if not check_checkpoint_dir(ckpt, flag):
            return None
        cfg = _read_checkpoint(ckpt, flag)
        made = cfg["params"]
        now = self._params()
        if made != now:
            differ = ", ".join(f"{_option(k)} {_shown(made.get(k))} (now {_shown(now.get(k))})"
                               for k in sorted(set(made) | set(now)) if made.get(k) != now.get(k))
            raise ArtifactError(f"checkpoint {ckpt} was made with other hyperparameters: {differ}; use another "
                                f"{flag} folder or the same hyperparameters, or delete {ckpt} to train from the start")
        differ = _feature_differences(cfg["meta"], meta)
        if cfg["n_samples"] != n_samples and not any(part.startswith("--demos") for part in differ):
            differ.append(f"--demos: {cfg['n_samples']} frames (now {n_samples})")
        if differ:
            older = [k for k in _FEATURE_KEYS if k not in cfg["meta"] and meta.get(k) is not None]
            if older:                                  # a checkpoint of an earlier frozenvit cannot be matched
                differ.append(f"the checkpoint does not record {', '.join(older)} (made by an earlier frozenvit)")
            raise ArtifactError(f"checkpoint {ckpt} was trained on other features than these: {'; '.join(differ)}; "
                                f"use another {flag} folder (or a new one), or delete {ckpt} to train from the start "
                                "on these")
        return cfg

    def _resume(self, ckpt: Path, cfg: dict, head: PolicyHead, opt: torch.optim.Optimizer,
                gen: torch.Generator) -> tuple[int, list[float]]:
        """Load a checkpoint `check_checkpoint` accepted (its config `cfg`) into head, optimizer and generator."""
        t = load_file(str(ckpt / "model.safetensors"))
        head.load_state_dict({k[len("head."):]: v for k, v in t.items() if k.startswith("head.")})
        st = load_file(str(ckpt / "train_state.safetensors"))
        gen.set_state(st["generator"])
        info = json.loads((ckpt / "train_state.json").read_text())
        load_optimizer(opt, {k[len("opt."):]: v for k, v in st.items() if k.startswith("opt.")}, info["param_groups"])
        return int(info["epoch"]), list(cfg["history"])

    def _check_fitted(self) -> None:
        if not hasattr(self, "head_"):
            raise NotFittedError("this PatchTokenPolicy is not fitted: call fit(cache) or PatchTokenPolicy.load(dir)")


def chunk_rows(cache: FeatureCache, k: int) -> torch.Tensor:
    """(M, k) cache rows of each frame's next k frames in its own demo (by episode and step, in any stored
    order); past the demo's end its last frame, so that the demo's last action repeats (the expert holds at
    the goal)."""
    ep, step = cache.episode.numpy(), cache.step.numpy()
    order = np.lexsort((step, ep))                                                  # (M,) frames by demo, then step
    ep_sorted = ep[order]
    last = np.searchsorted(ep_sorted, ep_sorted, side="right") - 1                  # (M,) its demo's last position
    ahead = np.minimum(np.arange(len(order))[:, None] + np.arange(k), last[:, None])   # (M, k) sorted positions
    rows = np.empty((len(order), k), dtype=np.int64)
    rows[order] = order[ahead]
    return torch.from_numpy(rows)


def policy_digest(policy: PatchTokenPolicy) -> str:
    """sha256 of a fitted policy's hyperparameters, backbone description and weights (names it in run logs)."""
    policy._check_fitted()
    h = hashlib.sha256(config_digest(dict(params=policy._params(), meta=policy.meta_)).encode())
    for k, v in sorted(policy._tensors().items()):
        h.update(k.encode())
        h.update(v.cpu().numpy().tobytes())
    return h.hexdigest()


def _option(param: str) -> str:
    """The `control train` option of a hyperparameter (weight_decay and augment have none: their Python name)."""
    return {"attention": "--queries/--heads", "weight_decay": "weight_decay", "augment": "augment"}.get(
        param, "--" + param.replace("_", "-"))


def _shown(value: Any) -> str:
    if isinstance(value, dict):                                  # attention: {"queries": 4, "heads": 4}
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return "default" if value is None else str(value)


# what a checkpoint and the features it is resumed on must agree on, with the option that sets each: the encoder,
# its blocks and input size, the encoder's precision, the augmented views, and the demos (`features.feature_meta`)
_FEATURE_KEYS = {
    "backbone": "--backbone", "fingerprint": "--backbone/--weights", "pretrained": "--random-weights",
    "img_size": "--image-size", "grid": "--image-size", "block": "--blocks", "embed_dim": "--blocks",
    "has_cls": "--backbone", "precision": "--precision", "views": "--views", "view_shift": "--views",
    "view_jitter": "--views", "view_seed": "--views", "task": "--demos", "camera": "--demos",
    "demo_image_size": "--demos", "render": "--demos", "expert": "--demos", "demos": "--demos",
}


def _feature_differences(made: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between the features a checkpoint was trained on and these, one part per option:
    "--blocks: block 3 (now 1)"."""
    def shown(key: str, value: Any) -> str:
        if value is None:
            return "not recorded"
        if key in ("fingerprint", "demos"):                      # digests: their first 12 hex digits
            return str(value)[:12]
        return json.dumps(value) if isinstance(value, (dict, list)) else str(value)

    parts: dict[str, list[str]] = {}
    for key, option in _FEATURE_KEYS.items():
        if made.get(key) != now.get(key):
            what = "content digest" if key == "demos" else key
            parts.setdefault(option, []).append(f"{what} {shown(key, made.get(key))} (now {shown(key, now.get(key))})")
    return [f"{option}: {', '.join(p)}" for option, p in parts.items()]


def check_checkpoint_dir(checkpoint_dir: str | Path, flag: str = "--checkpoint") -> bool:
    """Refuse, before any work, a folder that cannot be a training checkpoint: what `atomic_dir` would refuse
    (another command's output, a user's files: OutputConflict), and a finished policy, which a checkpoint would
    overwrite (OutputConflict: a policy has no train_state.*). True when it holds a checkpoint to resume (its
    integrity is checked by `check_checkpoint`), False when it is absent or empty."""
    ckpt = Path(checkpoint_dir)
    check_artifact_dir(ckpt, KIND, flag=flag, keep_edits=False)
    if not ckpt.is_dir() or not any(ckpt.iterdir()):
        return False
    if not any((ckpt / name).exists() for name in ("train_state.safetensors", "train_state.json")):
        raise OutputConflict(f"{flag} {ckpt} holds a finished policy, not a training checkpoint (it has no "
                             f"train_state.*), and a checkpoint would overwrite it; give {flag} a new or empty folder "
                             "(or an earlier checkpoint)")
    return True


def _read_checkpoint(ckpt: Path, flag: str) -> dict:
    """A checkpoint's config, every file checked; ArtifactError with the cure a user can act on for a damaged one."""
    try:
        return read_config(ckpt, KIND, FORMAT_VERSION)
    except ArtifactError as e:
        why = str(e).split("; ")[0]
        raise ArtifactError(f"{flag} {ckpt} cannot be resumed: {why}; delete that folder to train from the start, "
                            f"or choose another {flag}") from e


def bc_epochs(frames: int, batch_size: int = DEFAULT_BATCH_SIZE, steps: int | None = None) -> int:
    """Epochs of `PatchTokenPolicy(epochs=None)` on `frames` frames: the fewest that make `steps` optimizer steps
    (None: `DEFAULT_BC_STEPS`)."""
    steps = DEFAULT_BC_STEPS if steps is None else steps
    return max(1, math.ceil(steps / math.ceil(frames / batch_size)))


@torch.no_grad()
def _prepare_inputs(head: PolicyHead, cache: FeatureCache, views: int, dtype: torch.dtype = torch.float32,
                    batch: int = 256) -> torch.Tensor:
    """The head's parameter-free input (`PolicyHead.prepare`) of every cached frame and of its first `views`
    views, computed once, in one table: row r*(views+1) is frame r, row r*(views+1)+k its view k, so that a
    batch is one gather. LN'ed tokens (M*(views+1), N, C) for attention pooling, kept in bfloat16 for a
    bfloat16 `dtype` and in float16 otherwise; pooled (M*(views+1), C) float32 for the other poolings."""
    M = len(cache)
    out = None
    for i in range(0, M, batch):
        j = min(i + batch, M)
        tokens, cls = cache.tokens[i:j, None], None if cache.cls is None else cache.cls[i:j, None]  # (b, 1, N, C)
        if views:
            tokens = torch.cat([tokens, cache.view_tokens[i:j, :views]], 1)                       # (b, 1+K, N, C)
            if cls is not None:
                cls = torch.cat([cls, cache.view_cls[i:j, :views]], 1)                             # (b, 1+K, C)
        x = head.prepare(tokens, cls)                                               # (b, 1+K, N, C) or (b, 1+K, C)
        x = (x.bfloat16() if dtype == torch.bfloat16 else x.half()) if x.ndim == 4 else x
        if out is None:
            out = x.new_empty((M, views + 1, *x.shape[2:]))
        out[i:j] = x
    return out.flatten(0, 1)

