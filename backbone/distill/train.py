r"""Distil a ViT student from a frozen teacher on a folder of images (DeiT idea, dense + logit targets).

    frozenvit distill --teacher efficientnet_lite0 --student vit_tiny_patch16_224 \
        --data ../shared/data/imagenette/train --image-size 128 --epochs 20 --out runs/distill

Recipe. Images are decoded once into a uint8 memmap cache a little larger than the training crop.
Each step draws a batch, augments it on the fly (random resized crop + flip as one affine resample,
colour jitter, mixup/cutmix), runs the frozen teacher on exactly that batch and trains the student on
  * dense feature distillation: chosen student blocks' patch tokens -> LayerNorm -> Linear regress
    the teacher's feature maps (resized to the student grid, LayerNorm'ed per token), smooth-L1;
  * logit distillation: KL(teacher || student) at temperature T on the CLS token through a linear
    head (only when the teacher has a classifier).
  * optionally (--dense-blocks), dense targets at the teacher's stride-8 and stride-16 maps from chosen
    blocks through small projectors, one with a 2x upsampling for stride 8 (backbone/distill/dense.py).
The projection and logit heads are training scaffolding: the exported student is the plain timm ViT.
Checkpoints (safetensors + JSON, atomic) every few minutes; --resume continues bit-for-bit from the
last one because the data order and augmentation are pure functions of (seed, step).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from frozenvit.backbone.suite.progress import progress_bar

from frozenvit.backbone.errors import FrozenVitError, GridMismatch
from frozenvit.backbone.model import vit_tokens
from frozenvit.backbone.suite.artifacts import (atomic_dir, atomic_write_bytes, atomic_write_text, sha256_file,
                                                verify_files, write_json)
from frozenvit.backbone.suite.errors import OutputConflict, UsageError
from frozenvit.backbone.suite.optimizer import load_optimizer, optimizer_tensors

from .data import AugmentConfig, BatchReader, augment
from .dense import DenseHeads, dense_targets
from .teacher import Teacher


# ----------------------------------------------------------------------------- student
class Distiller(nn.Module):
    """Student ViT + training-only heads (dense projections, logit head)."""

    def __init__(self, student: nn.Module, target_dims: dict[int, int], num_classes: int,
                 strided: DenseHeads | None = None, fused_attn: bool = False) -> None:
        super().__init__()
        self.student = student
        for m in student.modules():  # explicit attention on CPU: its bf16 SDPA backward is ~4x slower (torch 2.14)
            if hasattr(m, "fused_attn"):
                m.fused_attn = fused_attn
        D = student.embed_dim
        self.dense = nn.ModuleDict({str(b): nn.Sequential(nn.LayerNorm(D), nn.Linear(D, c)) for b, c in target_dims.items()})
        self.logits = nn.Linear(D, num_classes) if num_classes > 0 else None
        self.strided = strided

    def forward(self, x: torch.Tensor) -> tuple[dict[int, torch.Tensor], torch.Tensor | None, dict[str, torch.Tensor]]:
        """x: (B, 3, H, W) -> ({block: (B, N, C_target)}, logits (B, K) or None, {stride target: (B, C, h', w')})."""
        s = self.student
        last = len(s.blocks) - 1
        wanted = {int(b) for b in self.dense} | set(self.strided.blocks if self.strided is not None else ())
        final, mids = vit_tokens(s, x, sorted(wanted))
        P = s.num_prefix_tokens
        tokens = {**mids, last: final}  # the last block's tokens after the final norm, as before
        preds = {}
        for b, head in self.dense.items():
            preds[int(b)] = head(tokens[int(b)][:, P:])  # (B, N, C)
        logits = None
        if self.logits is not None:
            pooled = final[:, 0] if s.cls_token is not None else final[:, P:].mean(1)  # (B, D)
            logits = self.logits(pooled)  # (B, K)
        grid = tuple(s.patch_embed.grid_size)
        strided = self.strided(tokens, P, grid) if self.strided is not None else {}
        return preds, logits, strided


def make_student(arch: str, img_size: int, **kwargs: Any) -> nn.Module:
    """A randomly initialised timm ViT without classifier at the training resolution."""
    import timm

    return timm.create_model(arch, pretrained=False, img_size=img_size, num_classes=0, **kwargs)


def check_student_arch(arch: str) -> None:
    """UsageError unless `arch` is a timm model of the plain ViT family (vit_*, deit_*), the only one the trainer
    and `ship` handle (one position embedding, patch tokens after the prefix tokens; backbone/families.py)."""
    from frozenvit.backbone.families import vit_family

    try:
        family = vit_family(arch, {})
    except KeyError:
        raise UsageError(f"--student {arch}: timm has no model of that name; use a ViT such as vit_tiny_patch16_224 "
                         "(timm.list_models('vit_*'))") from None
    except FrozenVitError as e:
        raise UsageError(f"--student {arch}: {e}") from None
    if family != "vit":
        what = "a ConvNet or hierarchical model" if family is None else f"a ViT of timm's {family} family"
        raise UsageError(f"--student {arch} is {what}; the trainer distils plain timm ViTs (vit_*, deit_*): use e.g. "
                         "vit_tiny_patch16_224 (timm.list_models('vit_*')), made smaller with --student-kwargs")


def build_student(arch: str, kwargs: dict, img_size: int) -> nn.Module:
    """The student a run trains, checked before any output: a plain timm ViT (`check_student_arch`) that timm builds
    with these kwargs, at least one block deep, whose patches tile `img_size` exactly.

    Raises UsageError naming --student / --student-kwargs, GridMismatch for an --image-size that is not a multiple of
    the patch size (the model would silently drop the rest of every crop)."""
    check_student_arch(arch)
    try:
        student = make_student(arch, img_size, **kwargs)
    except (TypeError, ValueError, AssertionError, RuntimeError) as e:
        raise UsageError(f"--student-kwargs {json.dumps(kwargs)}: timm cannot build {arch} with them "
                         f"({type(e).__name__}: {e}); e.g. '{{\"depth\": 6}}', with embed_dim a multiple of "
                         "num_heads") from None
    if len(student.blocks) < 1:
        raise UsageError(f"--student-kwargs {json.dumps(kwargs)} builds a student with {len(student.blocks)} blocks: "
                         "give depth >= 1 (e.g. '{\"depth\": 6}')")
    p = student.patch_embed.patch_size[0]
    if img_size % p:
        raise GridMismatch(f"--image-size {img_size}: {img_size} px does not divide into the student's {p} px patches; "
                           f"use e.g. {max(p, round(img_size / p) * p)}")
    return student


def check_init(init: str, student: nn.Module | None = None) -> None:
    """UsageError unless --init names weights the trainer can start from: "default", an embedded name, a weights file
    or a distill run folder with a checkpoint (checked before any output); for a run folder and a `student` given,
    also unless the run's student is this one in full (`check_run_student`)."""
    if not init:
        return
    from frozenvit.backbone.loading import EMBEDDED

    if init == "default" or init in EMBEDDED:
        return
    path = Path(init)
    if path.is_dir():
        if not (path / "ckpt" / "model.safetensors").is_file():
            raise UsageError(f"--init {init}: a folder must be a distill run with a checkpoint "
                             f"({path / 'ckpt' / 'model.safetensors'} is missing); give a weights file or an "
                             "embedded name instead")
        if student is not None:
            check_run_student(path / "ckpt" / "model.safetensors", student)
        return
    if not path.is_file():
        names = ", ".join(["default", *EMBEDDED])
        raise UsageError(f"--init {init} is not a weights file, a distill run folder or an embedded name ({names})")


