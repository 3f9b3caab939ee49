"""Images for distillation: a decoded uint8 cache of a folder, and the on-the-fly augmentation."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from frozenvit.backbone.suite.progress import progress_bar

from frozenvit.backbone.errors import ImageFormatError
from frozenvit.backbone.suite.artifacts import write_json
from frozenvit.backbone.suite.errors import UsageError

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".JPEG"}
# (dataset folder, split) pairs that are some benchmark's test set: distilling on them would leak it.
HELD_OUT_SPLITS = (("imagenette", "val"),)   # the Imagenette linear probe scores on val


class HeldOutSplitError(UsageError):
    """Training images include a split that a benchmark tests on (Imagenette val: the linear probe's test set)."""


# ----------------------------------------------------------------------------- data
def check_not_held_out(path: str | Path) -> None:
    """Raise HeldOutSplitError when path lies in (or is) a held-out split such as imagenette/val."""
    parts = [q.lower() for q in Path(path).resolve().parts]
    for ds, split in HELD_OUT_SPLITS:
        if any(a == ds and b == split for a, b in zip(parts, parts[1:])):
            raise HeldOutSplitError(
                f"{path} is in {ds}/{split}, the test set of a benchmark (the Imagenette linear probe): "
                f"never train on it; use {ds}/train (and --extra-data for more images)")


def list_images(root: str | Path) -> list[Path]:
    """Image files under root (recursively), sorted, so the index is reproducible.

    Raises UsageError when there are none, HeldOutSplitError when any lies in a held-out split
    (e.g. --data imagenette/ would take val/ along with train/).
    """
    check_not_held_out(root)
    files = sorted(p for p in Path(root).rglob("*") if p.suffix in IMAGE_EXTS or p.suffix.lower() in IMAGE_EXTS)
    if not files:
        raise UsageError(f"no images under {root}: point --data at a folder of JPEG/PNG files")
    for sub in {f.parent for f in files}:
        check_not_held_out(sub)
    return files


def check_images(files: Sequence[Path]) -> None:
    """Raise ImageFormatError naming the first file whose header Pillow cannot read (checked before any work)."""
    from PIL import Image

    for f in files:
        try:
            with Image.open(f):
                pass
        except Exception as e:   # Pillow's plugins raise many types on malformed files
            raise ImageFormatError(f"cannot read image {f} ({type(e).__name__}: {e}); replace or remove the file") from e


def build_cache(root: str | Path | Sequence[str | Path], cache_dir: str | Path, size: int,
                progress: bool | None = None, workers: int = 1) -> np.ndarray:
    """Decode every image under root (one folder or several, in order) once, resize (shorter side,
    centre crop) to size x size RGB.

    Returns a read-only uint8 memmap (N, size, size, 3) stored in cache_dir (reused when the file
    list, each file's size and modification time, and the size match; decoded again otherwise, a
    truncated or damaged cache included). cache_dir should be git-ignored scratch space (e.g. runs/). workers: decoding
    threads (each image lands in its own row, so the cache does not depend on it).
    """
    from PIL import Image

    roots = [Path(root)] if isinstance(root, (str, Path)) else [Path(r) for r in root]
    listed = [(i, r, f) for i, r in enumerate(roots) for f in list_images(r)]
    files = [f for _, _, f in listed]
    cache_dir = Path(cache_dir)
    if len(roots) == 1:
        meta = {"root": str(roots[0].resolve()), "size": size, "n": len(files),
                "files": [str(f.relative_to(roots[0])) for f in files]}
    else:
        meta = {"roots": [str(r.resolve()) for r in roots], "size": size, "n": len(files),
                "files": [f"{i}/{f.relative_to(r)}" for i, r, f in listed]}
    # each file's size and modification time: an image replaced under the same name is decoded again
    meta["stamps"] = [[st.st_size, st.st_mtime_ns] for st in (f.stat() for f in files)]
    data_path, meta_path = cache_dir / f"images_{size}.u8", cache_dir / f"images_{size}.json"
    nbytes = len(files) * size * size * 3
    if meta_path.is_file() and data_path.is_file() and data_path.stat().st_size == nbytes:
        try:
            same = json.loads(meta_path.read_text()) == meta
        except (OSError, ValueError):   # a damaged record: the cache is decoded again
            same = False
        if same:
            return np.memmap(data_path, dtype=np.uint8, mode="r", shape=(len(files), size, size, 3))
    cache_dir.mkdir(parents=True, exist_ok=True)
    meta_path.unlink(missing_ok=True)   # no record may vouch for the pixels while they are replaced
    tmp = data_path.with_suffix(".tmp")
    arr = np.memmap(tmp, dtype=np.uint8, mode="w+", shape=(len(files), size, size, 3))

    def decode(i: int) -> None:
        try:
            with Image.open(files[i]) as im:
                im = im.convert("RGB")
                w, h = im.size
                s = size / min(w, h)
                im = im.resize((max(size, round(w * s)), max(size, round(h * s))), Image.BICUBIC)
                l, t = (im.size[0] - size) // 2, (im.size[1] - size) // 2
                arr[i] = np.asarray(im.crop((l, t, l + size, t + size)))
        except Exception as e:   # Pillow's plugins raise many types on malformed files
            raise ImageFormatError(f"cannot read image {files[i]} ({type(e).__name__}: {e}); replace or remove "
                                   "the file") from e

    bar = progress_bar(total=len(files), desc=f"decode {size}px", disable=None if progress is None else not progress)
    try:
        if workers > 1:   # PIL decodes and resizes without the GIL: threads scale on a many-core machine
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=workers) as pool:
                for _ in pool.map(decode, range(len(files))):
                    bar.update(1)
        else:
            for i in range(len(files)):
                decode(i)
                bar.update(1)
        arr.flush()
    except BaseException:
        del arr
        tmp.unlink(missing_ok=True)              # a half-decoded cache is never left behind
        raise
    finally:
        bar.close()
    del arr
    tmp.replace(data_path)
    write_json(meta_path, meta)
    return np.memmap(data_path, dtype=np.uint8, mode="r", shape=(len(files), size, size, 3))


