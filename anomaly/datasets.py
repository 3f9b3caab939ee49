"""Dataset readers: the MVTec AD folder layout and plain folders.

MVTec AD:  <category>/train/good/*.png                      (subfolders of train/good too)
           <category>/test/<good|defect type>/*.png
           <category>/ground_truth/<defect type>/<stem>_mask.png  (or <stem>.png)
Plain:     a folder of normal images (its subfolders too, as `predict --images` reads); a folder
           of test images; optional masks matched by file stem (`<stem>.png` or `<stem>_mask.png`).
           The masks are the only labels: a test image without a mask is read as good, and a warning
           names every such image (a defective image whose mask is missing would read as good too).

`good` is matched whatever its case (test/Good), when only one folder matches, and so is a defect type
between test/ and ground_truth/ (test/Scratch and ground_truth/scratch). Test images and masks are
matched by name within one folder, so a test or mask folder with images in subfolders is refused
rather than read in part. Linked subfolders are read as the folders they link to, each once.

Readers list files and check headers (sizes, masks without images), and decode only the masks whose
pixels decide a label or a warning (plain folders' masks; with `warn`, those in ground_truth/good/);
images and the other masks are decoded lazily by `load_images` / `TestSample.load_mask`, so a large
set never sits in memory twice.
"""
from __future__ import annotations

import os
import warnings
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
    good_without_mask: tuple[Path, ...] = ()   # plain folders: test images read as good because no mask names them

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


#: folder names that mark the parts of a labelled dataset: never read as normal images
DATASET_PARTS = ("test", "ground_truth", "mask", "masks")


def _tree(folder: Path, walked: set[Path] | None = None) -> list[Path]:
    """`folder`'s subfolders at any depth, but hidden ones and those frozenvit wrote (`subfolders`); a linked
    subfolder is followed, each real folder once (as `image_files` walks them), so a link up the tree ends there."""
    walked = {folder.resolve()} if walked is None else walked
    out = []
    for d in subfolders(folder):
        if d.resolve() not in walked:
            walked.add(d.resolve())
            out += [d, *_tree(d, walked)]
    return out


def _normal_images(folder: str | os.PathLike, what: str) -> list[Path]:
    """Every image under `folder`, subfolders included (as `predict --images` and `update --normals` read).
    DatasetError when none, or when a subfolder is part of a labelled dataset (test/, ground_truth/, masks/, or
    good/ beside other folders): those images are not all normal."""
    folder = Path(folder)
    if folder.is_dir():
        for d in [folder, *_tree(folder)]:
            subs = subfolders(d)
            part = next((s for s in subs if s.name.lower() in DATASET_PARTS), None)
            good = next((s for s in subs if s.name.lower() == "good"), None)
            if part is None and good is not None and len(subs) > 1:
                part = good
            if part is not None:
                among = ", ".join(s.name for s in subs)
                raise DatasetError(
                    f"{what} folder {folder} holds {part.relative_to(folder)}/ (among {among}): "
                    "a labelled dataset, not a folder of normal images, and every image under the folder would be "
                    "read as normal; pass the folder of normal images itself, or an MVTec AD category (train/good, "
                    "test/, ground_truth/)")
    return list_images(folder, what=what, recursive=True)


def _flat_images(folder: Path, what: str) -> list[Path]:
    """Image files directly in `folder` (possibly none). DatasetError when its subfolders hold images: test
    images and masks are matched by name within one folder, so they would be skipped."""
    nested = [d for d in subfolders(folder) if image_files([d])]
    if nested:
        raise DatasetError(f"{what} folder {folder} has images in subfolders ({', '.join(d.name for d in nested)}), "
                           "which are not read: test images and masks are matched by name in one folder; move them "
                           f"into {folder} itself (or point to each subfolder in turn)")
    return image_files([folder], recursive=False)


def _good_folder(parent: Path) -> Path | None:
    """The folder of good images in `parent` (train/ or test/): `good`, whatever its case; None when there is
    none; DatasetError when several names differ only by case."""
    found = [d for d in subfolders(parent) if d.name.lower() == "good"] if parent.is_dir() else []
    if len(found) > 1:
        raise DatasetError(f"{parent} holds {' and '.join(d.name for d in found)}: the good images are expected in "
                           f"one folder, {parent / 'good'}; merge them")
    return found[0] if found else None


def _same_name(name: str, folders: list[Path], parent: Path) -> Path | None:
    """The folder among `folders` named `name`, or else the one named so in another case (test/Scratch for
    ground_truth/scratch); None when there is none; DatasetError when several differ from it only by case."""
    exact = [d for d in folders if d.name == name]
    if exact:
        return exact[0]
    found = [d for d in folders if d.name.lower() == name.lower()]
    if len(found) > 1:
        raise DatasetError(f"{parent} holds {' and '.join(d.name for d in found)}, which differ only by case, for "
                           f"the defect type {name}: merge them into one folder")
    return found[0] if found else None