def init_student_from(student: nn.Module, path: str | Path) -> dict[str, int]:
    """Start a student from a (deeper) ViT's weights, DistilBERT-style: its first len(student.blocks)
    blocks, patch embedding, prefix tokens and final norm; the position embedding is resampled once, here,
    to the student's grid (so a 128 px default trained on at 224 px exports a native 14x14 grid); tensors
    of other shapes (heads, wider models) are left random. path: a file, "default" or a name of
    loading.EMBEDDED (e.g. "frozenvit-default-v1"). Returns counts."""
    from frozenvit.backbone.weights import read_state_dict, resample_pos_embed

    from frozenvit.backbone.loading import ASSETS, EMBEDDED, embedded_spec

    if str(path) == "default" or str(path) in EMBEDDED:   # the embedded default, or an earlier one by name
        path = ASSETS / embedded_spec(None if str(path) == "default" else str(path))["file"]
    own = student.state_dict()
    depth = len(student.blocks)
    take = {}
    for k, v in read_state_dict(path).items():
        if k.startswith("blocks.") and int(k.split(".")[1]) >= depth:
            continue
        if k == "pos_embed" and k in own and v.shape != own[k].shape:
            v = resample_pos_embed(v.float(), tuple(student.patch_embed.grid_size), student.num_prefix_tokens)
        if k in own and own[k].shape == v.shape:
            take[k] = v.to(own[k].dtype)
    student.load_state_dict(take, strict=False)
    return {"copied": len(take), "student_tensors": len(own)}


