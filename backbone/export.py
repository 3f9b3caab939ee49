"""A backbone's patch-grid forward as a deployable graph: ONNX (onnxruntime) or OpenVINO IR, and back.

    path = export_backbone(bb, "deploy/vit", blocks=(2, 5, 11), format="onnx")
    ebb = load_exported(path, source=bb)               # ArtifactError unless made from these weights/preprocessing
    grids = ebb.patch_grids(images, blocks=(2, 5, 11))  # the interface of FrozenBackbone.patch_grids

The graph is fixed at the backbone's input size and the chosen blocks (batch is dynamic); preprocessing stays
in Python (`Preprocess`, the same code as the torch path). The artifact folder (written by `atomic_dir`,
every file's digest checked on load) holds

    config.json        kind "backbone.export", format_version, format, blocks, norm, int8, the source
                       backbone's config (name, fingerprint of its weights) and preprocessing (size, mean, std,
                       interpolation, resize)
    model.onnx | model.xml + model.bin

`runtime_backbone(bb, runtime, precision=...)` is what `--runtime` and `--precision` call: the torch backbone
itself, or an export of it run by onnxruntime / OpenVINO in float32 (parity with torch), bfloat16 (OpenVINO's
CPU plugin on AMX / AVX512-BF16) or int8 (the export quantised, calibrated on images). Both runtimes are the
optional extra `frozenvit[deploy]`.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from .config import BackboneConfig
from .errors import ArtifactError, BackboneUnavailable, GridMismatch
from .model import FrozenBackbone
from .preprocess import Preprocess
from .runtimes import (DEFAULT_PRECISION, DEFAULT_RUNTIME, FORMAT_OF, FORMATS, PRECISIONS_OF, RUNTIME_OF, RUNTIMES,
                       SET_FILE, SET_KIND)
from .suite.artifacts import MARKER, atomic_dir, read_config, read_marker, recover, sha256_file, write_json
from .suite.errors import ParameterError
from .weights import weights_fingerprint

log = logging.getLogger("frozenvit.backbone")

KIND = "backbone.export"
FORMAT_VERSION = 1
SET_FORMAT_VERSION = 1        # of SET_FILE, in the folder of an export of one graph per member (runtimes.SET_KIND)
GRAPH = {"onnx": "model.onnx", "openvino": "model.xml"}
OPSET = 17
QUANTISED_OPS = ("Conv", "MatMul", "Gemm")     # what int8 quantises; the rest stays float
PREPROCESSING = ("img_size", "mean", "std", "interpolation", "resize")


def preprocessing(backbone: Any) -> dict[str, Any]:
    """What turns an image into the graph's input: size, normalisation, resize filter and policy."""
    c = backbone.config
    return dict(img_size=list(c.img_size), mean=list(c.mean), std=list(c.std), interpolation=c.interpolation,
                resize=backbone.preprocess.resize)


