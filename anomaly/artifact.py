"""Saving and loading a fitted PatchCore as an artifact directory.

    model/config.json        kind, format_version, hyperparameters, learned scalars, and the
                             backbone it was fitted on: name, weights fingerprint, preprocessing, grid
                             (threshold null: uncalibrated, too few normals to hold any out); "updates":
                             the normals `partial_fit` added, in order (absent: none); "selection": the
                             table `PatchCoreSearch` chose this configuration by (absent: not searched);
                             "progress": the progress setting, so that get_params round-trips (absent: None);
                             "blocks_given_as": "list" when `blocks` was a list (absent: a tuple)
    model/bank.safetensors   bank (M, D) float32, calibration_scores (n_hold,) float32 (n_hold may be 0)
    model/index.faiss        the faiss index over the bank

Written atomically (temporary sibling, one rename). Loaded with an int8 graph as its backbone (`load_exported` of
an int8 export), its float32-calibrated threshold is withheld (`withhold_int8_decisions`). Loading checks the format version and
that the backbone given (or rebuilt) is the one the bank was built with: another checkpoint,
preprocessing, input size or block choice would put test patches in another feature space and
yield meaningless maps, so it raises ArtifactError instead.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from frozenvit.backbone.suite.artifacts import (atomic_dir, check_tensor_metadata, read_config, sort_tensor_metadata,
                                              tensor_metadata, write_json)
from frozenvit.backbone.errors import ArtifactError, BackboneUnavailable
from frozenvit.backbone.suite.errors import UsageError

from .search import load_index, save_index

KIND = "anomaly.patchcore"
FORMAT_VERSION = 1
REPLACES = ("anomaly.ensemble",)     # `anomaly fit --out` may replace an ensemble it wrote with a single model
# preprocessing and geometry that must match between fit and load
_CONTRACT = ("name", "kind", "img_size", "patch_size", "grid", "embed_dim", "depth", "mean", "std",
             "interpolation", "resize")
_NOT_SAVED = ("backbone", "progress")   # constructor arguments that are not part of the model
# how an OutputConflict of a Python `save(path)` names the path ("output PATH is a non-empty folder ...; choose a new
# output path"): no CLI option is involved there; `anomaly fit` checks its --out itself first, naming --out
SAVE_FLAG = "output"


def backbone_fingerprint(bb: Any) -> str:
    """sha256 of the weights file, or of the parameters themselves when there is no file (random or hub)."""
    if bb.weights_sha256:
        return f"file:{bb.weights_sha256}"
    h = hashlib.sha256()
    for k, v in sorted(bb.model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return f"params:{h.hexdigest()}"


def describe_backbone(bb: Any) -> dict[str, Any]:
    c = bb.config
    d = {k: getattr(c, k) for k in _CONTRACT if hasattr(c, k)}
    d.update({"resize": bb.preprocess.resize, "weights_sha256": c.weights_sha256,
              "pretrained": getattr(c, "pretrained", None), "fingerprint": backbone_fingerprint(bb)})
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def _is_embedded_default(bb: Any) -> bool:
    """True for an embedded ViT: the artifact records {"default": True}, and _rebuild_backbone finds it by the
    weights' sha256."""
    from frozenvit.backbone import is_embedded

    return is_embedded(bb.weights_sha256)


def _named_source(bb: Any) -> dict | None:
    """{"name": ...} for a backbone with a named package's own weights (load_backbone("efficientnet_lite0"), the
    anomaly default), so that a model fitted in Python is rebuilt by name; None for anything else."""
    from frozenvit.backbone.named import NAMED, package_weights_path
    from frozenvit.backbone.suite.artifacts import sha256_file

    name = bb.config.name
    if name not in NAMED or not bb.weights_sha256 or not getattr(bb.config, "pretrained", True):
        return None
    try:
        if sha256_file(package_weights_path(name)) != bb.weights_sha256:
            return None
    except BackboneUnavailable:
        return None
    return {"name": name, "weights": None, "img_size": list(bb.config.img_size)}


