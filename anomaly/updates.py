"""Which normals a model's updates have used already, so that adding the same images again changes nothing.

    images, names, digests = new_normals(images, names, det.updates_, "PatchCore.partial_fit")
    # the images no earlier update used, their names and pixel sha256; a warning names the rest

Every update (`PatchCore.partial_fit`, `PatchCoreEnsemble.partial_fit`) records, beside the names of the images it
added to the bank and held out, the sha256 of each one's pixels (`added_to_bank_sha256`, `held_out_sha256`). An
image that an earlier update used, given again by the same path or as the same pixels under another name, is
skipped: adding it twice would weigh it twice in the bank, and scoring a held-out normal that is also in the bank
would pull the threshold down. Records written without digests are matched by path. The normals of the original
`fit` are not recorded, so an update cannot recognise them.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

from frozenvit.backbone.preprocess import to_rgb_uint8

from .errors import DatasetError
from .images import as_image, image_list

SHOWN = 5          # skipped images named in a warning; the rest are counted


def image_digest(image: Any) -> str:
    """sha256 of an image's pixels as the detector reads them (uint8 RGB, its shape included): the same for a file,
    a copy of it elsewhere and the array or PIL image it decodes to."""
    name = str(image) if isinstance(image, (str, os.PathLike)) else "image"
    rgb = to_rgb_uint8(as_image(image), name)                       # (H, W, 3) uint8
    h = hashlib.sha256(repr(rgb.shape).encode())
    h.update(rgb.tobytes())
    return h.hexdigest()


def image_names(images: Sequence[Any]) -> list[str]:
    """What an update records for each image: its path as given, or "#k" for the k-th image given in memory."""
    return [str(x) if isinstance(x, (str, os.PathLike)) else f"#{k}" for k, x in enumerate(images)]


def _where(updates: Sequence[dict]) -> tuple[dict[str, tuple[int, str, str]], dict[str, tuple[int, str, str]]]:
    """({digest: use}, {real path: use}) of every image an earlier update used, a use being (update number from 1,
    what it did, the name it recorded); paths only for records without digests."""
    by_digest: dict[str, tuple[int, str, str]] = {}
    by_path: dict[str, tuple[int, str, str]] = {}
    for u_no, u in enumerate(updates, 1):
        for role, did in (("added_to_bank", "added it to the bank"), ("held_out", "held it out")):
            names = [str(n) for n in u.get(role) or ()]
            digests = u.get(f"{role}_sha256")
            for k, n in enumerate(names):
                if isinstance(digests, list) and k < len(digests):
                    by_digest.setdefault(str(digests[k]), (u_no, did, n))
                else:
                    by_path.setdefault(os.path.realpath(n), (u_no, did, n))
    return by_digest, by_path


def bank_images(images: Sequence[Any], names: Sequence[str], updates: Sequence[dict]) -> list[str]:
    """Which of `images` (named `names`) an earlier update added to the bank, each as "NAME (update K added it)":
    the same pixels under any name, or the same path for records without digests. Pixels are hashed only when an
    update added anything. The normals of the original `fit` are not recorded, so they are never found."""
    if not any(u.get("added_to_bank") for u in updates):
        return []
    by_digest, by_path = _where([{"added_to_bank": u.get("added_to_bank"),
                                  "added_to_bank_sha256": u.get("added_to_bank_sha256")} for u in updates])
    found = []
    for name, x in zip(names, images):
        path = os.path.realpath(x) if isinstance(x, (str, os.PathLike)) else None
        use = by_digest.get(image_digest(x)) or (by_path.get(path) if path else None)
        if use is not None:
            found.append(f"{name} (update {use[0]} added it" + ("" if use[2] == name else f" as {use[2]}") + ")")
    return found


def fresh_images(names: Sequence[str], digests: Sequence[str], images: Sequence[Any],
                 updates: Sequence[dict]) -> list[int]:
    """Indices of the images that no earlier update used and that are not given twice here, in order. The others
    are named in one warning; when none is left the warning says that the model stays as it was."""
    by_digest, by_path = _where(updates)
    keep: list[int] = []
    skipped: list[str] = []
    here: dict[str, str] = {}
    for i, (name, digest, x) in enumerate(zip(names, digests, images)):
        path = os.path.realpath(x) if isinstance(x, (str, os.PathLike)) else None
        use = by_digest.get(digest) or (by_path.get(path) if path else None)
        if use is not None:
            u_no, did, was = use
            skipped.append(f"{name} (update {u_no} {did}" + ("" if was == name else f" as {was}") + ")")
        elif digest in here:
            skipped.append(f"{name} (the same pixels as {here[digest]} in this update)")
        else:
            here[digest] = name
            keep.append(i)
    if skipped:
        shown = ", ".join(skipped[:SHOWN]) + (f" and {len(skipped) - SHOWN} more" if len(skipped) > SHOWN else "")
        if keep:
            warnings.warn(f"{len(skipped)} of {len(names)} images were given before and are skipped (each image is "
                          f"added once): {shown}", stacklevel=4)
        else:
            warnings.warn(f"nothing new to add: all {len(names)} images were given before ({shown}); the model "
                          "is unchanged", stacklevel=4)
    return keep


def names_of(images: Sequence[Any], names: Sequence[str] | None, who: str) -> list[str]:
    """The names given for `images` (one each: DatasetError otherwise, `who` naming the call), or `image_names`."""
    names = image_names(images) if names is None else [str(n) for n in names]
    if len(names) != len(images):
        raise DatasetError(f"{who} got {len(names)} names for {len(images)} images: give one name per image, or "
                           "none (paths name themselves)")
    return names


def new_normals(images: Any, names: Sequence[str] | None, updates: Sequence[dict],
                who: str) -> tuple[list[Any], list[str], list[str]]:
    """The images of a `partial_fit` call (`who` names it in errors) that no earlier update used, with their names
    (given, or `image_names`) and pixel digests; empty lists when none is new (`fresh_images` warns). Raises
    DatasetError for no images, or for a number of names other than of images."""
    images = image_list(images, who)
    if not images:
        raise DatasetError(f"{who} got no images: give at least 1 normal image to add")
    names = names_of(images, names, who)
    digests = [image_digest(x) for x in images]
    keep = fresh_images(names, digests, images, updates)
    return [images[i] for i in keep], [names[i] for i in keep], [digests[i] for i in keep]


@contextlib.contextmanager
def model_lock(path: str | os.PathLike, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive advisory lock (flock, as the review's labels file takes) on the model folder `path` for a
    read-modify-write of it: `anomaly update` reads the model, adds normals and replaces the folder inside it, so a
    second update of the same model waits (after `waiting()` is called once) and then reads the model the first
    one wrote; no update is lost.

    Saving replaces the folder by another (a new inode), so the lock is taken on the folder now at `path`, and one
    obtained on a folder that was replaced meanwhile is let go and taken again on its successor. Without flock
    (Windows) nothing is locked."""
    try:
        import fcntl
    except ImportError:                              # no flock: one update at a time is the user's to ensure
        yield
        return
    told = False
    fd = None
    for _ in range(100):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:                    # between the two renames of a replace, or no such model
            time.sleep(0.002)
            continue
        except OSError:                              # unreadable: the load that follows names the problem
            break
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None and not told:
                waiting()
                told = True
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            now, held = os.stat(path), os.fstat(fd)
            if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(fd)                                 # the folder was replaced while we waited: lock its successor
        fd = None
    try:
        yield                                        # fd None: `path` is missing; the load that follows says so
    finally:
        if fd is not None:
            os.close(fd)                             # closing releases the lock