def init_distiller_from(model: nn.Module, ckpt: str | Path) -> dict[str, int]:
    """Continue from another distill run's last checkpoint: the student AND its training heads (dense
    projections, logit head, stride-8/16 projectors), where names and shapes match. Starting a new schedule
    from a shipped student alone restarts those heads from random, and the first steps' gradients through
    them pull the student away from where it was. The student itself must match in full."""
    check_run_student(ckpt, model.student)
    own = model.state_dict()
    theirs = load_file(str(ckpt))
    take = {k: v.to(own[k].dtype) for k, v in theirs.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(take, strict=False)
    return {"copied": len(take), "tensors": len(own)}


def check_run_student(ckpt: str | Path, student: nn.Module) -> None:
    """UsageError unless a distill run's checkpoint `ckpt` holds every tensor of `student` in its shape (read from
    the file's header, no tensor loaded)."""
    from safetensors import safe_open

    with safe_open(str(ckpt), "pt") as f:
        theirs = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    missing = [f"student.{k}" for k, v in student.state_dict().items() if theirs.get(f"student.{k}") != tuple(v.shape)]
    if missing:
        raise UsageError(f"{ckpt}: its student differs from this one ({len(missing)} tensors missing or of another "
                         f"shape, e.g. {missing[0]}); use the same --student, --student-kwargs and --image-size")


# ----------------------------------------------------------------------------- losses
def dense_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """pred (B, N, C); target (B, C, h, w) already on the student grid -> smooth-L1 on LN'ed target."""
    t = target.flatten(2).transpose(1, 2).float()  # (B, N, C)
    t = F.layer_norm(t, t.shape[-1:])
    return F.smooth_l1_loss(pred.float(), t, beta=1.0)


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, T: float) -> torch.Tensor:
    """KL(teacher || student) at temperature T, scaled by T^2 (Hinton)."""
    return F.kl_div(F.log_softmax(student_logits.float() / T, -1), F.log_softmax(teacher_logits.float() / T, -1),
                    log_target=True, reduction="batchmean") * T * T


def teacher_targets(tmaps: list[torch.Tensor], pairs: dict[int, tuple[int, ...]], grid: tuple[int, int]) -> dict[int, torch.Tensor]:
    """Resize teacher maps to the student grid, LN each per token, concatenate per student block.

    tmaps: list of (B, C_j, h_j, w_j). Returns {student block: (B, sum C_j, gh, gw)}.
    """
    out = {}
    for b, idx in pairs.items():
        parts = []
        for j in idx:
            m = tmaps[j].float()
            if tuple(m.shape[-2:]) != tuple(grid):
                m = F.interpolate(m, size=grid, mode="bilinear", align_corners=False)  # (B, C, gh, gw)
            m = F.layer_norm(m.permute(0, 2, 3, 1), m.shape[1:2]).permute(0, 3, 1, 2)
            parts.append(m)
        out[b] = torch.cat(parts, 1)
    return out


# ----------------------------------------------------------------------------- training
@dataclass
class DistillConfig:
    student: str = "vit_tiny_patch16_224"
    student_kwargs: dict = field(default_factory=dict)
    img_size: int = 128
    cache_size: int = 144
    epochs: float = 10.0
    batch_size: int = 64
    lr: float = 8e-4
    min_lr: float = 1e-5
    weight_decay: float = 0.05
    warmup_steps: int = 250
    clip_grad: float = 1.0
    temperature: float = 2.0
    w_kd: float = 0.1                  # KD gradients are ~100x the element-mean dense losses' at equal weight:
    w_dense: float = 200.0             # these weights make the dense terms lead (measured on a checkpoint)
    seed: int = 0
    precision: str = "bf16"            # bf16 autocast (CPU AMX/AVX512) or fp32
    ckpt_every_s: float = 300.0
    log_every: int = 20
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    init: str = ""                     # weights whose first blocks start the student ("" = from scratch)
    dense_blocks: tuple = ()           # student blocks (-1 = last) regressing the teacher's stride-8/16 maps
    w_s8: float = 20.0                 # cosine losses (0..2 each), summed with these weights; at 1 their
    w_s16: float = 20.0                # gradients on the ViT were 20-50x below the w_dense terms' (pilot)
    device: str = "cpu"                # cpu | cuda[:i]; augmentation runs there too, its random draws stay on CPU
    workers: int = 0                   # threads reading batches ahead (0: in the loop, as on a 2-core CPU)

    @classmethod
    def from_json(cls, d: dict) -> "DistillConfig":
        d = dict(d)
        aug = d.pop("augment", {})
        aug = AugmentConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in aug.items()})
        return cls(augment=aug, **d)


