"""Scoring many image files with a fitted PatchCore, a batch at a time, here or on Ray.

`iter_scored(det, files)` yields one `Scored` per file, in file order, and holds one batch of
full-size maps at a time, whatever the number of files: at most BATCH images and, locally, at most BATCH_PIXELS
original pixels (`batch_bounds`: a batch of large camera frames holds fewer images; an image past the limit goes
alone). With `engine="ray"` the files stream
through Ray Data: read -> `map_batches` on a pool of single-thread actors, each loading the frozen
backbone and the memory bank once (from the saved model directory) -> back to this process, which
writes as results arrive. Fitting stays in one process (the coreset is a global step).
"""
from __future__ import annotations

import io
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

BATCH = 64   # images per predict call: bounds the memory held by full-size maps
BATCH_PIXELS = 64 * 512 * 512   # original pixels per predict call: 64 images of 512 x 512, fewer larger ones
# zlib level of overlay PNGs: 1 encodes a 512x512 overlay in ~30 ms instead of ~115 ms at PIL's default 6, for
# files ~15 % larger; at 6 the encoding took longer than scoring the image (MPDD, 1 thread)
OVERLAY_PNG_LEVEL = 1


@dataclass
class Scored:
    path: str
    score: float
    is_defect: bool | None        # None: the model has no threshold (uncalibrated, no --threshold)
    overlay_png: bytes | None     # the defect map over the image, PNG (None when not asked for)


def batch_bounds(sizes: Sequence[tuple[int, int]], max_images: int = BATCH,
                 max_pixels: int = BATCH_PIXELS) -> list[tuple[int, int]]:
    """[(start, stop)] of consecutive batches of images of `sizes` [(H, W)], each of at most `max_images` images
    and `max_pixels` pixels in all, but an image larger than that, which is a batch of its own."""
    out: list[tuple[int, int]] = []
    start, pixels = 0, 0
    for i, (h, w) in enumerate(sizes):
        if i > start and (i - start >= max_images or pixels + h * w > max_pixels):
            out.append((start, i))
            start, pixels = i, 0
        pixels += h * w
    if start < len(sizes):
        out.append((start, len(sizes)))
    return out


def score_batch(det: Any, paths: Sequence[str], overlays: bool) -> list[Scored]:
    """Scores, decisions and (optionally) overlay PNGs of one batch of image files."""
    from PIL import Image

    from .features import named_images
    from .images import read_image
    from .viz import overlay

    images = [read_image(p) for p in paths]
    with named_images([str(p) for p in paths]):                     # warnings name the file, not its batch place
        pred = det.predict(images)
    decisions = [None] * len(paths) if pred.is_defect is None else [bool(d) for d in pred.is_defect]
    out = []
    for p, img, amap, s, d in zip(paths, images, pred.maps, pred.scores, decisions):
        png = None
        if overlays:
            buf = io.BytesIO()
            Image.fromarray(overlay(img, amap, *det.map_range_)).save(buf, format="PNG", compress_level=OVERLAY_PNG_LEVEL)
            png = buf.getvalue()
        out.append(Scored(str(p), float(s), d, png))
    return out


