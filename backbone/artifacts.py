"""Atomic artifact directories and file hashing, shared by every application.

An artifact is a directory: `config.json` plus tensors in `.safetensors` and any index files.
It is written into a temporary sibling and renamed into place, so a crash leaves the old
artifact or none, never half of one.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import ArtifactError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory; on success it replaces `target` in one rename.

    If the body raises, the temporary directory is removed and `target` is untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())          # mkdtemp makes 0700: give the artifact normal permissions
    try:
        yield tmp
        for f in tmp.rglob("*"):  # flush file contents before the rename makes them visible
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{os.getpid()}"
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write a single file atomically (temporary sibling, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())      # mkstemp makes 0600: give the file normal permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def read_config(directory: str | os.PathLike, kind: str, version: int) -> dict:
    """Read `config.json` of an artifact and check its kind and format version."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise ArtifactError(f"{directory} is not a {kind} artifact: {path.name} is missing")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path} is not valid JSON ({e}); the artifact is corrupt, refit it") from e
    if cfg.get("kind") != kind:
        raise ArtifactError(f"{directory} holds a {cfg.get('kind')!r} artifact, expected {kind!r}")
    if cfg.get("format_version") != version:
        raise ArtifactError(
            f"{directory} has format version {cfg.get('format_version')}, this frozenvit reads {version}; "
            "refit the model with this version"
        )
    return cfg


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
