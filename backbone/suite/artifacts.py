"""Artifact directories, output folders and files that frozenvit writes, without ever losing a user's data.

Three promises, shared by every application:

- **Nothing of the user's is deleted or overwritten.** Every folder frozenvit writes carries a marker,
  `.frozenvit.json` ({"kind": ..., "files": {name: sha256}}). A folder without our marker is a user's folder:
  a non-empty `--out` without our marker of the same kind, an artifact folder holding files we did not write,
  or an existing output file we did not write is refused with `OutputConflict`, before any work starts.
- **Replacing an artifact is safe at every instant.** An artifact is written into a temporary sibling
  `.NAME.tmp-TOKEN` that holds its own `.frozenvit-temp.json` naming TOKEN and NAME, so a folder is taken for
  one of our temporaries only when both agree, never by its name alone. The marker, listing every file, is
  written last, so a temporary folder with a marker is complete. The old artifact is moved aside to
  `.NAME.old-TOKEN` (tagged the same way), the new one renamed into place, the old one removed. A crash between
  the two renames leaves no folder at the path: the next load or write finds the complete sibling, renames it
  back and logs that it did. Our stale siblings are removed on the next write; look-alikes are left alone.
- **What was written is what is read.** The marker records the sha256 of every file of an artifact (tensors,
  faiss index, config, members); `read_config` checks them all, so a flipped byte, a NaN written into a tensor
  file or a config edited by hand is refused with `ArtifactError`. `tensor_metadata(config)` also ties each
  safetensors file to its config.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import ArtifactError, OutputConflict

log = logging.getLogger("frozenvit.artifacts")


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


MARKER = ".frozenvit.json"
TEMP_MARKER = ".frozenvit-temp.json"    # inside our temporaries only: {"target": NAME, "tag": "tmp"|"old", "token": ...}


def _read_marker(directory: Path) -> dict | None:
    try:
        m = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and "kind" in m else None


def _files(directory: Path) -> list[str]:
    """Every file under `directory`, relative, but the temporaries' tag (the marker is listed by the caller)."""
    return sorted(str(f.relative_to(directory)) for f in directory.rglob("*")
                  if not f.is_dir() and f.name != TEMP_MARKER)


def _refuse(path: Path, why: str, flag: str, rule: str = "frozenvit never deletes or overwrites what it did "
            "not write") -> OutputConflict:
    return OutputConflict(f"{flag} {path} {why}; {rule}. Choose a new {flag} path (or an empty folder), or move "
                          "those files away")


def _check_owned_dir(path: Path, kind: str, flag: str, whole: bool, replaces: tuple[str, ...] = ()) -> None:
    """Raise OutputConflict unless `path` is absent, empty, or a frozenvit folder of this kind.

    `whole`: the folder will be replaced as a whole, so it must hold nothing but the files we listed.
    """
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise _refuse(path, "exists and is not a folder", flag)
    if not path.exists() or not any(path.iterdir()):
        return
    marker = _read_marker(path)
    if marker is None:                        # a config.json without our marker is still a user's folder
        raise _refuse(path, f"is a non-empty folder that frozenvit did not write (it has no {MARKER})", flag)
    have = marker["kind"]
    if have != kind and have not in replaces:
        raise _refuse(path, f"holds a frozenvit {have!r} output, not a {kind!r}", flag,
                      "a command replaces only an earlier output of its own")
    if whole:
        foreign = sorted(set(_files(path)) - set(marker.get("files") or ()) - {MARKER})
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise _refuse(path, f"holds files that frozenvit did not write ({shown})", flag)


def _new_temporary(target: Path, tag: str) -> Path:
    """Create `.NAME.TAG-TOKEN` beside `target`, tagged inside as ours; only its name is returned for "old"."""
    token = secrets.token_hex(8)
    path = target.parent / f".{target.name}.{tag}-{token}"
    if tag == "tmp":
        path.mkdir()
        os.chmod(path, 0o777 & ~_umask())
        _tag(path, target, tag, token)
    return path