@dataclass(frozen=True)
class AugmentConfig:
    scale: tuple[float, float] = (0.35, 1.0)    # area fraction of the random resized crop
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    jitter: float = 0.3                          # brightness/contrast/saturation strength
    mix_prob: float = 0.2                        # probability a batch is mixup'ed or cutmix'ed (50/50)


def augment(u8: torch.Tensor, out_size: int, cfg: AugmentConfig, g: torch.Generator) -> torch.Tensor:
    """Batched augmentation. u8: (B, S, S, 3) uint8 -> (B, 3, out, out) float in [0, 1], on u8's device.

    A pure function of (u8, g): g is a CPU generator whatever the device.
    """
    x = u8.permute(0, 3, 1, 2).float().div_(255)  # (B, 3, S, S), on u8's device
    B = x.shape[0]
    u = lambda *s: torch.rand(*s, generator=g)  # noqa: E731  (CPU draws: the same numbers on any device)
    area = cfg.scale[0] + (cfg.scale[1] - cfg.scale[0]) * u(B)
    logr = math.log(cfg.ratio[0]) + (math.log(cfg.ratio[1]) - math.log(cfg.ratio[0])) * u(B)
    w = (area * logr.exp()).sqrt().clamp(max=1.0)  # crop width as a fraction of the side
    h = (area / logr.exp()).sqrt().clamp(max=1.0)
    cx, cy = (2 * u(B) - 1) * (1 - w), (2 * u(B) - 1) * (1 - h)
    sx = torch.where(u(B) < 0.5, -w, w) if cfg.flip else w
    theta = torch.zeros(B, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = sx, cx, h, cy
    grid = F.affine_grid(theta.to(x.device), [B, 3, out_size, out_size], align_corners=False)
    x = F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)  # (B,3,o,o)
    if cfg.jitter > 0:
        j = lambda: (1 + cfg.jitter * (2 * u(B, 1, 1, 1) - 1)).to(x.device)  # noqa: E731
        x = x * j()  # brightness
        grey = (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1)  # (B, 1, o, o)
        x = (x - grey.mean((2, 3), keepdim=True)) * j() + grey.mean((2, 3), keepdim=True)  # contrast
        x = (x - grey) * j() + grey  # saturation
        x = x.clamp_(0, 1)
    if cfg.mix_prob > 0 and float(u(1)) < cfg.mix_prob:
        lam = float(u(1))  # Beta(1, 1)
        if float(u(1)) < 0.5:
            x = lam * x + (1 - lam) * x.flip(0)  # mixup with the reversed batch
        else:
            ch, cw = int(out_size * math.sqrt(1 - lam)), int(out_size * math.sqrt(1 - lam))
            t0, l0 = int(u(1) * (out_size - ch + 1)), int(u(1) * (out_size - cw + 1))
            x = x.clone()
            x[:, :, t0:t0 + ch, l0:l0 + cw] = x.flip(0)[:, :, t0:t0 + ch, l0:l0 + cw]  # cutmix
    return x


def batch_indices(step: int, n: int, batch_size: int, seed: int) -> np.ndarray:
    """Sorted image indices of a step's batch: a pure function of (seed, step), so resuming replays it.

    Each epoch is one seeded permutation of the n images, cut into n // batch_size batches.
    """
    steps_per_epoch = n // batch_size
    epoch, k = divmod(step, steps_per_epoch)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100003 + epoch))
    return np.sort(perm[k * batch_size:(k + 1) * batch_size].numpy())


class BatchReader:
    """uint8 batches (B, S, S, 3) of the cache, read `ahead` steps in advance on as many threads.

    ahead = 0 reads synchronously (the CPU recipe: the one or two cores are busy training). On a GPU,
    reading the memmap on threads hides it behind the device's work; pin=True pins the batch so the
    copy to the device overlaps too. Which images a step gets does not depend on ahead.
    """

    def __init__(self, images: np.ndarray, batch_size: int, seed: int, ahead: int = 0, pin: bool = False) -> None:
        self.images, self.batch_size, self.seed, self.ahead, self.pin = images, batch_size, seed, ahead, pin
        self._pending: dict[int, object] = {}
        self._pool = None
        if ahead > 0:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=ahead, thread_name_prefix="distill-read")

    def _read(self, step: int) -> torch.Tensor:
        idx = batch_indices(step, len(self.images), self.batch_size, self.seed)
        u8 = torch.from_numpy(np.ascontiguousarray(self.images[idx]))  # (B, S, S, 3)
        return u8.pin_memory() if self.pin else u8

    def get(self, step: int, last: int) -> torch.Tensor:
        """The batch of `step`; queues the reads of the following steps up to `last` (exclusive)."""
        if self._pool is None:
            return self._read(step)
        for s in range(step, min(last, step + self.ahead + 1)):
            if s not in self._pending:
                self._pending[s] = self._pool.submit(self._read, s)
        return self._pending.pop(step).result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
