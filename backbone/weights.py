"""Weights: local files without unpickling, position-embedding resampling, the offline gate."""
from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import socket
from pathlib import Path
from typing import Any

import torch

from .errors import BackboneUnavailable, GridMismatch

log = logging.getLogger("frozenvit.backbone")


WEIGHTS_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt")
# Where training scripts keep the weights inside a checkpoint dict, in the order timm's loader prefers them
# (`timm.models.load_state_dict`: the EMA weights first), then other layouts (DINO's teacher before its student).
STATE_DICT_KEYS = ("state_dict_ema", "model_ema", "state_dict", "model", "module", "teacher", "student")


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Load a `.safetensors` or `.pth/.pt/.bin/.ckpt` file (suffix in any case) as a flat state dict. Never
    unpickles code.

    A training checkpoint that keeps the weights under a key (`STATE_DICT_KEYS`) gives that dict: the EMA weights
    when there are EMA and plain ones, as timm's loader takes them; which key was taken is logged (a warning when
    there was a choice). A "module." prefix (DataParallel) is removed from every key.

    Raises BackboneUnavailable naming the file when it is missing, truncated, not a weights file, a pickle that
    holds Python objects or code (saying what was found: a numpy array, an argparse.Namespace, a class of the
    script that saved it, ...; only tensors, numbers, strings and containers of them are read), a dict of no tensors
    (naming its keys), or when a tensor holds NaN or inf (bytes corrupted in a copy).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if path.is_dir():
        inside = sorted(p.name for p in path.iterdir() if p.suffix.lower() in WEIGHTS_SUFFIXES)
        raise BackboneUnavailable(f"weights {path} is a folder, not a weights file: pass the .safetensors or .pth "
                                  "file itself" + (f" (it holds {', '.join(inside[:4])})" if inside else ""))
    if not path.is_file():
        raise BackboneUnavailable(f"weights file {path} does not exist")
    if suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            sd = load_file(str(path))
        except Exception as e:  # SafetensorError (bad header, truncated), OSError
            raise BackboneUnavailable(_unreadable(path, e, "a .safetensors file")) from e
    elif suffix in WEIGHTS_SUFFIXES:
        try:
            with torch.serialization.safe_globals(_numpy_scalar_globals()):   # e.g. {"best_acc1": np.float64(..)}
                sd = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as e:  # pickle.UnpicklingError, EOFError, RuntimeError (zip), OSError
            detail = _torch_load_detail(e)
            if re.search(r"unsupported global|allowed global|global .* is blocked", detail, re.IGNORECASE):
                raise BackboneUnavailable(
                    f"{path} holds pickled Python objects or code, which is not loaded: "
                    f"{_pickled_global(detail, type(e).__name__)}. frozenvit reads only tensors, numbers (numpy's "
                    "numeric scalars too), strings and dicts, lists or tuples of them from a .pth file, with "
                    "torch.load(weights_only=True), which never unpickles anything else, because unpickling can run "
                    "code. Where you trust the file, save the state dict alone with safetensors: "
                    "safetensors.torch.save_file(torch.load(f, weights_only=False)['model'], 'w.safetensors') (the "
                    "key that holds the state dict), or torch.save(state_dict, 'plain.pth')"
                ) from e
            raise BackboneUnavailable(_unreadable(path, e, "a PyTorch checkpoint", detail)) from e
        sd = _unwrap_checkpoint(sd, path)
    else:
        raise BackboneUnavailable(f"{path}: unknown weights format {path.suffix!r}; use .safetensors or .pth")
    if not isinstance(sd, dict) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        found = (f" (its top-level keys: {', '.join(map(repr, list(sd)[:8]))}{', ...' if len(sd) > 8 else ''})"
                 if isinstance(sd, dict) and sd else "")
        raise BackboneUnavailable(f"{path} does not hold a flat dict of tensors{found}; pass the model's state_dict "
                                  "saved with safetensors.torch.save_file or torch.save")
    _check_finite(sd, path)
    return {str(k).removeprefix("module."): v for k, v in sd.items()}