def step_losses(model: Distiller, teacher: Teacher, x: torch.Tensor, pairs: dict[int, tuple[int, ...]],
                cfg: DistillConfig) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """The loss terms of one normalised batch x (B, 3, H, W) and their weights: loss = sum(w[k] * parts[k]).

    Terms: dense<b> (v1 targets of `pairs`, element-mean smooth-L1, weights sharing w_dense), b<i>_s<stride>
    (stride-8/16 targets, cosine), kd (logit distillation).
    """
    dev, amp = x.device.type, cfg.precision == "bf16"
    with torch.no_grad(), torch.autocast(dev, dtype=torch.bfloat16, enabled=amp):
        tmaps, tlogits = teacher.maps_and_logits(x)
    pair_targets = teacher_targets(tmaps, pairs, tuple(model.student.patch_embed.grid_size))
    with torch.autocast(dev, dtype=torch.bfloat16, enabled=amp):
        preds, slogits, spreds = model(x)
    parts = {f"dense{b}": dense_loss(preds[b], pair_targets[b]) for b in pairs}
    weights = {k: cfg.w_dense / len(pairs) for k in parts}
    if model.strided is not None:
        strides = {t.stride for t in model.strided.targets}
        parts.update(model.strided.losses(spreds, {s: tmaps[teacher.map_strides.index(s)] for s in strides}))
        weights.update({t.key: t.weight for t in model.strided.targets})
    if slogits is not None:
        parts["kd"] = kd_loss(slogits, tlogits, cfg.temperature)
        weights["kd"] = cfg.w_kd
    return parts, weights