def iter_scored(det: Any, files: Sequence[str | Path], *, overlays: bool = True, batch_size: int = BATCH,
                engine: str = "local", workers: int | None = None, model_dir: str | Path | None = None,
                worker_threads: int = 1, batch_pixels: int = BATCH_PIXELS) -> Iterator[Scored]:
    """One `Scored` per file, in the order of `files`.

    engine "local": batches of at most `batch_size` files and `batch_pixels` pixels (`batch_bounds`, on the sizes
    their headers give), one progress bar over all the files ("predict", as `det.progress`: None, only where someone
    sees it), in place of the per-batch, per-member bars of `det.predict`.
    engine "ray": `workers` actors (None: one per CPU of the cluster), each with torch and faiss at
    `worker_threads` threads, load the bank from `model_dir` (None: `det` is saved to a temporary
    directory first), take `det`'s parameters (an overridden threshold too) and get its backbones (an ensemble's,
    one per member) through the object store; Ray retries the batches of an actor that dies.
    """
    from frozenvit.backbone.suite.engine import check_engine

    check_engine(engine)
    paths = [str(f) for f in files]
    if engine == "local":
        from frozenvit.backbone.suite.progress import progress_bar

        from .images import image_size

        shown = getattr(det, "progress", None)
        bounds = batch_bounds([image_size(p) for p in paths], batch_size, batch_pixels)
        with progress_bar(total=len(paths), desc="predict", unit="image",
                          disable=None if shown is None else not shown) as bar:
            for start, stop in bounds:
                with inner_bars_off(det):
                    got = score_batch(det, paths[start:stop], overlays)
                bar.update(len(got))
                yield from got
        return
    if model_dir is None:
        with tempfile.TemporaryDirectory(prefix="frozenvit-patchcore-") as tmp:
            det.save(Path(tmp) / "model")
            yield from iter_scored(det, paths, overlays=overlays, batch_size=batch_size, engine=engine,
                                   workers=workers, model_dir=Path(tmp) / "model", worker_threads=worker_threads)
        return
    # e.g. a --threshold; the backbones (an ensemble's, one per member) travel through the object store, so that
    # workers never rebuild them from the weights paths the artifact records (a file moved since: --weights)
    params = {k: v for k, v in det.get_params(deep=False).items() if k not in ("backbone", "members")}
    members = getattr(det, "members_", None)
    backbones = [m.backbone_ for m in members] if members else [getattr(det, "backbone_", None)]
    yield from _ray_scored(paths, Path(model_dir).resolve(), backbones, params, overlays,
                           batch_size, workers, worker_threads)


@contextmanager
def inner_bars_off(det: Any) -> Iterator[None]:
    """`det.predict` (a PatchCore, or an ensemble's members) without its own progress bars, restored after."""
    models = [m for m in (det, *getattr(det, "members_", [])) if hasattr(m, "progress")]
    before = [m.progress for m in models]
    for m in models:
        m.progress = False
    try:
        yield
    finally:
        for m, p in zip(models, before):
            m.progress = p


class _ScoringActor:
    """A Ray Data actor: the model loaded once, then batches of paths -> scores and overlays."""

    def __init__(self, model_dir: str, backbone_ref: Any, params: dict, overlays: bool, threads: int) -> None:
        import faiss
        import ray
        import torch

        from .ensemble import load_detector

        torch.set_num_threads(threads)
        faiss.omp_set_num_threads(threads)
        backbones = ray.get(backbone_ref[0])           # one per member (a PatchCore: one)
        det = load_detector(model_dir, backbones=None if any(b is None for b in backbones) else backbones)
        self.det = det.set_params(**params)
        self.overlays = overlays

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        got = score_batch(self.det, [str(p) for p in batch["path"]], self.overlays)
        return {"i": batch["i"], "path": batch["path"], "score": np.array([g.score for g in got]),
                "is_defect": np.array([-1 if g.is_defect is None else int(g.is_defect) for g in got]),
                "overlay_png": np.array([g.overlay_png or b"" for g in got], dtype=object)}


def _ray_scored(paths: list[str], model_dir: Path, backbones: list, params: dict, overlays: bool, batch_size: int,
                workers: int | None, threads: int) -> Iterator[Scored]:
    from frozenvit.backbone.suite.engine import cluster_cpus, ray_session

    with ray_session(num_cpus=workers) as ray:
        n = max(1, min(workers or cluster_cpus(ray), len(paths)))
        per_call = max(1, min(batch_size, -(-len(paths) // (n * 4))))   # >= 4 batches per actor: balanced ends
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ds = ray.data.from_items([{"i": i, "path": p} for i, p in enumerate(paths)])
        bb_ref = [ray.put(backbones)]                               # in a list: handed over as a reference
        ds = ds.map_batches(_ScoringActor, fn_constructor_kwargs=dict(model_dir=str(model_dir), backbone_ref=bb_ref,
                                                                   params=params, overlays=overlays, threads=threads),
                            batch_size=per_call, concurrency=n, num_cpus=threads, batch_format="numpy")
        for b in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for i, p, s, d, png in zip(b["i"], b["path"], b["score"], b["is_defect"], b["overlay_png"]):
                yield Scored(str(p), float(s), None if d < 0 else bool(d), bytes(png) if png else None)
