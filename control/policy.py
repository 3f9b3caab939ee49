"""PatchTokenPolicy: behaviour cloning of a small head on cached frozen patch tokens.

    cache = cache_features("runs/demos/reach", bb)                  # encode every demo frame once
    pol = PatchTokenPolicy(pooling="attention", frames=1, epochs=200, seed=0).fit(cache)
    pol.save("runs/policies/reach-attn")                           # config.json + model.safetensors
    pol = PatchTokenPolicy.load("runs/policies/reach-attn")
    actions = pol.predict(tokens, cls, proprio)                     # (B, F, N, C), (B, F, C), (B, 4) -> (B, 4)

Training is seeded (weights, shuffling) and can checkpoint every few epochs; `fit` with the
same `checkpoint_dir` resumes from the last checkpoint (optimizer moments and shuffling
generator included), so a resumed run ends where an uninterrupted one would.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from frozenvit.backbone.suite.progress import progress_bar

from frozenvit.backbone.suite.artifacts import atomic_dir, check_tensor_metadata, read_config, tensor_metadata, write_json
from frozenvit.backbone.errors import ArtifactError

from .features import FeatureCache, backbone_fingerprint
from .head import PolicyHead, bc_loss
from .defaults import DEFAULT_BC_EPOCHS, DEFAULT_POS_CODE, DEFAULT_QUERY_DIVERSITY, LEGACY_HEAD_OPTIONS

KIND = "control.policy"
FORMAT_VERSION = 1
_HPARAMS = ("pooling", "num_queries", "num_heads", "frames", "hidden", "token_dropout", "keypoints", "pos_code",
            "query_diversity", "with_cls", "epochs", "batch_size", "lr", "weight_decay", "seed")


class PatchTokenPolicy:
    """Visuomotor policy head trained by behaviour cloning (MSE) on frozen patch tokens.

    pooling: "attention" (learned-query cross-attention over the patch grid), "cls" or "mean".
    frames: how many of the latest frames the head sees (frame stack, oldest first).
    keypoints: attention pooling also hands the MLP where each query looked (soft-argmax x, y).
    pos_code ("learned" | "sincos"), query_diversity (weight of the penalty on queries that look at
    the same place), with_cls (the CLS token beside the pooled patch tokens): see control.head.
    Learned attributes: head_ (PolicyHead), proprio_mean_/proprio_std_ (4,), meta_ (dict:
    the backbone the tokens came from), history_ (mean loss per epoch), n_samples_.
    """

    def __init__(self, pooling: str = "attention", *, num_queries: int = 4, num_heads: int = 4, frames: int = 1,
                 hidden: int = 256, token_dropout: float = 0.0, keypoints: bool = False,
                 pos_code: str = DEFAULT_POS_CODE, query_diversity: float = DEFAULT_QUERY_DIVERSITY,
                 with_cls: bool = False, epochs: int = DEFAULT_BC_EPOCHS,
                 batch_size: int = 256, lr: float = 1e-3, weight_decay: float = 1e-4, seed: int = 0) -> None:
        self.pooling = pooling
        self.num_queries = num_queries
        self.num_heads = num_heads
        self.frames = frames
        self.hidden = hidden
        self.token_dropout = token_dropout
        self.keypoints = keypoints
        self.pos_code = pos_code
        self.query_diversity = query_diversity
        self.with_cls = with_cls
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.seed = seed

    def get_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _HPARAMS}

    @property
    def uses_cls(self) -> bool:
        """Whether the head reads the CLS token (pooling "cls", or attention with_cls)."""
        return self.pooling == "cls" or (self.pooling == "attention" and self.with_cls)

    def __repr__(self) -> str:
        return "PatchTokenPolicy(" + ", ".join(f"{k}={v!r}" for k, v in self.get_params().items()) + ")"

    # -- training ---------------------------------------------------------------------------------
    def _build(self, embed_dim: int, num_tokens: int, proprio_dim: int, action_dim: int,
               grid: list[int] | None = None) -> PolicyHead:
        with torch.random.fork_rng(devices=[]):           # seeded init without touching the global RNG
            torch.manual_seed(self.seed)
            return PolicyHead(embed_dim, num_tokens, proprio_dim, action_dim, pooling=self.pooling,
                              num_queries=self.num_queries, num_heads=self.num_heads, frames=self.frames,
                              hidden=self.hidden, token_dropout=self.token_dropout, keypoints=self.keypoints,
                              grid=tuple(grid) if grid else None, pos_code=self.pos_code,
                              query_diversity=self.query_diversity, with_cls=self.with_cls)

    def init_untrained(self, backbone_meta: dict[str, Any], proprio_dim: int = 4, action_dim: int = 4
                       ) -> "PatchTokenPolicy":
        """A randomly initialised head of the right shape (for latency measurements only)."""
        n = backbone_meta["grid"][0] * backbone_meta["grid"][1]
        self.head_ = self._build(backbone_meta["embed_dim"], n, proprio_dim, action_dim, backbone_meta["grid"]).eval()
        self.proprio_mean_ = torch.zeros(proprio_dim)
        self.proprio_std_ = torch.ones(proprio_dim)
        self.meta_ = dict(backbone_meta)
        self.history_, self.n_samples_ = [], 0
        return self

    def fit(self, cache: FeatureCache, *, checkpoint_dir: str | Path | None = None, checkpoint_every: int = 10,
            progress: bool | None = None) -> "PatchTokenPolicy":
        """Behaviour cloning on `cache` (MSE between predicted and expert actions). Returns self."""
        if len(cache) == 0:
            raise ValueError("the feature cache is empty")
        if self.uses_cls and cache.cls is None:
            raise ValueError(f"pooling={self.pooling!r}{' with_cls' if self.with_cls else ''} needs a backbone "
                             "with a CLS token")
        M, N, C = cache.tokens.shape
        P, A = cache.proprio.shape[1], cache.actions.shape[1]
        head = self._build(C, N, P, A, cache.meta.get("grid"))
        mean = cache.proprio.mean(0)
        std = cache.proprio.std(0).clamp_min(1e-3)
        opt = torch.optim.AdamW(head.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        gen = torch.Generator().manual_seed(self.seed)
        stack = cache.stack_index(self.frames)                                      # (M, F)
        frames_in = _prepare_frames(head, cache)                                    # (M, N, C) or (M, C)
        steps_per_epoch = math.ceil(M / self.batch_size)
        total = self.epochs * steps_per_epoch
        start_epoch, history = 0, []
        ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
        if ckpt is not None and (ckpt / "train_state.safetensors").is_file():
            start_epoch, history = self._resume(ckpt, head, opt, gen, cache)

        self.meta_ = {k: v for k, v in cache.meta.items() if k != "configs"}
        self.proprio_mean_, self.proprio_std_ = mean, std
        self.n_samples_ = M
        head.train()
        bar = progress_bar(range(start_epoch, self.epochs), desc=f"bc {self.pooling}", unit="epoch",
                   disable=None if progress is None else not progress)
        for epoch in bar:
            perm = torch.randperm(M, generator=gen)
            tot = 0.0
            for s in range(steps_per_epoch):
                step = epoch * steps_per_epoch + s
                for g in opt.param_groups:                                          # cosine decay, 5% warm-up
                    g["lr"] = self.lr * _lr_factor(step, total)
                rows = perm[s * self.batch_size:(s + 1) * self.batch_size]         # (B,)
                x = frames_in[stack[rows]].float()                                  # (B, F, N, C) or (B, F, C)
                prop = (cache.proprio[rows] - mean) / std                           # (B, P)
                pred, penalty = head.forward_prepared(x, prop, generator=gen, return_penalty=True)
                loss = bc_loss(pred, cache.actions[rows])
                opt.zero_grad(set_to_none=True)
                (loss + penalty).backward()
                opt.step()
                tot += loss.item() * len(rows)                                      # history: the BC loss alone
            history.append(tot / M)
            bar.set_postfix(loss=f"{history[-1]:.4f}")
            if ckpt is not None and ((epoch + 1) % checkpoint_every == 0 or epoch + 1 == self.epochs):
                self.head_, self.history_ = head, history
                self._checkpoint(ckpt, opt, gen, epoch + 1)
        self.head_ = head.eval()
        self.history_ = history
        return self

    # -- inference --------------------------------------------------------------------------------
    @torch.inference_mode()
    def predict(self, tokens: torch.Tensor, cls: torch.Tensor | None, proprio: torch.Tensor | np.ndarray
                ) -> np.ndarray:
        """Actions (B, 4) in [-1, 1] for tokens (B, F, N, C), cls (B, F, C) or None, raw proprio (B, 4)."""
        self._check_fitted()
        prop = torch.as_tensor(np.asarray(proprio, dtype=np.float32))
        prop = (prop - self.proprio_mean_) / self.proprio_std_                      # (B, P)
        out = self.head_(tokens.float(), None if cls is None else cls.float(), prop)  # (B, A)
        return out.clamp(-1.0, 1.0).numpy()

    def check_backbone(self, backbone: Any) -> None:
        """Raise ArtifactError unless `backbone` is the one this policy was trained on."""
        self._check_fitted()
        want = self.meta_
        got_fp = backbone_fingerprint(backbone)
        got_size = list(backbone.config.img_size)
        if want.get("fingerprint") != got_fp or want.get("img_size") != got_size:
            raise ArtifactError(
                f"this policy was trained on {want.get('backbone')} at {want.get('img_size')} "
                f"(weights {str(want.get('fingerprint'))[:12]}), the backbone given is {backbone.config.name} at "
                f"{got_size} (weights {got_fp[:12]}); load the same backbone or retrain the policy")

    # -- artifacts --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the policy directory atomically: config.json + model.safetensors."""
        self._check_fitted()
        with atomic_dir(path, KIND) as tmp:
            self._write(tmp)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "PatchTokenPolicy":
        cfg = read_config(path, KIND, FORMAT_VERSION)
        check_tensor_metadata(Path(path) / "model.safetensors", cfg)
        pol = cls(**{**LEGACY_HEAD_OPTIONS, **cfg["params"]})
        t = load_file(str(Path(path) / "model.safetensors"))
        s = cfg["shapes"]
        pol.head_ = pol._build(s["embed_dim"], s["num_tokens"], s["proprio_dim"], s["action_dim"],
                               cfg["meta"].get("grid"))
        state = {k[len("head."):]: v for k, v in t.items() if k.startswith("head.")}
        try:
            pol.head_.load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise ArtifactError(f"{path}: weights do not fit the stored configuration ({e}); retrain") from e
        pol.head_.eval()
        pol.proprio_mean_, pol.proprio_std_ = t["proprio_mean"], t["proprio_std"]
        pol.meta_, pol.history_, pol.n_samples_ = cfg["meta"], cfg["history"], cfg["n_samples"]
        return pol

    def _write(self, directory: Path) -> None:
        tensors = {f"head.{k}": v.detach().contiguous() for k, v in self.head_.state_dict().items()}
        tensors["proprio_mean"] = self.proprio_mean_.contiguous()
        tensors["proprio_std"] = self.proprio_std_.contiguous()
        last = self.head_.mlp[-1]
        shapes = dict(embed_dim=self.head_.embed_dim, num_tokens=self.head_.num_tokens,
                      proprio_dim=int(self.proprio_mean_.numel()), action_dim=int(last.out_features))
        cfg = dict(kind=KIND, format_version=FORMAT_VERSION, params=self.get_params(), shapes=shapes,
                   meta=self.meta_, history=list(self.history_), n_samples=int(self.n_samples_))
        save_file(tensors, str(directory / "model.safetensors"), metadata=tensor_metadata(cfg))
        write_json(directory / "config.json", cfg)

    def _checkpoint(self, ckpt: Path, opt: torch.optim.Optimizer, gen: torch.Generator, epoch: int) -> None:
        state = {"epoch": torch.tensor(epoch), "generator": gen.get_state()}
        for i, s in opt.state_dict()["state"].items():
            for k, v in s.items():
                state[f"opt.{i}.{k}"] = torch.as_tensor(v).detach().clone().contiguous()
        with atomic_dir(ckpt, KIND, flag="--checkpoint") as tmp:
            self._write(tmp)
            save_file(state, str(tmp / "train_state.safetensors"))

    def _resume(self, ckpt: Path, head: PolicyHead, opt: torch.optim.Optimizer, gen: torch.Generator,
                cache: FeatureCache) -> tuple[int, list[float]]:
        cfg = read_config(ckpt, KIND, FORMAT_VERSION)
        if {"keypoints": False, **cfg["params"]} != self.get_params():
            raise ArtifactError(f"checkpoint {ckpt} was made with {cfg['params']}, not {self.get_params()}; "
                                "use another checkpoint_dir or the same hyperparameters")
        if cfg["meta"].get("fingerprint") != cache.meta.get("fingerprint") or cfg["n_samples"] != len(cache):
            raise ArtifactError(f"checkpoint {ckpt} was trained on other features; use another checkpoint_dir")
        t = load_file(str(ckpt / "model.safetensors"))
        head.load_state_dict({k[len("head."):]: v for k, v in t.items() if k.startswith("head.")})
        st = load_file(str(ckpt / "train_state.safetensors"))
        gen.set_state(st["generator"])
        opt_state: dict[int, dict[str, torch.Tensor]] = {}
        for k, v in st.items():
            if k.startswith("opt."):
                _, i, name = k.split(".", 2)
                opt_state.setdefault(int(i), {})[name] = v
        sd = opt.state_dict()
        sd["state"] = opt_state
        opt.load_state_dict(sd)
        return int(st["epoch"]), list(cfg["history"])

    def _check_fitted(self) -> None:
        if not hasattr(self, "head_"):
            raise ValueError("this PatchTokenPolicy is not fitted: call fit(cache) or PatchTokenPolicy.load(dir)")