def lr_at(step: int, total: int, cfg: DistillConfig) -> float:
    """Linear warm-up then cosine decay to min_lr."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    p = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * p))


def save_checkpoint(out: Path, model: Distiller, opt: torch.optim.Optimizer, state: dict) -> None:
    """out/ckpt/{model,optim}.safetensors + state.json, replaced atomically."""
    with atomic_dir(out / "ckpt", "distill_checkpoint", keep_edits=False) as tmp:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp / "model.safetensors")
        moments, groups = optimizer_tensors(opt)
        save_file(moments, tmp / "optim.safetensors")
        write_json(tmp / "state.json", {**state, "param_groups": groups})


def export_student(model: Distiller, path: str | Path, dtype: torch.dtype = torch.float16) -> str:
    """Write the bare timm ViT (no heads) to a .safetensors file; returns its sha256."""
    sd = {k: v.detach().to(dtype).contiguous() for k, v in model.student.state_dict().items()}
    from safetensors.torch import save as save_bytes

    atomic_write_bytes(path, save_bytes(sd, metadata={"format": "pt"}))
    return sha256_file(path)


# settings that do not change what a run computes: a resumed run may change them
RESUMABLE_SETTINGS = ("device", "workers", "ckpt_every_s", "log_every")


def check_batch_size(n_images: int, batch_size: int) -> int:
    """Steps per epoch; UsageError when the images do not fill one batch."""
    if n_images < batch_size:
        raise UsageError(f"--batch-size {batch_size} is more than the {n_images} images in --data: lower --batch-size")
    return n_images // batch_size


def plan_targets(teacher: Teacher, cfg: DistillConfig, depth: int) -> tuple[dict, dict, int, list, dict]:
    """What a depth-block student regresses on this teacher: (pairs, their target widths, logit classes, stride
    targets, teacher channels per stride), from one teacher forward on a blank image. Raises UsageError for a
    --dense-blocks outside the student, a stride the teacher has no map at, or nothing left to distil."""
    targets = dense_targets(cfg.dense_blocks, depth, cfg.w_s8, cfg.w_s16)
    pairs = teacher.default_pairs(depth) if cfg.w_dense > 0 else {}
    with torch.no_grad():
        probe = teacher.maps_and_logits(torch.zeros(1, 3, cfg.img_size, cfg.img_size))
    dims = {b: sum(probe[0][j].shape[1] for j in idx) for b, idx in pairs.items()}
    num_classes = probe[1].shape[1] if probe[1] is not None and cfg.w_kd > 0 else 0
    channels: dict[int, int] = {}
    for st, m in zip(teacher.map_strides, probe[0]):
        channels.setdefault(st, m.shape[1])  # the first map of each stride, as stride_map below picks
    missing = sorted({t.stride for t in targets} - set(channels))
    if missing:
        raise UsageError(f"the teacher has no map at stride {missing} (it has {sorted(channels)}): "
                         "use an EfficientNet-Lite teacher for stride-8/16 targets, or set their weight to 0")
    if not pairs and not targets and num_classes == 0:
        raise UsageError("nothing to distil: --w-dense, --w-kd and the stride weights are all off (or the teacher "
                         "has no classifier for --w-kd)")
    return pairs, dims, num_classes, targets, channels


def run_settings(cfg: DistillConfig, teacher: Teacher, n_images: int) -> dict:
    """What a run's config.json records of its settings: the teacher, the input normalisation the student is
    trained with (the teacher's mean/std, which `ship` writes into default.json), the image count and every
    DistillConfig field (student arch and kwargs, img_size, ...), as JSON would read them back."""
    return json.loads(json.dumps({"teacher": teacher.spec, "mean": [float(v) for v in teacher.mean],
                                  "std": [float(v) for v in teacher.std], "n_images": n_images, **asdict(cfg)}))


def read_run_state(out: Path) -> tuple[int, int] | None:
    """(step, total steps) of the run checkpointed in out/ckpt, None when there is none."""
    try:
        st = json.loads((out / "ckpt" / "state.json").read_text())
        return int(st["step"]), int(st["total_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_run_folder(out: str | Path, settings: dict, resume: bool) -> None:
    """Refuse, before anything is written, to start a run over an earlier one in `out`.

    Without resume: a stopped run (its checkpoint has steps left) and a finished one (it wrote its student) are
    refused: starting over would overwrite the checkpoint, the hours it holds, and the student. With resume: a run
    recorded with other settings (config.json) is refused, since the checkpoint belongs to that schedule. An empty
    folder, or one whose run stopped before its first checkpoint, starts afresh."""
    out = Path(out)
    state = read_run_state(out)
    if not resume:
        if state is not None and state[0] < state[1]:
            raise UsageError(f"--out {out} holds a stopped distill run (step {state[0]} of {state[1]}): add --resume to "
                             "continue, or choose a new --out")
        if state is not None or (out / "student.safetensors").exists():
            done = f" (step {state[0]} of {state[1]})" if state is not None else ""
            raise UsageError(f"--out {out} holds a finished distill run{done} with its student "
                             f"{out / 'student.safetensors'}: choose a new --out (a finished run is never "
                             "started over)")
        return
    if state is None:
        return
    try:
        recorded = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        recorded = None
    if not isinstance(recorded, dict):
        raise UsageError(f"--out {out} has a checkpoint but no readable config.json, so --resume cannot tell whether "
                         "it is this run's: choose a new --out")
    differ = [k for k, v in settings.items()
              if k not in RESUMABLE_SETTINGS and k in recorded and recorded[k] != v]
    if differ:
        shown = ", ".join(f"{k} {recorded[k]!r} -> {settings[k]!r}" for k in differ[:4])
        raise UsageError(f"--resume: --out {out} holds a run with other settings ({shown}); resume it with the "
                         "command that started it, or choose a new --out for these settings")


def _restart_log(path: Path, step: int) -> None:
    """Keep the log lines of steps up to `step` (a resumed run's checkpoint), none for a fresh run."""
    kept = []
    if step > 0 and path.is_file():
        for line in path.read_text().splitlines():
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line)
            except (ValueError, KeyError, TypeError):
                continue
    if kept or path.exists():
        atomic_write_text(path, "".join(f"{line}\n" for line in kept), record=False)


def distill(teacher: Teacher, images: np.ndarray, cfg: DistillConfig, out: str | Path, resume: bool = False,
            max_steps: int | None = None, progress: bool | None = None) -> Distiller:
    """Train a student on uint8 images (N, S, S, 3) against a frozen teacher. Returns the Distiller.

    Writes out/log.jsonl (one line per log_every steps), out/ckpt/ (periodic + final) and
    out/student.safetensors (final). max_steps stops early (tests) without changing the schedule.
    """
    out = Path(out)
    torch.manual_seed(cfg.seed)
    student = build_student(cfg.student, cfg.student_kwargs, cfg.img_size)
    depth = len(student.blocks)
    N = len(images)
    steps_per_epoch = check_batch_size(N, cfg.batch_size)
    total = max(1, int(round(cfg.epochs * steps_per_epoch)))
    check_init(cfg.init)
    plan = plan_targets(teacher, cfg, depth)               # UsageError for targets the teacher cannot give
    settings = run_settings(cfg, teacher, N)
    check_run_folder(out, settings, resume)                 # a stopped or finished run is never started over
    run_ckpt = Path(cfg.init) / "ckpt" / "model.safetensors" if cfg.init and Path(cfg.init).is_dir() else None
    if cfg.init and run_ckpt is None:
        counts = init_student_from(student, cfg.init)
        print(f"student initialised from {cfg.init}: {counts['copied']}/{counts['student_tensors']} tensors")
    pairs, dims, num_classes, targets, channels = plan
    strided = None
    if targets:
        strided = DenseHeads(targets, student.embed_dim, student.patch_embed.patch_size[0], channels)
    device = torch.device(cfg.device)
    model = Distiller(student, dims, num_classes, strided, fused_attn=device.type != "cpu").to(device)
    if run_ckpt is not None:
        counts = init_distiller_from(model, run_ckpt)
        print(f"student and training heads initialised from {run_ckpt}: {counts['copied']}/{counts['tensors']} tensors")
    teacher.model.to(device)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "pos_embed" not in n and "token" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "pos_embed" not in n and "token" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.999))
    step, elapsed, seen = 0, 0.0, 0
    if resume and (out / "ckpt" / "state.json").is_file():
        try:
            verify_files(out / "ckpt")       # every file as written: a damaged one is named, never half-read
        except FrozenVitError as e:
            raise type(e)(f"{out / 'ckpt'} cannot be resumed: {e}. Start again without --resume") from None
        st = json.loads((out / "ckpt" / "state.json").read_text())
        model.load_state_dict(load_file(out / "ckpt" / "model.safetensors"), strict=True)
        load_optimizer(opt, load_file(out / "ckpt" / "optim.safetensors"), st["param_groups"])
        step, elapsed, seen = st["step"], st["elapsed_s"], st["images_seen"]
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", {"kind": "distill_run", "format_version": 1, **settings,
                                     "pairs": {str(k): list(v) for k, v in pairs.items()}, "total_steps": total,
                                     "strided_targets": [asdict(t) for t in targets],
                                     "steps_per_epoch": steps_per_epoch})
    _restart_log(out / "log.jsonl", step)    # a fresh run starts a fresh log; a resumed one drops lines past its checkpoint
    mean = torch.tensor(teacher.mean, device=device).view(1, 3, 1, 1)
    std = torch.tensor(teacher.std, device=device).view(1, 3, 1, 1)
    model.train()
    last_ckpt = time.time()
    t_log, n_log = time.time(), 0
    run = {"kd": 0.0, "loss": 0.0, **{f"dense{b}": 0.0 for b in pairs}, **{t.key: 0.0 for t in targets}}
    end = total if max_steps is None else min(total, step + max_steps)
    bar = progress_bar(total=total, initial=step, desc="distill", disable=None if progress is None else not progress)
    log_f = open(out / "log.jsonl", "a")       # appended line by line: not in OUT's marker
    reader = BatchReader(images, cfg.batch_size, cfg.seed, ahead=cfg.workers, pin=device.type == "cuda")
    while step < end:
        t0 = time.time()
        g = torch.Generator().manual_seed(cfg.seed * 7919 + step * 2 + 1)
        u8 = reader.get(step, end).to(device, non_blocking=True)  # (B, S, S, 3)
        x = augment(u8, cfg.img_size, cfg.augment, g)
        x = (x - mean) / std  # (B, 3, H, W)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, total, cfg)
        parts, weights = step_losses(model, teacher, x, pairs, cfg)
        loss = sum(weights[k] * v for k, v in parts.items())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.clip_grad > 0:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad)
        opt.step()
        step += 1
        seen += u8.shape[0]
        elapsed += time.time() - t0
        n_log += 1
        run["loss"] += loss.item()
        for kname, v in parts.items():
            run[kname] += v.item()
        bar.update(1)
        if step % cfg.log_every == 0 or step == end:
            rec = {"step": step, "epoch": round(step / steps_per_epoch, 3), "lr": opt.param_groups[0]["lr"],
                   **{kname: round(v / n_log, 5) for kname, v in run.items()},
                   "img_s": round(n_log * cfg.batch_size / (time.time() - t_log), 2), "elapsed_s": round(elapsed, 1)}
            log_f.write(json.dumps(rec) + "\n")
            log_f.flush()
            bar.set_postfix(loss=rec["loss"], img_s=rec["img_s"])
            run = {kname: 0.0 for kname in run}
            t_log, n_log = time.time(), 0
        if time.time() - last_ckpt > cfg.ckpt_every_s or step == end:
            save_checkpoint(out, model, opt, {"step": step, "elapsed_s": elapsed, "images_seen": seen,
                                              "total_steps": total})
            last_ckpt = time.time()
    bar.close()
    reader.close()
    log_f.close()
    if step >= total:
        export_student(model, out / "student.safetensors")
    return model