def save_patchcore(det: Any, path: str | os.PathLike, backbone_source: dict | None = None,
                   selection: dict | None = None, flag: str = SAVE_FLAG) -> None:
    """Write `det` to `path` atomically; `flag` names the path in an OutputConflict (the CLI checks its --out itself)."""
    bb = det.backbone_
    # a threshold withheld for an int8 run (`withhold_int8_decisions`) is still the model's own: saved as it was
    withheld = getattr(det, "threshold_withheld_", None)
    threshold = det.threshold_ if withheld is None else withheld
    source = backbone_source or ({"default": True} if _is_embedded_default(bb) else _named_source(bb))
    cfg = {
        "kind": KIND, "format_version": FORMAT_VERSION,
        "params": {k: v for k, v in det.get_params(deep=False).items() if k not in _NOT_SAVED},
        "blocks": list(det.blocks_), "grid": list(det.grid_),
        "threshold": None if threshold is None else float(threshold),               # None: uncalibrated
        "map_range": [float(v) for v in det.map_range_],
        "n_train_images": int(det.n_train_images_), "n_train_patches": int(det.n_train_patches_),
        "holdout_indices": [int(i) for i in det.holdout_indices_],
        "bank_shape": list(det.bank_.shape),
        "backbone": describe_backbone(bb), "backbone_source": source,
    }
    if det.progress is not None:                    # not part of the model, kept so that get_params round-trips
        cfg["progress"] = bool(det.progress)
    if isinstance(det.blocks, list):                # blocks given as a list load as one (absent: as a tuple)
        cfg["blocks_given_as"] = "list"
    if getattr(det, "updates_", None):              # PatchCore.partial_fit: what was added, in order (absent: never)
        cfg["updates"] = list(det.updates_)
    if selection:                                   # PatchCoreSearch: how this configuration was chosen
        cfg["selection"] = selection
    cfg["params"]["blocks"] = list(cfg["params"]["blocks"]) if cfg["params"]["blocks"] is not None else None
    with atomic_dir(path, KIND, flag=flag, replaces=REPLACES) as tmp:
        save_file({"bank": det.bank_, "calibration_scores": np.asarray(det.calibration_scores_, np.float32)},
                  str(tmp / "bank.safetensors"), metadata=tensor_metadata(cfg))
        sort_tensor_metadata(tmp / "bank.safetensors")
        save_index(det.index_, tmp / "index.faiss")
        write_json(tmp / "config.json", cfg)


def model_digest(path: str | os.PathLike) -> str:
    """sha256 of a model folder (a PatchCore or an ensemble) as frozenvit wrote it: of the file digests its marker
    lists, each checked against its file first (ArtifactError for a changed one). A copy of the model has the same
    digest; an update, a refit or another model has another. Predictions record it (`anomaly predict --out`'s
    provenance.json), so that `anomaly review` knows which model they came from."""
    import json

    from frozenvit.backbone.suite.artifacts import recover, verify_files

    recover(path)
    marker = verify_files(path)
    return hashlib.sha256(json.dumps(marker["files"], sort_keys=True).encode()).hexdigest()


def uses_weights_file(cfg: dict) -> bool:
    """Whether a PatchCore config's backbone is rebuilt from a weights file (fitted with `--weights FILE`)."""
    src = cfg.get("backbone_source")
    return bool(src) and not src.get("default") and bool(src.get("weights"))


def _weights_given(weights: str | os.PathLike, desc: dict, path: Path) -> str:
    """`weights` as a path, checked against the sha256 the model recorded (ArtifactError naming both digests)."""
    from frozenvit.backbone.suite.artifacts import sha256_file

    weights = Path(weights)
    if not weights.is_file():
        raise UsageError(f"--weights {weights} does not exist (or is not a file): pass the weights file {path} was "
                         "fitted with")
    want, have = desc.get("weights_sha256"), sha256_file(weights)
    if want != have:
        raise ArtifactError(f"--weights {weights} is not the file {path} was fitted with: its sha256 is {have}, the "
                            f"model's weights have sha256 {want}; pass that file")
    return str(weights.resolve())


def _rebuild_backbone(cfg: dict, path: Path, weights: str | os.PathLike | None = None) -> Any:
    """The backbone an artifact was fitted on, rebuilt from its record at the recorded input size; `weights`: the
    weights file to use instead of the recorded path (checked against the recorded sha256)."""
    from frozenvit.backbone import load_backbone

    src = cfg.get("backbone_source")
    desc = cfg["backbone"]
    if weights is not None:
        if not uses_weights_file(cfg):
            raise UsageError(f"{path} was not fitted with a weights file (its backbone "
                             f"{desc.get('name')!r} is rebuilt without one): drop --weights")
        src = {**src, "weights": _weights_given(weights, desc, path)}
    if not src:
        how = "PatchCore.load(path, backbone=bb)"
        if not desc.get("pretrained"):          # seeded random weights: the same load_backbone call builds them again
            how = (f"PatchCore.load(path, backbone={random_weights_call(desc)}) (random weights are seeded: the "
                   "call that built them, with the same model kwargs, builds them again)")
        raise ArtifactError(
            f"{path} was fitted on {desc['name']!r} ({'random' if not desc.get('pretrained') else 'unnamed'} weights, "
            f"fingerprint {desc['fingerprint'][:18]}...) that cannot be rebuilt from the artifact; pass the same "
            f"backbone: {how}")
    size = tuple(desc["img_size"])                                      # (H, W) it was fitted at
    try:
        if src.get("default"):                  # an embedded ViT, found by its weights' sha256
            from frozenvit.backbone import embedded_name_for

            return load_backbone(embedded_name_for(desc.get("weights_sha256")), img_size=size,
                                 resize=desc.get("resize", "stretch"))
        return load_backbone(src["name"], weights=src.get("weights"), img_size=size,
                             resize=desc.get("resize", "stretch"), **src.get("model_kwargs", {}))
    except BackboneUnavailable as e:
        cure = ""
        if src.get("weights") and not Path(src["weights"]).is_file():
            cure = (f". The weights file was moved or not copied with the model: pass its new place with --weights "
                    f"NEW_PATH (the file of sha256 {desc.get('weights_sha256')}; in Python PatchCore.load(path, "
                    "weights=NEW_PATH) or load_detector(path, weights=NEW_PATH))")
        raise ArtifactError(f"{path} needs backbone {src}, which cannot be loaded here: {e}{cure}") from e