def _masks_of(images: list[Path], masks: list[Path]) -> tuple[dict[Path, Path], list[Path]]:
    """{image: its mask} for the images with one, and the masks without an image. A mask goes with the image of
    its stem, named `<stem>.png` or `<stem>_mask.png` (any image suffix). DatasetError for an image with two masks
    that differ (both names); identical ones are fine."""
    stems = {p.stem for p in images}
    orphans = [m for m in masks if m.stem not in stems and _mask_stem(m) not in stems]
    found: dict[Path, Path] = {}
    for p in images:
        mine = [m for m in masks if m.stem in (p.stem, f"{p.stem}_mask")]
        if len(mine) > 1:
            size = image_size(p)
            first = read_mask(mine[0], size, image_path=p)
            for other in mine[1:]:
                if not np.array_equal(first, read_mask(other, size, image_path=p)):
                    raise DatasetError(f"image {p} has two masks that differ, {mine[0]} and {other}; a mask is "
                                       "matched by stem (<stem>.png or <stem>_mask.png): keep the right one only")
        if mine:
            found[p] = mine[0]
    return found, orphans


def _shown(paths: list, n: int = 3) -> str:
    return ", ".join(map(str, paths[:n])) + (f" and {len(paths) - n} more" if len(paths) > n else "")


def read_mvtec(category: str | os.PathLike, *, warn: bool = True) -> AnomalyDataset:
    """Read one MVTec AD category folder. Raises DatasetError on a broken layout.

    A defect type's masks are in the ground_truth/ folder of the same name, matched in any case when only one
    folder does (test/Scratch, ground_truth/scratch). With `warn` (evaluation), warns when the test set has no good
    folder (image AUROC is then undefined), when it has only good images, when no defective test image has a mask
    (no pixel metrics), and names the masks in ground_truth/good/ that mark defect pixels (ignored: an image in
    test/good is good); `read_dataset`, which reads the normals, does not.
    """
    root = Path(category)
    train_dir = _good_folder(root / "train")
    if train_dir is None:
        raise DatasetError(f"{root} is not an MVTec AD category: {root / 'train' / 'good'} is missing "
                           "(expected <category>/train/good, test/<type>, ground_truth/<type>)")
    train = _normal_images(train_dir, what="training (normal) images")
    test: list[TestSample] = []
    test_dir, gt_dir = root / "test", root / "ground_truth"
    stems: dict[Path, list[Path]] = {}
    good = _good_folder(test_dir)
    types = subfolders(test_dir) if test_dir.is_dir() else []
    truths = subfolders(gt_dir) if gt_dir.is_dir() else []
    for d in types:
        files = _flat_images(d, what="test images")
        stems[d] = files
        if d == good:
            test += [TestSample(p, 0, "good") for p in files]
            continue
        gt = _same_name(d.name, truths, gt_dir)
        masks, _ = _masks_of(files, _flat_images(gt, what="masks") if gt is not None else [])
        test += [TestSample(p, 1, d.name, masks.get(p)) for p in files]
    for g in truths:   # a mask without its image is a broken copy, not something to skip
        d = _same_name(g.name, types, test_dir)
        _, orphans = _masks_of(stems.get(d, []) if d is not None else [], _flat_images(g, what="masks"))
        if orphans:
            m = orphans[0]
            elsewhere = [p for files in stems.values() for p in files if p.stem == _mask_stem(m)]
            cure = (f"but {elsewhere[0].relative_to(root)} exists: move the mask to ground_truth/"
                    f"{elsewhere[0].parent.name}/" if elsewhere else "restore the image or delete the mask")
            raise DatasetError(f"mask {m} has no image test/{d.name if d is not None else g.name}/{_mask_stem(m)}.*; "
                               f"{cure}")
    _check_mask_sizes(test)
    defective = [s for s in test if s.label == 1]
    if warn and defective and good is None:
        warnings.warn(f"{test_dir} has no good folder (found: {', '.join(d.name for d in types)}): image AUROC and "
                      f"the false-alarm rate are undefined without good test images; put them in {test_dir / 'good'}",
                      stacklevel=2)
    if warn and test and not defective:
        warnings.warn(f"{test_dir} holds only good images ({', '.join(d.name for d in types)}): image AUROC and the "
                      f"detection rate are undefined without defective test images; put them in "
                      f"{test_dir / '<defect type>'}", stacklevel=2)
    if warn and defective and all(s.mask_path is None for s in defective):
        where = (f"{gt_dir} does not exist" if not gt_dir.is_dir()
                 else f"none is in {gt_dir}/<defect type>/ as <stem>_mask.png or <stem>.png")
        shown = _shown([s.path for s in defective])
        warnings.warn(f"no mask for any of the {len(defective)} defective test images ({shown}): {where}; pixel "
                      "AUROC, AUPRO and pixel F1-max are not computed, add the masks to get them", stacklevel=2)
    gt_good = _same_name("good", truths, gt_dir) if warn and good is not None else None
    if gt_good is not None:
        masks, _ = _masks_of(stems[good], _flat_images(gt_good, what="masks"))
        marked = [m for p, m in masks.items() if read_mask(m, image_size(p), image_path=p).any()]
        if marked:
            one = len(marked) == 1
            warnings.warn(f"{len(marked)} mask{'' if one else 's'} in {gt_good} mark{'s' if one else ''} defect pixels "
                          f"({_shown(marked)}): ignored, as an image in {good} is good and all its pixels are "
                          f"defect-free; if {'the image is' if one else 'an image is'} defective, move it to "
                          f"{test_dir}/<defect type>/ and its mask to {gt_dir}/<defect type>/", stacklevel=2)
    return AnomalyDataset(root, train, test)


