"""Dataset readers: the MVTec AD folder layout and plain folders.

MVTec AD:  <category>/train/good/*.png
           <category>/test/<good|defect type>/*.png
           <category>/ground_truth/<defect type>/<stem>_mask.png
Plain:     a folder of normal images; a folder of test images; optional masks matched by
           file stem (`<stem>.png` or `<stem>_mask.png`). A test image without a mask is good.

Readers only list files and check headers (sizes, masks without images); pixels are decoded
lazily by `load_images` / `TestSample.load_mask`, so a large set never sits in memory twice.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from frozenvit.backbone.commands import image_files

from .errors import DatasetError
from .images import image_size, list_images, read_image, read_mask, subfolders


@dataclass(frozen=True)
class TestSample:
    path: Path
    label: int                    # 0 good, 1 defective, -1 unknown
    defect_type: str              # "good", a defect name, or "" when unknown
    mask_path: Path | None = None

    def load_mask(self, size: tuple[int, int] | None = None) -> np.ndarray | None:
        """bool (H, W): the ground-truth mask, all False for good images, None when unknown."""
        if self.mask_path is not None:
            return read_mask(self.mask_path, size or image_size(self.path), image_path=self.path)
        if self.label == 0:
            return np.zeros(size or image_size(self.path), dtype=bool)
        return None


@dataclass(frozen=True)
class AnomalyDataset:
    root: Path
    train: list[Path]             # normal images
    test: list[TestSample]

    @property
    def labels(self) -> np.ndarray:   # (n_test,) int
        return np.array([s.label for s in self.test], dtype=int)

    @property
    def has_masks(self) -> bool:
        """True when every defective test image has a mask (pixel metrics are defined)."""
        return bool(self.test) and all(s.mask_path is not None for s in self.test if s.label == 1)


def load_images(paths: list[Path]) -> list[np.ndarray]:
    """Decode files to uint8 RGB (H, W, 3) each."""
    return [read_image(p) for p in paths]


def _check_mask_sizes(samples: list[TestSample]) -> None:
    for s in samples:
        if s.mask_path is not None:
            hi, wi = image_size(s.path)
            hm, wm = image_size(s.mask_path)
            if (hi, wi) != (hm, wm):
                raise DatasetError(f"mask {s.mask_path} is {hm}x{wm} (HxW) but image {s.path} is {hi}x{wi}; "
                                   "a mask must have its image's size")


def _mask_stem(p: Path) -> str:
    return p.stem[:-5] if p.stem.endswith("_mask") else p.stem


def read_mvtec(category: str | os.PathLike) -> AnomalyDataset:
    """Read one MVTec AD category folder. Raises DatasetError on a broken layout."""
    root = Path(category)
    train_dir = root / "train" / "good"
    if not train_dir.is_dir():
        raise DatasetError(f"{root} is not an MVTec AD category: {train_dir} is missing "
                           "(expected <category>/train/good, test/<type>, ground_truth/<type>)")
    train = list_images(train_dir, what="training (normal) images")
    test: list[TestSample] = []
    test_dir, gt_dir = root / "test", root / "ground_truth"
    stems: dict[str, set[str]] = {}
    if test_dir.is_dir():
        for d in subfolders(test_dir):
            files = image_files([d], recursive=False)
            stems[d.name] = {p.stem for p in files}
            for p in files:
                if d.name == "good":
                    test.append(TestSample(p, 0, "good"))
                    continue
                cands = [gt_dir / d.name / f"{p.stem}_mask{ext}" for ext in (".png", p.suffix)]
                mask = next((c for c in cands if c.is_file()), None)
                test.append(TestSample(p, 1, d.name, mask))
    if gt_dir.is_dir():   # a mask without its image is a broken copy, not something to skip
        for d in subfolders(gt_dir):
            for m in image_files([d], recursive=False):
                if _mask_stem(m) not in stems.get(d.name, set()):
                    raise DatasetError(f"mask {m} has no image test/{d.name}/{_mask_stem(m)}.*; "
                                       "restore the image or delete the mask")
    _check_mask_sizes(test)
    return AnomalyDataset(root, train, test)


def read_folders(normal: str | os.PathLike | None, test: str | os.PathLike | None = None,
                 masks: str | os.PathLike | None = None) -> AnomalyDataset:
    """Plain folders: normals, test images, optional masks matched by stem.

    With `masks`, a test image whose mask has any positive pixel is defective, one with an empty
    mask or none is good. Without `masks`, test labels are unknown (-1).
    """
    train = list_images(normal, what="normal images") if normal is not None else []
    samples: list[TestSample] = []
    if test is not None:
        files = list_images(test, what="test images")
        by_stem: dict[str, Path] = {}
        if masks is not None:
            for m in list_images(masks, what="masks"):
                by_stem[_mask_stem(m)] = m
            orphans = sorted(set(by_stem) - {p.stem for p in files})
            if orphans:
                raise DatasetError(f"mask {by_stem[orphans[0]]} has no test image named {orphans[0]}.* in {test} "
                                   f"({len(orphans)} such masks); masks are matched to images by file stem")
        for p in files:
            if masks is None:
                samples.append(TestSample(p, -1, ""))
                continue
            m = by_stem.get(p.stem)
            positive = m is not None and bool(read_mask(m, image_size(p), image_path=p).any())
            samples.append(TestSample(p, int(positive), "defect" if positive else "good", m if positive else None))
    _check_mask_sizes(samples)
    return AnomalyDataset(Path(test or normal or "."), train, samples)


def read_dataset(path: str | os.PathLike) -> AnomalyDataset:
    """An MVTec category folder, or a plain folder of normal images (no test part)."""
    path = Path(path)
    if not path.is_dir():
        raise DatasetError(f"{path} {'is not a folder' if path.exists() else 'does not exist'}; pass an MVTec AD "
                           "category folder (train/good, test/, ground_truth/) or a folder of normal images")
    if (path / "train" / "good").is_dir():
        return read_mvtec(path)
    if image_files([path], recursive=False):
        return read_folders(path)
    raise DatasetError(f"{path} is neither an MVTec AD category (train/good, test/, ground_truth/) "
                       "nor a folder of images")