def _unwrap_checkpoint(ckpt: Any, path: Path) -> Any:
    """The state dict inside a training checkpoint dict (`STATE_DICT_KEYS`, the first found), or `ckpt` itself."""
    if not isinstance(ckpt, dict) or all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        return ckpt
    found = [k for k in STATE_DICT_KEYS if isinstance(ckpt.get(k), dict) and ckpt[k]]
    if not found:
        return ckpt
    if len(found) > 1:
        log.warning("%s holds the state dicts %s: loading %r%s. To load another, save it alone: "
                    "torch.save(ckpt[KEY], 'w.pth')", path, ", ".join(map(repr, found)), found[0],
                    " (the EMA weights, as timm's loader prefers them)" if found[0].endswith("_ema") else "")
    else:
        log.info("%s: loading the state dict under %r", path, found[0])
    return ckpt[found[0]]


def _check_finite(sd: dict[str, torch.Tensor], path: Path) -> None:
    """BackboneUnavailable naming the first floating-point tensor that holds NaN or inf: trained weights are finite,
    so the file's bytes were corrupted (a broken copy or download). Attention masks (keys ending in "mask") may hold
    -inf on purpose and are not checked."""
    for k, v in sd.items():
        if v.is_floating_point() and not str(k).endswith("mask") and not bool(torch.isfinite(v).all()):
            bad = int((~torch.isfinite(v)).sum())
            raise BackboneUnavailable(
                f"{path}: tensor {k!r} {tuple(v.shape)} holds {bad} NaN or inf value(s); trained weights are finite, "
                "so the file is corrupted (bytes changed in a copy or download). Copy or download it again and "
                "compare its size and checksum with the source")


def _numpy_scalar_globals() -> list:
    """What torch.load(weights_only=True) needs to read numpy scalars of numeric dtypes (a training script's
    `best_acc1`, `epoch`): the scalar constructor and the dtypes. It builds a value from raw bytes and calls
    nothing else; arrays and object scalars still need globals that stay refused (`_reconstruct`, classes)."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    return [core.multiarray.scalar, np.dtype, *(type(np.dtype(t)) for t in "?bBhHiIlLqQefdgFDG")]


#: What the pickle global torch.load(weights_only=True) stopped at says the file holds: (pattern, description)
_GLOBAL_KINDS = (
    (r"^numpy(\._core|\.core)?\.multiarray\._reconstruct$|^numpy\.ndarray$", "a numpy array"),
    (r"^numpy\.", "a numpy object"),
    (r"^argparse\.Namespace$", "an argparse.Namespace (a training script's arguments)"),
    (r"^torch\.optim\.", "a torch optimizer or learning-rate scheduler object"),
    (r"^(omegaconf|hydra)\.", "a config object (OmegaConf)"),
    (r"^(builtins|posix|nt|os|subprocess|sys|importlib)\.",
     "a reference to Python code (a function or class of its standard library)"),
    (r"^__main__\.", "an object of a class or a function defined in the script that saved it"),
    (r"^(torch\.nn\.modules|timm\.(models|layers))\.", "a whole model object (torch.save(model), not its state_dict)"),
)


def _pickled_global(detail: str, error: str) -> str:
    """What a file holds, from the pickle global torch.load refused in `detail` ("... GLOBAL
    numpy._core.multiarray._reconstruct was not an allowed global ..." -> "a numpy array (pickled as
    numpy._core.multiarray._reconstruct, the first object found that is not a tensor)"); where no global is named,
    a general phrase and torch's own words (`error`: the exception's type)."""
    m = re.search(r"GLOBAL\s+([\w.]+)", detail)
    if not m:
        return (f"besides tensors it keeps a class, a function, an optimizer or a config object ({error}: "
                f"{detail[:200]})")
    name = m.group(1)
    what = next((d for pattern, d in _GLOBAL_KINDS if re.search(pattern, name)), None)
    if what is None:
        what = f"an object of the module {name.rsplit('.', 1)[0]!r}" if "." in name else "a Python object"
    return f"{what} (pickled as {name}, the first object found that is not a tensor)"


def _torch_load_detail(e: Exception) -> str:
    """The informative line of torch.load's long weights_only message ("Unsupported operand 103", "... was not an
    allowed global ...", "Trying to load unsupported GLOBAL posix.system whose module posix is blocked")."""
    text = str(e)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
    elif "trusted source." in text:              # "... Trying to load unsupported GLOBAL posix.system whose module ..."
        text = text.split("trusted source.", 1)[1]
    text = text.split("\n\nCheck the documentation", 1)[0].split(" Please use `torch.serialization", 1)[0]
    return " ".join(text.split())