def read_folders(normal: str | os.PathLike | None, test: str | os.PathLike | None = None,
                 masks: str | os.PathLike | None = None) -> AnomalyDataset:
    """Plain folders: normals (every image under `normal`, subfolders included), test images, optional masks
    matched by stem (`<stem>.png` or `<stem>_mask.png`; test images and masks directly in their folders).

    With `masks`, the masks are the only labels: a test image whose mask has any defect pixel
    (`images.read_mask`) is defective, one with an empty mask is good, and one without a mask is read as good too,
    since nothing else says otherwise. A warning names the images read as good for want of a mask
    (`good_without_mask`): a defective image whose mask is missing is among them. Giving each good image an empty
    mask makes every label explicit, and the warning then names only images whose mask is missing. Warnings also
    say when every mask is empty and when every image is defective. Without `masks`, test labels are unknown (-1).
    """
    train = _normal_images(normal, what="normal images") if normal is not None else []
    samples: list[TestSample] = []
    unmasked: list[Path] = []
    if test is not None:
        if Path(test).is_dir():
            _flat_images(Path(test), what="test images")          # before: a folder of subfolders only says so
        files = list_images(test, what="test images")
        found: dict[Path, Path] = {}
        if masks is not None:
            if Path(masks).is_dir():
                _flat_images(Path(masks), what="masks")
            listed = list_images(masks, what="masks")
            found, orphans = _masks_of(files, listed)
            if orphans:
                raise DatasetError(f"mask {orphans[0]} has no test image named {_mask_stem(orphans[0])}.* in {test} "
                                   f"({len(orphans)} such masks); masks are matched to images by file stem")
        for p in files:
            if masks is None:
                samples.append(TestSample(p, -1, ""))
                continue
            m = found.get(p)
            if m is None:
                unmasked.append(p)
            positive = m is not None and bool(read_mask(m, image_size(p), image_path=p).any())
            samples.append(TestSample(p, int(positive), "defect" if positive else "good", m if positive else None))
        if found and not any(s.label == 1 for s in samples):
            warnings.warn(f"all {len(found)} masks in {masks} are empty, so every test image reads as good: a pixel "
                          "is a defect when above half the mask's scale (127 of 255), or above 0 in a lossless mask "
                          "that stays below that (0/1)", stacklevel=2)
        elif unmasked:
            one = len(unmasked) == 1
            listed = "" if len(unmasked) <= 3 else "; `anomaly evaluate --out` lists them all"
            warnings.warn(f"{len(unmasked)} of the {len(files)} test images {'has' if one else 'have'} no mask in "
                          f"{masks} and {'is' if one else 'are'} read as good ({_shown(unmasked)}{listed}): in plain "
                          "folders the masks are the only labels, so a defective image whose mask is missing reads "
                          f"as good too. Check that {'it is not' if one else 'none of them is'} defective; give each "
                          "good image an empty (all-zero) mask of its size to make its label explicit, and this "
                          "warning then names only images whose mask is missing", stacklevel=2)
        elif samples and all(s.label == 1 for s in samples):
            warnings.warn(f"every one of the {len(samples)} test images has defect pixels in its mask in {masks}: "
                          "image AUROC and the false-alarm rate are undefined without good test images; add good "
                          "images (with an empty mask or none)", stacklevel=2)
    _check_mask_sizes(samples)
    return AnomalyDataset(Path(test or normal or "."), train, samples, tuple(unmasked))


def read_dataset(path: str | os.PathLike) -> AnomalyDataset:
    """The normals to fit on: an MVTec category folder (`read_mvtec`, without its evaluation warnings), or a plain
    folder of normal images, subfolders included (no test part)."""
    path = Path(path)
    if not path.is_dir():
        raise DatasetError(f"{path} {'is not a folder' if path.exists() else 'does not exist'}; pass an MVTec AD "
                           "category folder (train/good, test/, ground_truth/) or a folder of normal images")
    if _good_folder(path / "train") is not None:
        return read_mvtec(path, warn=False)
    if image_files([path], recursive=True):
        return read_folders(path)
    raise DatasetError(f"{path} is neither an MVTec AD category (train/good, test/, ground_truth/) "
                       "nor a folder of images (in it or its subfolders)")