def _tag(folder: Path, target: Path, tag: str, token: str) -> None:
    (folder / TEMP_MARKER).write_text(json.dumps({"target": target.name, "tag": tag, "token": token}))


def _is_our_temporary(cand: Path, target: Path, tag: str) -> bool:
    """True only when `cand` carries our tag naming this target, this role and the token in its own name."""
    if cand.is_symlink() or not cand.is_dir():
        return False
    try:
        t = json.loads((cand / TEMP_MARKER).read_text())
    except (OSError, ValueError):
        return False
    prefix = f".{target.name}.{tag}-"
    return (isinstance(t, dict) and t.get("target") == target.name and t.get("tag") == tag
            and cand.name.startswith(prefix) and t.get("token") == cand.name[len(prefix):])


def _siblings(target: Path, tag: str) -> list[Path]:
    """Our temporaries of `target` with this tag, oldest first (look-alikes that are not ours are skipped)."""
    if not target.parent.is_dir():
        return []
    found = [p for p in target.parent.glob(f".{glob.escape(target.name)}.{tag}-*") if _is_our_temporary(p, target, tag)]
    return sorted(found, key=lambda p: p.stat().st_mtime)


def _untag(folder: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (folder / TEMP_MARKER).unlink()


def recover(target: str | os.PathLike) -> bool:
    """If a write was killed between its two renames, put the complete artifact back at `target`.

    Prefers the newest complete new version, else the old one; only folders tagged as our temporaries of
    this target are considered. Returns True when it restored one.
    """
    target = Path(target)
    if target.exists() or target.is_symlink():
        if target.is_dir() and _read_marker(target) is not None:
            _untag(target)                    # a kill right after the rename left the temporary's tag inside
        return False
    for tag in ("tmp", "old"):
        for cand in reversed(_siblings(target, tag)):
            complete = _read_marker(cand) is not None
            if complete:
                os.replace(cand, target)
                _untag(target)
                log.warning("recovered %s from an interrupted write (%s version, %s)", target,
                            "new" if tag == "tmp" else "previous", cand.name)
                return True
    return False


def _clean_stale(target: Path) -> None:
    """Remove our `.NAME.tmp-*` / `.NAME.old-*` temporaries left by killed writes (tagged ones only)."""
    for tag in ("tmp", "old"):
        for p in _siblings(target, tag):
            shutil.rmtree(p, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def check_writable(path: str | os.PathLike, flag: str = "--out") -> None:
    """Refuse early a path that cannot be created: a file where a folder must be, or no write permission.

    `path` itself may exist (it is checked by the callers' ownership rules); its nearest existing ancestor
    must be a writable folder, so a long job never learns after its work that it cannot save it.
    """
    path = Path(path)
    ancestor = next((p for p in path.parents if p.exists() or p.is_symlink()), Path("."))
    if not ancestor.is_dir():
        raise OutputConflict(f"{flag} {path} cannot be written: {ancestor} is a file, not a folder; "
                             "choose another path")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputConflict(f"{flag} {path} cannot be written (no write permission in {ancestor}); "
                             "choose a writable path")


def check_artifact_dir(target: str | os.PathLike, kind: str, flag: str = "--out", replaces: tuple[str, ...] = ()) -> None:
    """Refuse early (before hours of work) a `target` that `atomic_dir(target, kind, replaces=...)` would refuse."""
    check_writable(target, flag)
    recover(target)
    _check_owned_dir(Path(target), kind, flag, whole=True, replaces=replaces)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike, kind: str, flag: str = "--out", replaces: tuple[str, ...] = ()) -> Iterator[Path]:
    """Yield a temporary folder; when the body returns it replaces `target` as a whole.

    Refuses (OutputConflict, before the body runs) a `target` that is not absent, empty, or a frozenvit
    artifact of this `kind` (or of a kind in `replaces`) holding only files frozenvit wrote. If the body raises,
    `target` is untouched.
    """
    target = Path(target)
    check_artifact_dir(target, kind, flag, replaces)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _clean_stale(target)
        tmp = _new_temporary(target, "tmp")
    except OSError as e:
        raise OutputConflict(f"{flag} {target} cannot be written ({e.strerror}); choose a writable path") from e
    try:
        yield tmp
        digests = {}
        for f in _files(tmp):                     # flush contents before the marker declares them complete
            with open(tmp / f, "rb") as fh:
                os.fsync(fh.fileno())
            digests[f] = sha256_file(tmp / f)
        write_json(tmp / MARKER, {"kind": kind, "files": digests})
        _fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target.exists():
        old = _new_temporary(target, "old")
        _tag(target, target, "old", old.name.rsplit("-", 1)[1])   # recognisable as ours once moved aside
        os.rename(target, old)
        os.rename(tmp, target)
        _untag(target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, target)
        _untag(target)
    _fsync_dir(target.parent)


def remove_artifact(path: str | os.PathLike) -> list[str]:
    """Remove what frozenvit wrote under `path`: every artifact folder at or below it (the files its marker lists,
    the marker), then the folders left empty.

    Anything else (a user's file, a folder without our marker) stays where it is, with the folders that hold it;
    returns those files' paths relative to `path`.
    """
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        return []
    marker = _read_marker(path)
    if marker is not None:
        for rel in marker.get("files") or ():
            f = path / rel
            if f.is_file() or f.is_symlink():
                f.unlink()
        (path / MARKER).unlink()
        _untag(path)
    for d in [d for d in path.iterdir() if d.is_dir() and not d.is_symlink()]:
        remove_artifact(d)
    kept = _files(path)
    if not any(path.iterdir()):
        path.rmdir()
    return kept


def check_output_dir(path: str | os.PathLike, kind: str, flag: str = "--out") -> None:
    """Refuse early, writing nothing, a folder that `output_dir(path, kind)` would refuse."""
    path = Path(path)
    check_writable(path, flag)
    _check_owned_dir(path, kind, flag, whole=False)
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise OutputConflict(f"{flag} {path} cannot be written (no write permission); choose a writable path")


def output_dir(path: str | os.PathLike, kind: str, flag: str = "--out") -> Path:
    """Claim a folder that a command fills file by file (reports, predictions, demos, runs).

    Accepted: absent, empty, or a folder frozenvit wrote with the same `kind` (files in it are
    overwritten by name, never deleted). Anything else raises OutputConflict and nothing is written.
    """
    path = Path(path)
    _check_owned_dir(path, kind, flag, whole=False)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if _read_marker(path) is None:
            write_json(path / MARKER, {"kind": kind})
    except OSError as e:
        raise OutputConflict(f"{flag} {path} cannot be written ({e.strerror}); choose a writable path") from e
    return path


def check_output_file(path: str | os.PathLike | None, kind: str, flag: str = "--out") -> None:
    """Refuse to overwrite a file frozenvit did not write (JSON with our `frozenvit` key, PNG with our tEXt)."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise _refuse(path, "is a folder, a file path is expected here", flag)
    if not path.exists():
        check_writable(path, flag)
        return
    if file_kind(path) != kind:
        raise _refuse(path, "exists and was not written by this frozenvit command", flag)


def file_kind(path: Path) -> str | None:
    """The `kind` frozenvit stamped into a JSON or PNG file it wrote, else None."""
    try:
        if path.suffix.lower() == ".json":
            obj = json.loads(path.read_text())
            return obj.get("frozenvit") if isinstance(obj, dict) else None
        if path.suffix.lower() == ".png":
            from PIL import Image

            with Image.open(path) as im:
                return im.info.get("frozenvit")
    except Exception:   # unreadable: not ours
        return None
    return None


def config_digest(cfg: dict) -> str:
    """sha256 of a config as JSON with sorted keys: stored with the tensors, checked on load."""
    return hashlib.sha256(json.dumps(_finite(cfg), sort_keys=True, default=_json_default).encode()).hexdigest()


def tensor_metadata(cfg: dict) -> dict[str, str]:
    """safetensors metadata that ties a tensor file to its config.json."""
    return {"format": "pt", "frozenvit_config_sha256": config_digest(cfg)}


def check_tensor_metadata(tensor_file: str | os.PathLike, cfg: dict) -> None:
    """Raise ArtifactError when `cfg` is not the config the tensors were saved with (edited by hand)."""
    from safetensors import safe_open

    try:
        with safe_open(str(tensor_file), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as e:
        raise ArtifactError(f"{tensor_file} cannot be read ({type(e).__name__}: {e}); the artifact is corrupt, "
                            "write it again") from e
    want = meta.get("frozenvit_config_sha256")
    if want is not None and want != config_digest(cfg):
        raise ArtifactError(f"{Path(tensor_file).parent}/config.json does not match the tensors it was saved with "
                            "(edited by hand?); write the artifact again instead of editing its config")


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


def write_json(path: str | os.PathLike, obj: Any, kind: str | None = None) -> None:
    """Write JSON atomically; with `kind`, stamp {"frozenvit": kind} so a re-run may replace it. NaN -> null."""
    if kind is not None:
        obj = {"frozenvit": kind, **obj}
    obj = _finite(obj)
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def verify_files(directory: str | os.PathLike) -> dict:
    """Check every file an artifact's marker lists against its recorded sha256; return the marker.

    Raises ArtifactError naming the first file that is missing or changed (a flipped byte, a NaN written into a
    tensor file, a config edited by hand), and for a folder without a marker or with a marker of an older format.
    """
    directory = Path(directory)
    marker = _read_marker(directory)
    if marker is None:
        raise ArtifactError(f"{directory} has no {MARKER} (written by another tool, or copied without its hidden "
                            "files); copy the artifact with its dotfiles, or write it again")
    files = marker.get("files")
    if not isinstance(files, dict):
        raise ArtifactError(f"{directory} was written by an older frozenvit (no file digests); retrain or refit it")
    for name, digest in sorted(files.items()):
        f = directory / name
        if not f.is_file():
            raise ArtifactError(f"{f} is missing from the artifact; write the artifact again")
        if sha256_file(f) != digest:
            raise ArtifactError(f"{f} changed after it was written (edited, corrupted or copied incompletely); "
                                "write the artifact again instead of editing it")
    return marker


def read_config(directory: str | os.PathLike, kind: str, version: int) -> dict:
    """Read `config.json` of an artifact, check every file's digest, its kind and its format version."""
    recover(directory)
    path = Path(directory) / "config.json"
    if not Path(directory).is_dir():
        raise ArtifactError(f"{directory} does not exist: pass the folder a `fit`/`train`/`save` wrote")
    if not path.is_file():
        raise ArtifactError(f"{directory} is not a frozenvit artifact of kind {kind!r}: {path.name} is missing")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path} is not valid JSON ({e}); the artifact is corrupt, refit it") from e
    if not isinstance(cfg, dict) or cfg.get("kind") != kind:
        have = cfg.get("kind") if isinstance(cfg, dict) else None
        raise ArtifactError(f"{directory} holds a {have!r} artifact, expected {kind!r}")
    if cfg.get("format_version") != version:
        raise ArtifactError(
            f"{directory} has format version {cfg.get('format_version')}, this frozenvit reads {version}; "
            "retrain or refit it with this version"
        )
    verify_files(directory)
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


def _finite(o: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    import math

    import numpy as np

    if isinstance(o, np.ndarray):
        o = o.tolist()
    elif isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o