class PatchGridGraph(nn.Module):
    """pixels (B, 3, H, W) -> (grid_b0, prefix_b0, grid_b1, prefix_b1, ...) for a ViT with prefix tokens,
    (grid_b0, grid_b1, ...) for a ConvNet or a ViT without any (ExportedBackbone gives (B, 0, C) prefix tokens):
    FrozenBackbone.forward_pixels as one traceable forward (tuples of tensors), blocks in increasing order."""

    def __init__(self, backbone: FrozenBackbone, blocks: Sequence[int], norm: bool = False) -> None:
        super().__init__()
        self.model, self.kind = backbone.model, backbone.config.kind
        self.blocks, self.norm = sorted(blocks), norm
        self.has_prefix = _has_prefix(backbone)

    def forward(self, pixels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out: list[torch.Tensor] = []
        if self.kind == "cnn":                                    # no prefix tokens: ExportedBackbone adds none
            feats = self.model(pixels)
            return tuple(feats[b].float() for b in self.blocks)  # (B, C, h, w) each
        inter = self.model.forward_intermediates(pixels, indices=self.blocks, return_prefix_tokens=self.has_prefix,
                                                 norm=self.norm, stop_early=True, output_fmt="NCHW",
                                                 intermediates_only=True)
        if not self.has_prefix:                                   # plain (B, C, h, w) tensors, no pairs
            return tuple(grid.float() for grid in inter)
        for grid, prefix in inter:
            out += [grid.float(), prefix.float()]                 # (B, C, h, w), (B, P, C)
        return tuple(out)


def _has_prefix(backbone: FrozenBackbone) -> bool:
    """Whether the exported graph has a prefix output per block: ViTs with CLS, register or distillation tokens."""
    return backbone.config.kind == "vit" and backbone.config.num_prefix_tokens > 0


def _require(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise BackboneUnavailable(f"{module} is not installed; install the deployment runtimes with "
                                  "`pip install 'frozenvit[deploy]'`") from e


def check_format(format: str) -> None:
    if format not in FORMATS:
        raise ParameterError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")


def check_runtime(runtime: str, precision: str = DEFAULT_PRECISION) -> None:
    """ParameterError for an unknown runtime, or a precision that `runtime` does not run (`PRECISIONS_OF`)."""
    if runtime not in RUNTIMES:
        raise ParameterError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    if precision not in PRECISIONS_OF[runtime]:
        can = [r for r in RUNTIMES if precision in PRECISIONS_OF[r]]
        raise ParameterError(f"precision {precision!r} is not one {runtime} runs here ({', '.join(PRECISIONS_OF[runtime])})"
                             + (f"; run it with {' or '.join(can)}" if can else ""))


def export_backbone(backbone: FrozenBackbone, out: str | os.PathLike, blocks: int | Iterable[int] | None = None, *,
                    format: str = "onnx", norm: bool = False, int8: bool = False,
                    calibration: Sequence[Any] | None = None, flag: str = "--out",
                    replaces: tuple[str, ...] = ()) -> Path:
    """Write `backbone`'s patch-grid forward of `blocks` (None: the last) at its input size to the folder `out`.

    format "onnx" (torch.onnx's TorchScript exporter, opset 17) or "openvino" (the ONNX graph converted to IR by
    openvino.convert_model). The batch axis is dynamic. Returns the artifact's Path; OutputConflict for an `out`
    that is not ours (nothing written), BackboneUnavailable when the runtime of `format` is not installed.

    int8: onnxruntime's static post-training quantisation (QDQ, int8 weights per channel, uint8 activations)
    calibrated on `calibration` (images, as patch_grids takes them; required). Its cost is measured, never
    assumed: config.json["int8"] records each block's max |int8 - torch| / max |torch| on the calibration images,
    and `load_exported` logs it.

    replaces: other artifact kinds `out` may hold and that this export replaces as a whole (e.g. SET_KIND).
    """
    check_format(format)
    if int8 and not calibration:
        raise ParameterError("int8 quantisation needs calibration images (a few dozen like those it will see)")
    _require("onnx")
    if format == "openvino":
        _require("openvino")
    idx = sorted(backbone.resolve_blocks(blocks))
    graph = PatchGridGraph(backbone, idx, norm).eval()
    pixels = torch.zeros(1, 3, *backbone.config.img_size)                              # (1, 3, H, W)
    parts = ("grid", "prefix") if _has_prefix(backbone) else ("grid",)
    names = [f"{part}_{b}" for b in idx for part in parts]
    cfg = dict(kind=KIND, format_version=FORMAT_VERSION, format=format, blocks=idx, norm=bool(norm), int8=None,
               graph=GRAPH[format], outputs=names, opset=OPSET, torch=torch.__version__,
               source=dict(name=backbone.config.name, fingerprint=weights_fingerprint(backbone)),
               preprocessing=preprocessing(backbone), backbone_config=backbone.config.as_dict())
    with atomic_dir(out, KIND, flag=flag, replaces=replaces) as tmp:
        onnx_file = tmp / GRAPH["onnx"]
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")     # tracer warnings: Python conditions that are constant at a fixed size
            torch.onnx.export(graph, (pixels,), str(onnx_file), dynamo=False, opset_version=OPSET,
                              input_names=["pixels"], output_names=names,
                              dynamic_axes={n: {0: "batch"} for n in ["pixels", *names]})
        if int8:
            cfg["int8"] = _quantize(backbone, onnx_file, idx, calibration, norm)
        if format == "openvino":
            ov = _require("openvino")
            ov.save_model(ov.convert_model(str(onnx_file)), str(tmp / GRAPH["openvino"]), compress_to_fp16=False)
            onnx_file.unlink()
        write_json(tmp / "config.json", cfg)
    return Path(out)


def _quantize(backbone: FrozenBackbone, onnx_file: Path, blocks: list[int], images: Sequence[Any],
              norm: bool) -> dict[str, Any]:
    """Replace `onnx_file` by its int8 quantisation calibrated on `images`; return what it costs in accuracy."""
    q = _require("onnxruntime.quantization")
    pixels = backbone.preprocess(list(images)).pixels                                # (N, 3, H, W)
    feeds = iter([{"pixels": pixels[i:i + 1].numpy()} for i in range(len(pixels))])

    class Reader(q.CalibrationDataReader):
        def get_next(self) -> dict | None:
            return next(feeds, None)

    fp32 = onnx_file.with_name("fp32.onnx")
    onnx_file.rename(fp32)
    # only the products: quantising the shape arithmetic of "same" padding (TF-style ConvNets) breaks its pads
    with _quiet_quantizer():
        q.quantize_static(str(fp32), str(onnx_file), Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                          activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                          op_types_to_quantize=list(QUANTISED_OPS))
    fp32.unlink()
    ref, _ = backbone.forward_pixels(pixels, blocks, norm=norm)
    outs = _onnxruntime_session(onnx_file, torch.get_num_threads())(pixels.numpy())
    got = dict(zip(blocks, outs[::2] if _has_prefix(backbone) else outs))                # the grids, no prefix
    err = {str(b): float(np.abs(got[b] - ref[b].numpy()).max() / max(float(ref[b].abs().max()), 1e-12))
           for b in blocks}
    return dict(method="onnxruntime quantize_static QDQ, per-channel int8 weights, uint8 activations",
                calibration_images=len(pixels), grid_rel_error_on_calibration_images=err)


class _NotPreprocessingAdvice(logging.Filter):
    """Drops onnxruntime's "Please consider (to run) pre-processing before quantization" advice (logged twice on the
    root logger for every graph): its shape-inference pre-processing is not needed for these graphs."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return not (msg.startswith("Please consider") and "pre-processing before quantization" in msg)


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """Silence onnxruntime.quantization's pre-processing advice for the duration (only that message). Its
    `logging.warning` call would also configure the root logger when nothing has: a NullHandler prevents that."""
    root, drop = logging.getLogger(), _NotPreprocessingAdvice()
    null = logging.NullHandler() if not root.handlers else None
    root.addFilter(drop)
    if null is not None:
        root.addHandler(null)
    try:
        yield
    finally:
        root.removeFilter(drop)
        if null is not None:
            root.removeHandler(null)


def _config_from_dict(d: dict[str, Any]) -> BackboneConfig:
    tup = lambda v: tuple(tuple(x) if isinstance(x, list) else x for x in v)
    fields = {k: tup(v) if isinstance(v, list) else v for k, v in d.items()}
    return BackboneConfig(**fields)


class ExportedBackbone:
    """An exported patch-grid graph run by onnxruntime or OpenVINO, with FrozenBackbone's interface:
    `config`, `preprocess`, `resolve_blocks`, `forward_pixels`, `patch_grids`, `weights_sha256` (the source
    weights' fingerprint, so a policy or model checks it like the torch backbone). `runtime` and `precision`
    ("float32", "bfloat16" or "int8") say what runs it. Build with `load_exported`."""

    def __init__(self, config: dict[str, Any], session: Any, runtime: str, path: Path,
                 precision: str = DEFAULT_PRECISION) -> None:
        self.export_config, self.runtime, self.path, self.precision = config, runtime, path, precision
        self.config = _config_from_dict(config["backbone_config"])
        self.preprocess = Preprocess(self.config, resize=config["preprocessing"]["resize"])
        self.blocks: list[int] = list(config["blocks"])
        self._run = session

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def weights_sha256(self) -> str:
        return self.export_config["source"]["fingerprint"]

    def __repr__(self) -> str:
        return (f"ExportedBackbone({self.config.name!r}, {self.runtime}, {self.precision}, blocks={self.blocks}, "
                f"size={self.config.img_size})")

    resolve_blocks = FrozenBackbone.resolve_blocks          # the same block rules and the same batching loop
    patch_grids = FrozenBackbone.patch_grids

    def forward_pixels(self, pixels: torch.Tensor, blocks: Sequence[int], norm: bool = False
                       ) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
        """Normalised (B, 3, H, W) -> ({block: (B, C, h, w)}, {block: (B, P, C)}), as FrozenBackbone's."""
        if tuple(pixels.shape[-2:]) != tuple(self.config.img_size):
            raise GridMismatch(f"pixels are {pixels.shape[-2]}x{pixels.shape[-1]}, the graph is exported at "
                               f"{self.config.img_size[0]}x{self.config.img_size[1]}; export it at that size")
        want = self.resolve_blocks(list(blocks))
        missing = sorted(set(want) - set(self.blocks))
        if missing or bool(norm) != self.export_config["norm"]:
            raise ArtifactError(f"{self.path} holds blocks {self.blocks} (norm={self.export_config['norm']}), not "
                                f"blocks {want} (norm={bool(norm)}); export those blocks")
        outs = self._run(np.ascontiguousarray(pixels.detach().cpu().numpy(), dtype=np.float32))
        named = dict(zip(self.export_config["outputs"], outs))
        grids, prefix = {}, {}
        for b in want:
            grids[b] = torch.from_numpy(np.asarray(named[f"grid_{b}"]))                          # (B, C, h, w)
            pre = named.get(f"prefix_{b}")
            prefix[b] = (torch.from_numpy(np.asarray(pre)) if pre is not None                   # (B, P, C)
                         else grids[b].new_zeros(grids[b].shape[0], 0, grids[b].shape[1]))
        return grids, prefix


def _onnxruntime_session(graph: Path, threads: int, precision: str = DEFAULT_PRECISION) -> Any:
    """An onnxruntime CPU session on `threads` threads; an int8 graph runs its quantised products in int8."""
    ort = _require("onnxruntime")
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # its threads otherwise spin after each run, taking the cores from torch's preprocessing and the policy head
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(graph), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return lambda x: sess.run(None, {name: x})


def _openvino_session(graph: Path, threads: int, precision: str = DEFAULT_PRECISION) -> Any:
    """A compiled OpenVINO CPU model on `threads` threads, one synchronous request (latency hint, one stream). Its
    floating-point arithmetic is forced: f32 (the plugin would otherwise pick bf16 on an AMX CPU) unless
    `precision` is "bfloat16"; an int8 graph's quantised products run in int8 either way."""
    ov = _require("openvino")
    core = ov.Core()
    if precision == "bfloat16" and "BF16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        raise BackboneUnavailable("this CPU has no native bfloat16 arithmetic (AMX or AVX512-BF16): OpenVINO would "
                                  "run the graph in float32; use precision float32")
    compiled = core.compile_model(core.read_model(str(graph)), "CPU",
                                  {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
                                   "INFERENCE_PRECISION_HINT": "bf16" if precision == "bfloat16" else "f32"})
    request = compiled.create_infer_request()

    def run(x: np.ndarray) -> list[np.ndarray]:
        res = request.infer({0: x})
        return [res[o].copy() for o in compiled.outputs]          # the request reuses its buffers
    return run


def load_exported(path: str | os.PathLike, runtime: str | None = None, *, source: Any = None,
                  threads: int | None = None, precision: str | None = None,
                  label: str | None = None) -> ExportedBackbone:
    """An exported backbone run by `runtime` (None: onnxruntime for ONNX, openvino for IR; OpenVINO also runs
    ONNX) on `threads` threads (None: torch's current setting).

    precision: None, the export's own ("int8" for an int8 export, else "float32"); "bfloat16" runs a float export
    in bfloat16 (OpenVINO only; BackboneUnavailable on a CPU without native bfloat16). ArtifactError when it asks
    an int8 export for float arithmetic or a float export for int8 (export it with int8). Reduced precision is
    logged as a warning every time (int8 with its recorded error).

    source: the backbone the caller expects (a FrozenBackbone, or a dict with "fingerprint" and
    "preprocessing"); ArtifactError when the export was made from other weights or other preprocessing.
    ArtifactError for a folder that is not an intact export; BackboneUnavailable when the runtime is missing. The
    folder of an export of one graph per member (`frozenvit export anomaly` of an ensemble) is not one: ArtifactError
    naming its member folders; a member folder of such an export loads only when the export's marker lists that
    very member (one complete export, never members of two).

    label: what the reduced-precision warning calls the graph (None: its backbone's name and folder).
    """
    path = Path(path)
    _refuse_a_set(path)
    cfg = read_config(path, KIND, FORMAT_VERSION)
    check_set_member(path)
    runtime = runtime or RUNTIME_OF[cfg["format"]]
    own = "int8" if cfg.get("int8") else DEFAULT_PRECISION
    precision = precision or own
    check_runtime(runtime, precision)
    if runtime == "torch" or (runtime == "onnxruntime" and cfg["format"] != "onnx"):
        raise ArtifactError(f"{path} is an {cfg['format']} export; run it with "
                            f"{'openvino' if cfg['format'] == 'openvino' else 'onnxruntime or openvino'}")
    if (precision == "int8") != (own == "int8"):
        raise ArtifactError(f"{path} holds a {own} graph, not one to run in {precision}; "
                            + ("export it again without int8" if own == "int8" else "export it with int8"))
    if source is not None:
        check_source(cfg, source, path)
    label = label or f"{cfg['source']['name']} ({path})"
    if cfg.get("int8"):
        log.warning("%s is int8-quantised: its patch grids differ from torch's by up to %.1e relative (max over blocks, "
                    "on %d calibration images)", label, max(cfg["int8"]["grid_rel_error_on_calibration_images"].values()),
                    cfg["int8"]["calibration_images"])
    elif precision == "bfloat16":
        log.warning("%s runs in bfloat16: its patch grids differ from torch's float32 ones (about 1e-2 "
                    "relative); measure your metric against float32", label)
    threads = threads or torch.get_num_threads()
    make = _onnxruntime_session if runtime == "onnxruntime" else _openvino_session
    return ExportedBackbone(cfg, make(path / cfg["graph"], threads, precision), runtime, path, precision)


def load_export_members(path: str | os.PathLike, threads: int | None = None) -> list[ExportedBackbone]:
    """Every graph of a `frozenvit export anomaly` folder, in member order: [the one graph] of a single model's
    export, or member0, member1, ... of an ensemble's (as its members.json lists them), each run by the runtime of
    its format in its own precision. ArtifactError for a folder that is neither (or not intact)."""
    path = Path(path)
    recover(path)
    if (path / "config.json").exists():
        return [load_exported(path, threads=threads)]
    if (read_marker(path) or {}).get("kind") != SET_KIND:
        raise ArtifactError(f"{path} is not an export of `frozenvit export anomaly` (no config.json, no {SET_FILE}); "
                            "export the model: frozenvit export anomaly --model MODEL --out DIR")
    try:
        members = [m["folder"] for m in json.loads((path / SET_FILE).read_text())["members"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ArtifactError(f"{path}/{SET_FILE} cannot be read ({type(e).__name__}: {e}); export the model "
                            f"again: frozenvit export anomaly --model MODEL --out {path}") from e
    return [load_exported(path / m, threads=threads, label=f"member {i} ({path / m})") for i, m in enumerate(members)]


def _refuse_a_set(path: Path) -> None:
    """ArtifactError for the folder of an export of one graph per member, saying which folders to load."""
    recover(path)
    if (path / "config.json").exists() or not path.is_dir():
        return
    if (read_marker(path) or {}).get("kind") != SET_KIND and not (path / SET_FILE).is_file():
        return
    members = sorted((d.name for d in path.iterdir() if d.is_dir() and d.name.startswith("member")),
                     key=lambda n: (len(n), n))
    raise ArtifactError(f"{path} holds one export per member of an ensemble ({', '.join(members) or 'none'}), not one "
                        f"graph: load {path}/member<i> (e.g. load_exported('{path}/member0')), or the whole model with "
                        f"load_detector(model, backbones=[load_exported(f'{path}/member{{i}}') for i in "
                        f"range({len(members) or 'n'})])")


def check_set_member(path: str | os.PathLike) -> None:
    """ArtifactError when `path` is a member folder of an export of one graph per member (its parent's marker is
    SET_KIND) and that export's marker does not list this member as written with the others: an export that was
    interrupted, or members of two exports (an older frozenvit wrote each member on its own)."""
    path = Path(path)
    parent = path.parent
    recover(parent)
    marker = read_marker(parent)
    if (marker or {}).get("kind") != SET_KIND:
        return
    listed = marker.get("files") if isinstance(marker.get("files"), dict) else {}
    own = (read_marker(path) or {}).get("files")
    problem = None
    try:
        if not (parent / SET_FILE).is_file() or SET_FILE not in listed:
            raise ArtifactError(f"{parent} is not one complete export of all members: its {MARKER} lists no members "
                                f"(no {SET_FILE}). It was interrupted, or written by an older frozenvit one member at "
                                f"a time, so its members may come from different exports; export the model again: "
                                f"frozenvit export anomaly --model MODEL --out {parent}")
        members = [m["folder"] for m in json.loads((parent / SET_FILE).read_text())["members"]]
        if listed.get(SET_FILE) != sha256_file(parent / SET_FILE):
            problem = f"its {SET_FILE} is not the one its {MARKER} lists"
        elif path.name not in members:
            problem = f"its {SET_FILE} lists {', '.join(members)}, not {path.name}"
        elif not isinstance(own, dict) or listed.get(f"{path.name}/{MARKER}") != sha256_file(path / MARKER) or any(
                listed.get(f"{path.name}/{f}") != d for f, d in own.items()):
            problem = f"its {MARKER} does not list {path.name} as it is now"
        elif any(not (parent / m / "config.json").is_file() for m in members):
            problem = f"member folders it lists are missing ({', '.join(m for m in members if not (parent / m).is_dir())})"
    except (OSError, ValueError, KeyError, TypeError) as e:
        problem = f"it has no readable {SET_FILE} listing its members ({type(e).__name__}: {e})"
    if problem:
        raise ArtifactError(f"{parent} is not one complete export of all members: {problem}. It was interrupted, "
                            "mixes members of two exports, or was written by an older frozenvit (one member at a "
                            f"time); export the model again: frozenvit export anomaly --model MODEL --out {parent}")


def check_source(cfg: dict[str, Any], source: Any, path: Path | str = "the export") -> None:
    """ArtifactError unless the export `cfg` was made from `source`'s weights with its preprocessing."""
    if isinstance(source, dict):
        fingerprint, prep = source["fingerprint"], source["preprocessing"]
    else:
        fingerprint, prep = weights_fingerprint(source), preprocessing(source)
    if cfg["source"]["fingerprint"] != fingerprint:
        raise ArtifactError(f"{path} was exported from {cfg['source']['name']} weights "
                            f"{cfg['source']['fingerprint'][:12]}, not the weights given ({fingerprint[:12]}); "
                            "export this backbone again")
    differ = [k for k in PREPROCESSING if cfg["preprocessing"].get(k) != prep.get(k)]
    if differ:
        raise ArtifactError(f"{path} was exported with other preprocessing ({', '.join(differ)}: "
                            f"{[cfg['preprocessing'].get(k) for k in differ]} vs {[prep.get(k) for k in differ]}); "
                            "export this backbone again at the size and resize policy you use")


def compare_grids(backbone: Any, other: Any, images: Sequence[Any], blocks: int | Iterable[int] | None = None,
                  batch_size: int = 8) -> dict[str, Any]:
    """Parity and speed of `other` (e.g. an ExportedBackbone) against `backbone` on the same images: per block,
    max |difference| / max |torch value| of the grids (and prefix tokens), and each one's seconds for the images
    (a second pass, after one that warms both up)."""
    import time

    idx = backbone.resolve_blocks(blocks)
    secs, grids = {}, {}
    for name, bb in (("torch", backbone), ("runtime", other)):
        bb.patch_grids(images[:batch_size], blocks=idx, batch_size=batch_size, progress=False)     # warm-up
        t0 = time.perf_counter()
        grids[name] = bb.patch_grids(images, blocks=idx, batch_size=batch_size, progress=False)
        secs[name] = time.perf_counter() - t0
    ref, got = grids["torch"], grids["runtime"]
    rel = lambda a, b: float((a - b).abs().max() / b.abs().max().clamp_min(1e-12)) if b.numel() else 0.0
    return dict(runtime=getattr(other, "runtime", "torch"), images=len(images), blocks=idx,
                grid_rel_diff={b: rel(got[b], ref[b]) for b in idx},
                prefix_rel_diff={b: rel(got.prefix[b], ref.prefix[b]) for b in idx},
                seconds=dict(torch=secs["torch"], runtime=secs["runtime"]),
                speedup=secs["torch"] / max(secs["runtime"], 1e-9))


def use_runtime(model: Any, runtime: str, threads: int | None = None, *,
                precision: str | Sequence[str] = DEFAULT_PRECISION, calibration: Sequence[Any] | None = None) -> Any:
    """A fitted estimator that reads patch grids (`backbone_` and `blocks_`, or `members_` of such, e.g. PatchCore
    and PatchCoreEnsemble) made to read them through `runtime` in `precision` (`runtime_backbone`); everything
    after the grids (memory bank, search, scoring, smoothing, threshold) is unchanged. Returns `model`, changed in
    place.

    precision: one for every member (a name, or a sequence of one), or a sequence of one per member in `members_`
    order (ParameterError for another count), e.g. ("float32", "bfloat16"): a member whose metric bfloat16 moves stays float32. "int8" is
    calibrated on `calibration` images as each member sees them: one with a `feature_extractor()` (PatchCore)
    on its inputs of those images (its tiles, when it tiles: `calibration_inputs`, as `frozenvit export` uses).

    A model with a `threshold_` (PatchCore, PatchCoreEnsemble) that now reads any member's grids from an int8 graph
    has its decisions withheld (`withhold_int8_decisions`: a warning, threshold None, is_defect None) unless its
    `threshold` is set explicitly."""
    members = getattr(model, "members_", None) or [model]
    precisions = [precision] if isinstance(precision, str) else list(precision)
    precisions = precisions * len(members) if len(precisions) == 1 else precisions
    if len(precisions) != len(members):
        raise ParameterError(f"{len(precisions)} precisions ({', '.join(precisions)}) for {len(members)} members: give "
                             f"one, or one per member")
    for p in precisions:
        check_runtime(runtime, p)
    for i, (m, p) in enumerate(zip(members, precisions)):
        inputs = calibration_inputs(m, calibration) if p == "int8" else None
        name = getattr(m.backbone_, "name", None) or m.backbone_.config.name
        label = f"member {i} ({name})" if len(members) > 1 else name
        m.backbone_ = runtime_backbone(m.backbone_, runtime, m.blocks_, threads=threads, precision=p,
                                       calibration=inputs, label=label)
    withhold_int8_decisions(model)
    return model


def calibration_inputs(member: Any, images: Sequence[Any] | None) -> list | None:
    """What an int8 graph of `member`'s backbone is calibrated on, given the `images`: for an estimator with a
    `feature_extractor()` (PatchCore), its own inputs of those images (its tiles, when it tiles), as its backbone sees
    them at predict time; the images themselves otherwise (None: None). `use_runtime` and `frozenvit export --int8`
    both calibrate on it."""
    if images is None or member is None or not hasattr(member, "feature_extractor"):
        return None if images is None else list(images)
    return [v for _, _, v, _ in member.feature_extractor().views(list(images))]


class DecisionsWithheld(UserWarning):
    """A detector that reads its patch grids from an int8 graph decides nothing at its float32 threshold."""


#: why a detector running an int8 graph makes no decisions at its stored threshold
INT8_NO_DECISIONS = ("the model's threshold and operating points were calibrated on float32 scores of its held-out "
                     "normals, and the int8 graph moves every score, so they do not hold for int8 scores")
#: how a withheld threshold is written where a threshold is shown (scores.csv)
INT8_WITHHELD = "withheld (int8)"


def int8_members(model: Any) -> list[int]:
    """Indices of the members (`members_`, or the model itself: [0]) whose backbone runs an int8 graph."""
    members = getattr(model, "members_", None) or [model]
    return [i for i, m in enumerate(members) if getattr(getattr(m, "backbone_", None), "precision", None) == "int8"]


def decisions_withheld(model: Any) -> bool:
    """Whether `withhold_int8_decisions` withheld `model`'s calibrated threshold (and no threshold is set since)."""
    return getattr(model, "threshold_withheld_", None) is not None and getattr(model, "threshold", None) is None


def refuse_on_int8(model: Any, what: str) -> None:
    """ParameterError when any member of `model` reads its patch grids from an int8 graph: `what` (threshold_at,
    partial_fit) would mix the float32 scores the model stores with int8 ones, or put int8 features into its bank."""
    int8 = int8_members(model)
    if int8:
        members = getattr(model, "members_", None)
        which = f"member{'s' if len(int8) > 1 else ''} {', '.join(map(str, int8))}" if members else "its backbone"
        raise ParameterError(f"{type(model).__name__}.{what} while {which} reads patch grids from an int8 graph: "
                             f"{INT8_NO_DECISIONS}, and {what} works on those stored float32 scores. "
                             + ("Add normals to the float32 model (load it without the int8 backbones), save it, then "
                                "run or export it in int8 again" if what == "partial_fit" else
                                "Calibrate a threshold on int8 scores of normal images the model never saw: "
                                "det.calibrate(normals, target_fpr=...) (frozenvit anomaly calibrate), or "
                                "det.set_params(threshold=T); or run the backbones in float32"))


def withhold_int8_decisions(model: Any) -> bool:
    """The one rule for the decisions of a fitted detector (a `threshold_` calibrated on float32 scores, and an
    optional explicit `threshold`) whose patch grids now come from an int8 graph: `use_runtime`, `load_detector(...,
    backbones=)`, `PatchCore.load(..., backbone=)` and the CLI (--precision int8) all apply it.

    When any member runs an int8 graph and no `threshold` is set, the calibrated threshold is withheld:
    `threshold_` becomes None (so `decision_threshold()` is None and predictions carry `is_defect` None), the
    float32 value is kept in `threshold_withheld_` (saving the model writes it back) and a DecisionsWithheld warning
    says why and how to decide. A threshold set explicitly (`set_params(threshold=T)`, chosen on int8 scores of known
    normals) decides as always. Recalibrating would need held-out normals, which a saved model does not store.
    Applied again, it warns no more; with no int8 member left, the withheld threshold is restored. Returns whether
    the decisions are withheld."""
    if not hasattr(model, "threshold_"):
        return False
    members = [m for m in getattr(model, "members_", None) or [] if m is not model]
    int8 = int8_members(model)
    if not int8:
        for m in (model, *members):
            if getattr(m, "threshold_withheld_", None) is not None:
                m.threshold_, m.threshold_withheld_ = m.threshold_withheld_, None
        return False
    if getattr(model, "threshold_withheld_", None) is not None:
        return decisions_withheld(model)
    for m in members:                             # an ensemble decides on its own threshold; its members alike
        if getattr(m, "threshold_", None) is not None and getattr(m, "threshold", None) is None:
            m.threshold_withheld_, m.threshold_ = m.threshold_, None
    if model.threshold_ is None or getattr(model, "threshold", None) is not None:
        return False                              # uncalibrated (nothing to withhold), or decided at a given threshold
    model.threshold_withheld_, model.threshold_ = model.threshold_, None
    which = (f"member{'s' if len(int8) > 1 else ''} {', '.join(map(str, int8))} of {len(members)}" if members
             else "its backbone")
    warnings.warn(f"{type(model).__name__} reads its patch grids from an int8 graph ({which}): its decisions are "
                  f"withheld (decision_threshold() None, is_defect None); scores and maps are given. Why: "
                  f"{INT8_NO_DECISIONS} (the float32 threshold withheld: {model.threshold_withheld_:.6g}), and a model "
                  "stores no normals to recalibrate on. To decide, calibrate a threshold on int8 scores of normal "
                  "images it never saw with det.calibrate(normals, target_fpr=...), or set one: det.set_params(threshold=T) "
                  "(on the command line frozenvit anomaly calibrate, then --threshold T); or run the backbones in "
                  "float32",
                  DecisionsWithheld, stacklevel=3)
    return True


def runtime_backbone(backbone: FrozenBackbone, runtime: str = DEFAULT_RUNTIME,
                     blocks: int | Iterable[int] | None = None, *, norm: bool = False,
                     threads: int | None = None, precision: str = DEFAULT_PRECISION,
                     calibration: Sequence[Any] | None = None, label: str | None = None) -> Any:
    """`backbone` itself for runtime "torch"; else an export of it (`blocks`, at its input size) run by
    `runtime` in `precision` (int8: quantised on export, calibrated on `calibration` images, required), written
    to a temporary folder that is removed once the runtime has loaded the graph. ParameterError for a precision
    the runtime does not run (`runtimes.PRECISIONS_OF`: torch float32 only, onnxruntime no bfloat16). `label`:
    what the reduced-precision warning calls it (None: the backbone's name; never the temporary folder)."""
    check_runtime(runtime, precision)
    if runtime == "torch":
        return backbone
    with tempfile.TemporaryDirectory(prefix="frozenvit-export-") as tmp:
        path = export_backbone(backbone, Path(tmp) / "graph", blocks, format=FORMAT_OF[runtime], norm=norm,
                               int8=precision == "int8", calibration=calibration)
        return load_exported(path, runtime, source=backbone, threads=threads, precision=precision,
                             label=f"{label or backbone.config.name} (exported for this run)")