def read_run_config(student_file: str | Path) -> dict | None:
    """The config.json of the distill run that wrote `student_file` (the file beside it), None where there is none."""
    try:
        cfg = json.loads((Path(student_file).parent / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) and cfg.get("kind") == "distill_run" else None


def _check_stats(flag: str, v: Any) -> tuple[float, float, float]:
    try:
        t = tuple(float(x) for x in v)
    except (TypeError, ValueError):
        t = ()
    if len(t) != 3 or not all(math.isfinite(x) for x in t) or (flag == "--std" and min(t) <= 0):
        raise UsageError(f"{flag} {v!r}: give three finite numbers, one per RGB channel"
                         + (", each > 0" if flag == "--std" else "") + ", e.g. 0.5 0.5 0.5")
    return t


def _recorded(run: dict | None, key: str, given: Any, flag: str, what: str) -> Any:
    """The run's recorded value of `key`; a `given` one must equal it (UsageError naming `flag` otherwise)."""
    if run is None or key not in run:
        return given
    if given is not None and json.loads(json.dumps(given)) != run[key]:
        raise UsageError(f"{flag} {given!r} contradicts the run's {what} {run[key]!r} in its config.json: drop "
                         f"{flag}; the run's own is shipped")
    return run[key]


def _file_shapes(student_file: Path) -> dict[str, tuple[int, ...]]:
    from safetensors import safe_open

    try:
        with safe_open(str(student_file), "pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as e:   # safetensors raises several types on a file that is not one
        raise UsageError(f"--student {student_file} is not a readable .safetensors file ({type(e).__name__}: {e}); "
                         "give the student.safetensors of a distill run") from None


def _meta_student(arch: str, kwargs: dict, img_size: int | None) -> nn.Module:
    """The student architecture without allocating weights (meta device), to compare a file's tensors with."""
    try:
        with torch.device("meta"):
            return make_student(arch, img_size, **kwargs) if img_size else make_student(arch, 224, **kwargs)
    except (TypeError, ValueError, AssertionError, RuntimeError) as e:
        raise UsageError(f"timm cannot build {arch} with {json.dumps(kwargs)} ({type(e).__name__}: {e})") from None


def _free_version(assets_dir: Path, above: int) -> int:
    """The lowest version above `above` that no default_v<N>.json in `assets_dir` names."""
    n = above + 1
    while (assets_dir / f"default_v{n}.json").exists():
        n += 1
    return n


def ship_student(student_file: str | Path, assets_dir: str | Path, name: str, teacher: Teacher | None = None,
                 train_img_size: int | None = None, img_size: int = 224, arch: str | None = None,
                 model_kwargs: dict | None = None, version: int | None = None,
                 mean: Any = None, std: Any = None) -> dict:
    """Copy a distilled bare-ViT file into assets_dir as <name>.safetensors and write default.json.

    default.json is what load_backbone() reads: arch, extra timm kwargs, training and serving
    resolution, the student's preprocessing (the mean/std its input was normalised with in training) and the
    file's sha256. Arch, kwargs, training size and mean/std come from the run's config.json beside the student
    file; a value given here must equal the recorded one. Without a run config the training size is read from the
    file's grid, arch/kwargs default to the trainer's (vit_tiny_patch16_224, none), and mean/std (or `teacher`)
    must be given: no default can be known to be right, and a wrong one gives wrong features without any error.
    The file must hold exactly that architecture's tensors.
    version N also writes the same spec as default_vN.json, which makes it loadable as "frozenvit-default-vN" after
    later defaults ship (`loading.embedded_names`). A default_vN.json or a <name>.safetensors that holds other
    weights is never replaced: UsageError / OutputConflict, before anything is copied.
    """
    from .teacher import LITE_TEACHERS, TEACHER_MEAN, TEACHER_STD

    student_file, assets_dir = Path(student_file), Path(assets_dir)
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
        raise UsageError(f"--version must be a positive int, got {version!r}")
    if not name or name != Path(name).name or name.startswith(".") or name.endswith(".safetensors"):
        raise UsageError(f"--name {name!r}: give a file stem such as my_default (no folder, no extension); the "
                         "weights are written as <assets>/<name>.safetensors")
    if not student_file.is_file():
        raise UsageError(f"--student {student_file} is not a file: give the student.safetensors of a distill run")
    run = read_run_config(student_file)
    arch = _recorded(run, "student", arch, "arch", "--student") or "vit_tiny_patch16_224"
    kwargs = {k: v for k, v in (model_kwargs or {}).items() if k != "num_classes"} if model_kwargs else None
    kwargs = _recorded(run, "student_kwargs", kwargs, "model_kwargs", "--student-kwargs") or {}
    train_img_size = _recorded(run, "img_size", train_img_size, "--train-image-size", "--image-size")
    if mean is None and std is None and teacher is not None:
        mean, std = teacher.mean, teacher.std
    if (mean is None) != (std is None):
        raise UsageError("--mean and --std go together: give both or neither")
    if mean is not None:
        mean, std = _check_stats("--mean", mean), _check_stats("--std", std)
    if run is not None and "mean" not in run and str(run.get("teacher", "")).split(":")[0] in LITE_TEACHERS:
        run = {**run, "mean": list(TEACHER_MEAN), "std": list(TEACHER_STD)}   # recorded before runs kept them: a
        # Lite teacher always normalises with these
    mean = _recorded(run, "mean", None if mean is None else list(mean), "--mean", "input mean")
    std = _recorded(run, "std", None if std is None else list(std), "--std", "input std")
    if mean is None:
        where = ("has no distill run config.json beside it" if run is None else
                 f"comes from a run whose config.json does not record its input normalisation (teacher "
                 f"{run.get('teacher')!r})")
        raise UsageError(f"--student {student_file} {where}, so the mean/std its input was normalised with in "
                         "training are unknown, and a wrong guess gives wrong features without an error: ship it "
                         "from its run folder, or give --mean and --std (0.5 0.5 0.5 for an EfficientNet-Lite "
                         "teacher; a ViT teacher's own, e.g. ImageNet's 0.485 0.456 0.406 / 0.229 0.224 0.225)")
    mean, std = _check_stats("--mean", mean), _check_stats("--std", std)
    check_student_arch(arch)

    shapes = _file_shapes(student_file)
    if train_img_size is None:      # no run config: the training size is the file's own grid
        ref = _meta_student(arch, kwargs, None)
        prefix = 0 if getattr(ref, "no_embed_class", False) else ref.num_prefix_tokens
        n = shapes.get("pos_embed", (0, 0))[1] - prefix
        g = int(round(math.sqrt(max(n, 0))))
        if g < 1 or g * g != n:
            raise UsageError(f"--student {student_file} has no square position-embedding grid for {arch}; give "
                             "--train-image-size, or ship it from its run folder")
        train_img_size = g * ref.patch_embed.patch_size[0]
    ref = _meta_student(arch, kwargs, int(train_img_size))
    want = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    wrong = sorted(k for k in set(want) | set(shapes) if want.get(k) != shapes.get(k))
    if wrong:
        k = "pos_embed" if "pos_embed" in wrong else wrong[0]
        g = ref.patch_embed.grid_size
        raise UsageError(f"--student {student_file} is not a {arch} {json.dumps(kwargs)} student trained at "
                         f"{train_img_size} px ({g[0]}x{g[1]} grid): {len(wrong)} tensors differ, e.g. {k} "
                         f"{shapes.get(k)} in the file vs {want.get(k)}; pass the run's --image-size as "
                         "--train-image-size, or ship it from its run folder")
    digest = sha256_file(student_file)
    versioned = None if version is None else assets_dir / f"default_v{version}.json"
    if versioned is not None and versioned.is_file():
        taken = json.loads(versioned.read_text()).get("sha256")
        if taken != digest:
            raise UsageError(f"{versioned} already names other weights (sha256 {str(taken)[:12]}...): version "
                             f"{version} is taken; ship as --version {_free_version(assets_dir, version)}, the "
                             "lowest free one above it")
    dst = assets_dir / f"{name}.safetensors"
    if dst.is_symlink() or (dst.exists() and (not dst.is_file() or sha256_file(dst) != digest)):
        raise OutputConflict(f"{dst} exists and holds other weights: shipping would overwrite it, and a spec that "
                             f"names it (default_vN.json) would no longer match its checksum. Choose another --name "
                             "(nothing was copied)")
    assets_dir.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        atomic_write_bytes(dst, student_file.read_bytes(), record=False)
    gh, gw = ref.patch_embed.grid_size
    spec = {"file": dst.name, "arch": arch, "model_kwargs": {"num_classes": 0, **kwargs},
            "embed_dim": ref.embed_dim, "depth": len(ref.blocks), "train_img_size": int(train_img_size),
            "train_grid": [gh, gw], "img_size": img_size, "mean": list(mean), "std": list(std),
            "interpolation": "bicubic", "crop_pct": 1.0, "sha256": sha256_file(dst)}
    write_json(assets_dir / "default.json", spec)
    if versioned is not None:
        write_json(versioned, spec)
    return spec