def _unreadable(path: Path, e: Exception, what: str, detail: str | None = None) -> str:
    size = path.stat().st_size
    detail = (detail if detail is not None else " ".join(str(e).split()))[:160] or "no detail"
    return (f"{path} ({size} bytes) cannot be read as {what} ({type(e).__name__}: {detail}); "
            "it is truncated or not a weights file. Download or copy it again (compare its size and checksum "
            "with the source), or re-save the weights with safetensors.torch.save_file")


def resample_pos_embed(pos: torch.Tensor, new_grid: tuple[int, int], num_prefix: int,
                       old_grid: tuple[int, int] | None = None, interpolation: str = "bicubic",
                       antialias: bool = True, align_corners: bool | None = None) -> torch.Tensor:
    """(1, P + h*w, C) -> (1, P + h'*w', C): resampled on the grid (bicubic with antialias unless the model's
    family asks otherwise, `families.pos_embed_resampling`), the P prefix rows untouched.

    Returns `pos` itself when the grid is unchanged (identity, bit for bit).
    """
    from timm.layers import resample_abs_pos_embed

    n = pos.shape[1] - num_prefix
    if old_grid is None:
        side = math.isqrt(n)
        if side * side != n:
            raise GridMismatch(f"position embedding of {n} tokens is not square; pass the old grid explicitly")
        old_grid = (side, side)
    if tuple(old_grid) == tuple(new_grid):
        return pos
    out = resample_abs_pos_embed(pos.float(), list(new_grid), list(old_grid), num_prefix_tokens=num_prefix,
                                 interpolation=interpolation, antialias=antialias, align_corners=align_corners)
    log.info("position embeddings resampled from %dx%d to %dx%d tokens (%s, %d prefix tokens kept)",
             old_grid[0], old_grid[1], new_grid[0], new_grid[1], interpolation, num_prefix)
    return out.to(pos.dtype)


def recorded_img_size(path: str | os.PathLike) -> tuple[int, int] | None:
    """The training size a .safetensors file records in its metadata ("img_size": "224,320" or "224"), else None."""
    if Path(path).suffix.lower() != ".safetensors":
        return None
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            text = (f.metadata() or {}).get("img_size")
        parts = [int(v) for v in str(text).replace("x", ",").split(",")] if text else []
    except (OSError, ValueError, RuntimeError):
        return None
    return (parts[0], parts[0]) if len(parts) == 1 else (parts[0], parts[1]) if len(parts) == 2 else None


def hub_is_allowed(timeout: float = 1.5) -> tuple[bool, str]:
    """Whether a hub download can work now, decided in at most ~`timeout` seconds."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return False, f"{var} is set"
    host = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True, "network reachable"
    except OSError as e:
        return False, f"{host} unreachable ({e.__class__.__name__})"


def offline_message(name: str, reason: str) -> str:
    return (f"cannot download pretrained weights for {name!r}: {reason}. Pass a local file instead: "
            f"load_backbone({name!r}, weights='path/to/{name}.safetensors')  (or .pth; CLI: --weights FILE). "
            "Or call load_backbone() with no name for the embedded offline default, or pretrained=False for "
            "random weights.")


def weights_fingerprint(backbone: Any) -> str:
    """The weights' sha256 of a backbone; for random (unhashed) weights, a hash of its parameters."""
    if getattr(backbone, "weights_sha256", None):
        return str(backbone.weights_sha256)
    h = hashlib.sha256()
    for name, p in backbone.model.state_dict().items():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