ENSEMBLE_KIND = "control.policy_ensemble"


class PolicyEnsemble:
    """K behaviour-cloned heads on the same backbone block, acting by the mean of their actions.

    BC heads trained with different seeds disagree most where the demos say least, and one seed's
    mistakes compound in closed loop; averaging the members' actions cancels part of that variance.
    Measured (control/RESULTS.md, validation set): 3 CLS heads did better than one (0.52 vs 0.47),
    3 attention heads worse (0.44 vs 0.51): the mean follows the weaker seeds when they agree.

        ens = PolicyEnsemble.fit_seeds(cache, PatchTokenPolicy("attention"), seeds=[0, 1, 2])
        ens.save("runs/policies/reach-attn-x3")       # config.json + member_0/ member_1/ ... (safetensors)
        ens = load_policy("runs/policies/reach-attn-x3")  # a PatchTokenPolicy or a PolicyEnsemble

    Members must share pooling, frame stack and backbone (the agent feeds them one token batch).
    """

    def __init__(self, members: list[PatchTokenPolicy]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member policy")
        for m in members:
            m._check_fitted()
        first = members[0]
        for i, m in enumerate(members[1:], 1):
            if (m.pooling, m.frames, m.uses_cls) != (first.pooling, first.frames, first.uses_cls) or \
                    {k: m.meta_.get(k) for k in ("fingerprint", "img_size", "block")} != \
                    {k: first.meta_.get(k) for k in ("fingerprint", "img_size", "block")}:
                raise ValueError(f"ensemble member {i} ({m.pooling}, {m.frames} frames, block {m.meta_.get('block')}) "
                                 f"does not match member 0 ({first.pooling}, {first.frames} frames, block "
                                 f"{first.meta_.get('block')}, same backbone); train all members on one feature cache")
        self.members = list(members)

    @classmethod
    def fit_seeds(cls, cache: FeatureCache, template: PatchTokenPolicy, seeds: list[int], **fit_kw: Any
                  ) -> "PolicyEnsemble":
        """Train one copy of `template` (its hyperparameters, not its weights) per seed on `cache`."""
        params = template.get_params()
        return cls([PatchTokenPolicy(**dict(params, seed=int(s))).fit(cache, **fit_kw) for s in seeds])

    # the attributes the agent and evaluate() read from a policy
    pooling = property(lambda self: self.members[0].pooling)
    uses_cls = property(lambda self: self.members[0].uses_cls)
    frames = property(lambda self: self.members[0].frames)
    meta_ = property(lambda self: self.members[0].meta_)
    seeds = property(lambda self: [m.seed for m in self.members])

    def __len__(self) -> int:
        return len(self.members)

    def __repr__(self) -> str:
        return f"PolicyEnsemble({len(self)} x {self.pooling}, seeds={self.seeds})"

    @torch.inference_mode()
    def predict(self, tokens: torch.Tensor, cls: torch.Tensor | None, proprio: torch.Tensor | np.ndarray
                ) -> np.ndarray:
        """Mean of the members' actions (each already clamped to [-1, 1]): (B, 4)."""
        return np.mean([m.predict(tokens, cls, proprio) for m in self.members], axis=0)

    def check_backbone(self, backbone: Any) -> None:
        self.members[0].check_backbone(backbone)      # members share it (checked in __init__)

    def save(self, path: str | Path) -> Path:
        """Write the ensemble directory atomically: config.json + one policy folder per member."""
        with atomic_dir(path, ENSEMBLE_KIND) as tmp:
            names = []
            for i, m in enumerate(self.members):
                (tmp / f"member_{i}").mkdir()
                m._write(tmp / f"member_{i}")
                names.append(f"member_{i}")
            write_json(tmp / "config.json", dict(kind=ENSEMBLE_KIND, format_version=FORMAT_VERSION, members=names,
                                                 seeds=self.seeds))
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "PolicyEnsemble":
        cfg = read_config(path, ENSEMBLE_KIND, FORMAT_VERSION)
        return cls([PatchTokenPolicy.load(Path(path) / name) for name in cfg["members"]])


def load_policy(path: str | Path) -> PatchTokenPolicy | PolicyEnsemble:
    """Load a saved policy folder: a single head or an ensemble, whichever it holds."""
    try:
        kind = json.loads((Path(path) / "config.json").read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None                                   # PatchTokenPolicy.load says what is wrong
    return PolicyEnsemble.load(path) if kind == ENSEMBLE_KIND else PatchTokenPolicy.load(path)


@torch.no_grad()
def _prepare_frames(head: PolicyHead, cache: FeatureCache, chunk: int = 256) -> torch.Tensor:
    """The head's parameter-free per-frame input for every cached frame, computed once.

    LN'ed tokens (M, N, C) kept in float16 for attention pooling; pooled (M, C) float32 otherwise.
    """
    out = []
    for i in range(0, len(cache), chunk):
        cls = cache.cls[i:i + chunk] if cache.cls is not None else None
        x = head.prepare(cache.tokens[i:i + chunk], cls)
        out.append(x.half() if x.ndim == 3 else x)
    return torch.cat(out)


def _lr_factor(step: int, total: int) -> float:
    warm = max(1, total // 20)
    if step < warm:
        return (step + 1) / warm
    return 0.5 * (1.0 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