def random_weights_call(desc: dict) -> str:
    """The load_backbone call that rebuilds the seeded random backbone `desc` (describe_backbone) records: its name,
    or None for the embedded default's architecture, at its input size and resize policy."""
    try:
        from frozenvit.backbone import default_spec

        spec = default_spec()
    except Exception:                           # no embedded default shipped: only names
        spec = {}
    embedded = bool(spec) and all(desc.get(k) == spec.get(k) for k in ("depth", "embed_dim")) \
        and desc.get("name") == spec.get("arch")
    name = None if embedded else desc.get("name")
    args = [repr(name), "pretrained=False", f"img_size={tuple(desc.get('img_size', ()))}"]
    if desc.get("resize", "stretch") != "stretch":
        args.append(f"resize={desc['resize']!r}")
    return f"load_backbone({', '.join(args)})"


def check_backbone(cfg: dict, bb: Any, path: Path) -> None:
    want = cfg["backbone"]
    have = describe_backbone(bb)
    diffs = [f"{k}: artifact {want.get(k)!r}, given {have.get(k)!r}" for k in (*_CONTRACT, "fingerprint")
             if k in want and want.get(k) != have.get(k)]
    if diffs:
        raise ArtifactError(f"{path} was fitted on another backbone or preprocessing ({'; '.join(diffs)}). "
                            "Load it with the backbone it was fitted on, or refit on this one")


def load_patchcore(cls: type, path: str | os.PathLike, backbone: Any = None,
                   weights: str | os.PathLike | None = None) -> Any:
    path = Path(path)
    cfg = read_config(path, KIND, FORMAT_VERSION)
    check_tensor_metadata(path / "bank.safetensors", cfg)               # before anything acts on the config
    try:
        bb = backbone if backbone is not None else _rebuild_backbone(cfg, path, weights)
        check_backbone(cfg, bb, path)
        params = dict(cfg["params"])
        expected = set(cls().get_params(deep=False)) - set(_NOT_SAVED)
        if set(params) != expected:
            raise KeyError(f"hyperparameters {sorted(set(params) ^ expected)} are not this version's")
        if params.get("blocks") is not None:
            params["blocks"] = (list if cfg.get("blocks_given_as") == "list" else tuple)(params["blocks"])
        det = cls(backbone=bb, progress=cfg.get("progress"), **params)        # absent: progress None
        det._validate_params()
        threshold = None if cfg["threshold"] is None else float(cfg["threshold"])        # None: uncalibrated
        learned = dict(blocks_=tuple(cfg["blocks"]), grid_=tuple(cfg["grid"]), threshold_=threshold,
                       map_range_=tuple(float(v) for v in cfg["map_range"]),
                       n_train_images_=int(cfg["n_train_images"]), n_train_patches_=int(cfg["n_train_patches"]),
                       holdout_indices_=np.array(cfg["holdout_indices"], dtype=int),
                       updates_=list(cfg.get("updates", [])))                 # absent: never updated
        bank_shape = list(cfg["bank_shape"])
    except (UsageError, ArtifactError):                # a --weights file that is not there or not this model's
        raise
    except (KeyError, TypeError, ValueError) as e:    # a config written by another tool or edited by hand
        raise ArtifactError(f"{path}/config.json is not a complete {KIND} config ({type(e).__name__}: {e}); "
                            "refit the model") from e
    try:
        tensors = load_file(str(path / "bank.safetensors"))
        index = load_index(path / "index.faiss")
        bank, calibration = tensors["bank"], tensors["calibration_scores"]
    except Exception as e:   # missing or truncated files
        raise ArtifactError(f"{path}: bank or index cannot be read ({type(e).__name__}: {e}); refit the model") from e
    if list(bank.shape) != bank_shape or index.ntotal != len(bank) or index.d != bank.shape[1]:
        raise ArtifactError(f"{path}: bank {bank.shape} and index ({index.ntotal} x {index.d}) disagree with "
                            f"config {bank_shape}; the artifact is corrupt, refit it")
    det.backbone_, det.bank_, det.index_, det.calibration_scores_ = bb, bank, index, calibration
    for k, v in learned.items():
        setattr(det, k, v)
    from frozenvit.backbone.export import withhold_int8_decisions

    withhold_int8_decisions(det)          # an int8 backbone given: no decisions at the float32 threshold
    return det
