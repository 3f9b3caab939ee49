"""Artifact directories, output folders and files that frozenvit writes, without ever losing a user's data.

Three promises, shared by every application:

- **Nothing of the user's is deleted or overwritten.** Every folder frozenvit writes carries a marker,
  `.frozenvit.json` ({"kind": ..., "files": {name: sha256}, "stats": {name: [size, mtime_ns]}}). A folder without
  our marker is a user's folder: a non-empty `--out` without our marker of the same kind, an artifact folder
  holding files we did not write, or an existing output file we did not write is refused with `OutputConflict`,
  before any work starts. So is an output whose files changed after frozenvit wrote them (a CSV edited in a
  spreadsheet, a report retouched): the marker of an artifact lists every file's sha256, an output folder filled
  file by file (`output_dir`) gains each file's sha256 as it is written, and a single JSON output carries the
  sha256 of its own content (`write_json(..., sealed=True)`). A file whose size and mtime are as recorded is
  taken as unchanged without reading it. Caches and checkpoints, which only frozenvit reads, are replaced even
  when changed (`atomic_dir(..., keep_edits=False)`): a damaged one is written again.
- **Replacing an artifact is safe at every instant.** An artifact is written into a temporary sibling
  `.NAME.tmp-TOKEN` that holds its own `.frozenvit-temp.json` naming TOKEN and NAME, so a folder is taken for
  one of our temporaries only when both agree, never by its name alone. The marker, listing every file, is
  written last, so a temporary folder with a marker is complete. The old artifact is moved aside to
  `.NAME.old-TOKEN` (tagged the same way), the new one renamed into place, the old one removed. A crash between
  the two renames leaves no folder at the path: the next load or write finds the complete sibling, renames it
  back and logs that it did. Our stale siblings are removed on the next write; look-alikes are left alone.
  A write holds an advisory lock (flock) on its temporary folder while it runs, so a second write to the same path
  while the first runs is refused (`OutputConflict`, naming the running write) instead of removing the first's
  temporary as stale or silently replacing its result.
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
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator

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


def read_marker(directory: str | os.PathLike) -> dict | None:
    """The marker frozenvit wrote into `directory` (its kind, files and digests), or None where there is none."""
    directory = Path(directory)
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
            "not write", cure: str | None = None) -> OutputConflict:
    """The OutputConflict for `path` (given as `flag`): what is wrong, the rule, and the cure (by default: another
    path, an empty folder, or the files moved away)."""
    cure = cure or f"Choose a new {flag} path (or an empty folder), or move those files away"
    return OutputConflict(f"{flag} {path} {why}; {rule}. {cure}")


def changed_files(directory: str | os.PathLike, marker: dict | None = None) -> list[str]:
    """The files a folder's marker lists that are there and differ from what frozenvit wrote (missing ones are
    no change to keep); a file whose size and mtime are as recorded is not read."""
    directory = Path(directory)
    marker = read_marker(directory) if marker is None else marker
    files = (marker or {}).get("files")
    stats = (marker or {}).get("stats")
    earlier = (marker or {}).get("previous")
    stats = stats if isinstance(stats, dict) else {}
    earlier = earlier if isinstance(earlier, dict) else {}
    changed = []
    for name, digest in sorted(files.items()) if isinstance(files, dict) else ():
        f = directory / name
        if not f.is_file() or f.is_symlink():
            continue
        if _differs(f, digest, stats.get(name), earlier.get(name)):
            changed.append(name)
    return changed


def _differs(f: Path, digest: Any, stat: Any, earlier: Any = None) -> bool:
    """Whether the file `f` is not what frozenvit recorded (`digest`, or the `earlier` one a write replaces); a
    file whose size and mtime are the recorded `stat` is not read."""
    st = f.stat()
    if stat == [st.st_size, st.st_mtime_ns]:
        return False
    return sha256_file(f) not in (digest, earlier)


def unlisted_files(directory: str | os.PathLike, names: Iterable[str], marker: dict | None = None) -> list[str]:
    """Of `names` (files, relative posix paths, that a run is about to write into the folder), those already there
    that the folder's marker does not list as written by frozenvit (all of them without a marker): a user's file
    of that name, a link or a folder. Writing them would overwrite what frozenvit did not write."""
    directory = Path(directory)
    marker = read_marker(directory) if marker is None else marker
    files = (marker or {}).get("files")
    files = files if isinstance(files, dict) else {}
    found = []
    for name in sorted(set(names)):
        f = directory / name
        if f.is_symlink() or (f.exists() and (name not in files or not f.is_file())):
            found.append(name)
    return found


def foreign_files(directory: str | os.PathLike, marker: dict | None = None) -> list[str]:
    """The files under a folder that its marker does not list (all of them without a marker): not ours."""
    directory = Path(directory)
    marker = read_marker(directory) if marker is None else marker
    return sorted(set(_files(directory)) - set((marker or {}).get("files") or ()) - {MARKER})


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _check_owned_dir(path: Path, kind: str, flag: str, whole: bool, replaces: tuple[str, ...] = (),
                     keep_edits: bool = True, names: Iterable[str] = ()) -> None:
    """Raise OutputConflict unless `path` is absent, empty, or a frozenvit folder of this kind.

    `whole`: the folder will be replaced as a whole, so it must hold nothing but the files we listed.
    `keep_edits`: refuse a folder with a file changed since frozenvit wrote it (`changed_files`).
    `names`: the files the run will write into the folder (relative posix paths); one of them that is already
    there and that the marker does not list (`unlisted_files`) is refused: it is the user's.
    """
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise _refuse(path, "exists and is not a folder", flag, cure=f"Choose another {flag} path")
    if not path.exists() or not any(path.iterdir()):
        return
    marker = read_marker(path)
    if marker is None:                        # a config.json without our marker is still a user's folder
        raise _refuse(path, f"is a non-empty folder that frozenvit did not write (it has no {MARKER})", flag)
    have = marker["kind"]
    if have != kind and have not in replaces:
        raise _refuse(path, f"holds a frozenvit {have!r} output, not a {kind!r}", flag,
                      "a command replaces only an earlier output of its own")
    if whole:
        foreign = foreign_files(path, marker)
        if foreign:
            raise _refuse(path, f"holds files that frozenvit did not write ({_shown(foreign)})", flag,
                          cure=f"Move {_shown(foreign)} out of {path}, or choose another {flag} path")
    if keep_edits:
        edited = changed_files(path, marker)
        if edited:
            raise _refuse(path, f"holds an earlier {have!r} output whose {_shown(edited)} changed after frozenvit "
                          "wrote it (edited by hand?)", flag, "frozenvit never overwrites a user's changes",
                          cure=f"Move {_shown(edited)} away (or keep the whole folder and choose another {flag} "
                               "path)")
    unlisted = unlisted_files(path, names, marker)
    if unlisted:
        raise _refuse(path, f"holds {_shown(unlisted)}, which frozenvit did not write (its {MARKER} does not list "
                      f"{'them' if len(unlisted) > 1 else 'it'}) and which this run would write", flag,
                      cure=f"Move {_shown(unlisted)} out of {path}, or choose another {flag} path")


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
        if target.is_dir() and read_marker(target) is not None:
            _untag(target)                    # a kill right after the rename left the temporary's tag inside
        return False
    for tag in ("tmp", "old"):
        for cand in reversed(_siblings(target, tag)):
            if _running(cand):         # a running write about to rename its complete temporary: it is not lost
                continue
            complete = read_marker(cand) is not None
            if complete:
                os.replace(cand, target)
                _untag(target)
                log.warning("recovered %s from an interrupted write (%s version, %s)", target,
                            "new" if tag == "tmp" else "previous", cand.name)
                return True
    return False


def _try_lock(folder: Path) -> tuple[int | None, bool]:
    """(descriptor holding an exclusive flock on `folder`, or None; whether another process holds one). No flock
    (Windows: concurrent writes to one path are the user's to avoid), or a folder that cannot be opened: (None,
    False)."""
    try:
        import fcntl
    except ImportError:
        return None, False
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return None, False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        return None, isinstance(e, BlockingIOError)
    return fd, False


def _hold(folder: Path) -> int | None:
    """Take an exclusive flock on `folder` for as long as the returned descriptor is open (None: not locked)."""
    return _try_lock(folder)[0]


def _running(folder: Path) -> bool:
    """Whether a live write holds `folder` (its temporary) locked: a killed write's lock went with its process."""
    fd, held = _try_lock(folder)
    if fd is not None:
        os.close(fd)
    return held


def _started(tmp: Path) -> tuple[int, str]:
    """When a temporary was made: its tag's mtime (written once, at creation; the folder's own changes as files are
    written into it), its name breaking ties."""
    try:
        return (tmp / TEMP_MARKER).stat().st_mtime_ns, tmp.name
    except OSError:
        return 0, tmp.name


def _refuse_running(target: Path, flag: str, mine: Path | None = None) -> None:
    """OutputConflict when another write of `target` is running (one that started before `mine`, when given)."""
    for p in _siblings(target, "tmp"):
        if p == mine or not _running(p):
            continue
        if mine is not None and _started(p) > _started(mine):
            continue                   # it started after this one: it is the one refused
        raise OutputConflict(f"{flag} {target} is being written by another frozenvit run now (its temporary folder "
                             f"{p.name}); wait for it to finish, or choose another {flag} path")


def _clean_stale(target: Path, flag: str = "--out") -> None:
    """Remove our `.NAME.tmp-*` / `.NAME.old-*` temporaries left by killed writes (tagged ones only); a write that
    is running (its temporary locked) is refused instead (OutputConflict)."""
    _refuse_running(target, flag)
    for tag in ("tmp", "old"):
        for p in _siblings(target, tag):
            if not _running(p):
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
    An existing folder at `path` must be writable too (frozenvit tags it while it replaces it). Both are tried
    with a probe file (created and removed at once), since permission bits do not tell for root or for an
    immutable or read-only-mounted folder.
    """
    path = Path(path)
    ancestor = next((p for p in path.parents if p.exists() or p.is_symlink()), Path("."))
    if not ancestor.is_dir():
        raise OutputConflict(f"{flag} {path} cannot be written: {ancestor} is a file, not a folder; "
                             "choose another path")
    for folder in [ancestor] + ([path] if path.is_dir() and not path.is_symlink() else []):
        if not (os.access(folder, os.W_OK | os.X_OK) and _probe_write(folder)):
            raise OutputConflict(f"{flag} {path} cannot be written (no write permission in {folder}); "
                                 "choose a writable path, or make that folder writable")


def _probe_write(folder: Path) -> bool:
    """Whether a file can be created in `folder` (it is removed at once)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".frozenvit-probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:
        pass
    return True


def check_artifact_dir(target: str | os.PathLike, kind: str, flag: str = "--out", replaces: tuple[str, ...] = (),
                       keep_edits: bool = True) -> None:
    """Refuse early (before hours of work) a `target` that `atomic_dir(target, kind, ...)` would refuse."""
    check_writable(target, flag)
    _refuse_running(Path(target), flag)
    recover(target)
    _check_owned_dir(Path(target), kind, flag, whole=True, replaces=replaces, keep_edits=keep_edits)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike, kind: str, flag: str = "--out", replaces: tuple[str, ...] = (),
               keep_edits: bool = True) -> Iterator[Path]:
    """Yield a temporary folder; when the body returns it replaces `target` as a whole.

    Refuses (OutputConflict, before the body runs) a `target` that is not absent, empty, or a frozenvit
    artifact of this `kind` (or of a kind in `replaces`) holding only files frozenvit wrote, unchanged since
    (`keep_edits=False`: changed files are replaced too, for caches and checkpoints that only frozenvit reads).
    If the body raises, `target` is untouched.
    """
    target = Path(target)
    check_artifact_dir(target, kind, flag, replaces, keep_edits)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _clean_stale(target, flag)
        tmp = _new_temporary(target, "tmp")
    except OSError as e:
        raise OutputConflict(f"{flag} {target} cannot be written ({e.strerror}); choose a writable path") from e
    lock = _hold(tmp)                  # held until the end: another write of target sees this one running
    try:
        _refuse_running(target, flag, mine=tmp)     # two writes that started together: the later one gives way
        yield tmp
        digests, stats = {}, {}
        mode = 0o666 & ~_umask()                  # as readable as any file (safetensors writes its files 0600)
        for f in _files(tmp):                     # flush contents before the marker declares them complete
            os.chmod(tmp / f, mode)
            with open(tmp / f, "rb") as fh:
                os.fsync(fh.fileno())
            digests[f] = sha256_file(tmp / f)
            st = (tmp / f).stat()
            stats[f] = [st.st_size, st.st_mtime_ns]
        write_json(tmp / MARKER, {"kind": kind, "files": digests, "stats": stats})
        _fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if lock is not None:
            os.close(lock)
        raise
    try:
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
    finally:
        if lock is not None:
            os.close(lock)


def remove_artifact(path: str | os.PathLike) -> list[str]:
    """Remove what frozenvit wrote under `path`: every artifact folder at or below it (the files its marker lists,
    the marker), then the folders left empty.

    Anything else (a user's file, a folder without our marker) stays where it is, with the folders that hold it;
    returns those files' paths relative to `path`.
    """
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        return []
    marker = read_marker(path)
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


def check_output_dir(path: str | os.PathLike, kind: str, flag: str = "--out", names: Iterable[str] = ()) -> None:
    """Refuse early, writing nothing, a folder that `output_dir(path, kind, names=names)` would refuse: pass the
    files the run will write (`names`), so that a user's file of one of those names stops it before any work."""
    path = Path(path)
    check_writable(path, flag)
    _check_owned_dir(path, kind, flag, whole=False, names=names)
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise OutputConflict(f"{flag} {path} cannot be written (no write permission); choose a writable path")


_claimed: dict[Path, str] = {}         # output folders this process claimed (real path -> kind)
_claim_lock = threading.RLock()


def output_dir(path: str | os.PathLike, kind: str, flag: str = "--out", names: Iterable[str] = ()) -> Path:
    """Claim a folder that a command fills file by file (reports, predictions, demos, runs).

    Accepted: absent, empty, or a folder frozenvit wrote with the same `kind`, none of whose files changed since,
    and where none of `names` (the files the run will write, relative posix paths) is a file the marker does not
    list. Files frozenvit wrote are overwritten by name; a user's own file is never overwritten: one among `names`
    is refused here, and `atomic_write_bytes` refuses any other at write time. Anything else raises OutputConflict
    and nothing is written. Every file this process then writes in it with `atomic_write_bytes` (outside a folder
    with a marker of its own) has its sha256 recorded in the folder's marker, so a later run can tell the user's
    edits.
    """
    path = Path(path)
    _check_owned_dir(path, kind, flag, whole=False, names=names)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if read_marker(path) is None:
            write_json(path / MARKER, {"kind": kind, "files": {}})
    except OSError as e:
        raise OutputConflict(f"{flag} {path} cannot be written ({e.strerror}); choose a writable path") from e
    with _claim_lock:
        _claimed[path.resolve()] = kind
    return path


def _claiming_folder(path: Path) -> tuple[Path, str] | None:
    """The claimed output folder that records `path` and `path` relative to it, if any: the nearest claimed
    ancestor, with no folder between them that is hidden (our temporaries) or holds a marker of its own."""
    if path.name in (MARKER, TEMP_MARKER) or not _claimed:
        return None
    real = path.parent.resolve() / path.name
    for folder in real.parents:
        if folder in _claimed:
            rel = real.relative_to(folder)
            return (folder, rel.as_posix()) if not any(p.startswith(".") for p in rel.parts) else None
        if folder.name.startswith(".") or (folder / MARKER).is_file():
            return None
    return None


def _update_marker(folder: Path, update: Any) -> None:
    marker = read_marker(folder)
    if marker is None:                         # the folder was emptied or replaced meanwhile: nothing to record in
        return
    for key in ("files", "stats", "previous"):
        if not isinstance(marker.get(key), dict):
            marker[key] = {}
    update(marker)
    write_json(folder / MARKER, marker)


def _record_before(path: Path, data: bytes) -> tuple[Path, str] | None:
    """Record the digest of what is about to replace `path` (the digest it replaces stays acceptable, so a
    kill between the two writes leaves nothing that reads as a user's edit)."""
    claim = _claiming_folder(path)
    if claim is not None:
        folder, rel = claim
        digest = hashlib.sha256(data).hexdigest()

        def update(m: dict) -> None:
            old = m["files"].get(rel)
            m["previous"].pop(rel, None)
            if old is not None and old != digest:
                m["previous"][rel] = old
            m["files"][rel] = digest
            m["stats"].pop(rel, None)
        with _claim_lock:
            _update_marker(folder, update)
    return claim


def _record_after(claim: tuple[Path, str] | None, path: Path) -> None:
    if claim is None:
        return
    folder, rel = claim
    st = path.stat()

    def update(m: dict) -> None:
        m["previous"].pop(rel, None)
        m["stats"][rel] = [st.st_size, st.st_mtime_ns]
    with _claim_lock:
        _update_marker(folder, update)


def record_output(path: str | os.PathLike) -> None:
    """Record in its claimed output folder's marker what `path` holds now (after frozenvit appended to it)."""
    path = Path(path)
    claim = _record_before(path, path.read_bytes())
    _record_after(claim, path)


def remove_earlier_outputs(root: str | os.PathLike, keep: set[str] | frozenset[str]) -> list[str]:
    """Delete the files an earlier run wrote into the output folder `root` (those its marker lists) that are not in
    `keep`, the files this run writes (relative, posix), so the folder holds this run's output only.

    Only files frozenvit wrote and that are unchanged since (`changed_files`) go; a user's own file, one the
    marker does not list, or an edited one stays. Their entries leave the marker, and the folders they leave
    empty are removed. Returns the removed files, relative to root.
    """
    files = (read_marker(root) or {}).get("files")
    return remove_outputs(root, [rel for rel in files if rel not in keep] if isinstance(files, dict) else [])


def remove_outputs(root: str | os.PathLike, names: Iterable[str]) -> list[str]:
    """Delete the files `names` (relative, posix) of the output folder `root` that its marker lists and that are
    unchanged since frozenvit wrote them; a name it does not list, or an edited file, stays. The entries of the
    names that are gone (removed now, or already missing) leave the marker, so that a user's file later put under
    one of those names is taken for the user's; the folders they leave empty are removed. Returns the removed
    files."""
    root = Path(root)
    marker = read_marker(root)
    files = (marker or {}).get("files")
    if not isinstance(files, dict):
        return []
    names = set(names)
    edited = set(changed_files(root, marker))
    gone, removed = [], []
    for rel in sorted(files):
        parts = Path(rel).parts
        if rel not in names or rel in edited or Path(rel).is_absolute() or ".." in parts or not parts:
            continue
        f = root / rel
        if f.is_symlink() or (f.exists() and not f.is_file()):
            continue
        if f.is_file():
            f.unlink()
            removed.append(rel)
        gone.append(rel)                                  # removed now, or already missing
    if not gone:
        return removed

    def forget(m: dict) -> None:
        for key in ("files", "stats", "previous"):
            for rel in gone:
                m[key].pop(rel, None)
    with _claim_lock:
        _update_marker(root, forget)
    top = root.resolve()
    for rel in removed:                                   # folders left empty, up to (not including) root
        d = (root / rel).parent
        while d.resolve() != top and d.resolve().is_relative_to(top):
            try:
                d.rmdir()
            except OSError:                               # not empty (or not ours to remove)
                break
            d = d.parent
    return removed


def check_output_file(path: str | os.PathLike | None, kind: str, flag: str = "--out") -> None:
    """Refuse to overwrite a file frozenvit did not write (JSON with our `frozenvit` key, PNG with our tEXt), and a
    sealed JSON (`write_json(..., sealed=True)`) whose content changed since it was written."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise _refuse(path, "is a folder, a file path is expected here", flag, cure=f"Give a file path as {flag}")
    if not path.exists():
        check_writable(path, flag)
        return
    if file_kind(path) != kind:
        raise _refuse(path, "exists and was not written by this frozenvit command", flag,
                      cure=f"Choose another {flag} file, or move that file away")
    if path.suffix.lower() != ".png" and not _seal_holds(json.loads(path.read_text())):
        raise _refuse(path, f"is an earlier {kind!r} output that changed after frozenvit wrote it (edited by hand?)",
                      flag, "frozenvit never overwrites a user's changes",
                      cure=f"Choose another {flag} file, or move that file away")


def file_kind(path: Path) -> str | None:
    """The `kind` frozenvit stamped into a JSON (whatever its name ends in) or PNG file it wrote, else None."""
    try:
        if path.suffix.lower() == ".png":
            from PIL import Image

            with Image.open(path) as im:
                return im.info.get("frozenvit")
        if path.stat().st_size > 1 << 30:     # no JSON output of ours is this large
            return None
        obj = json.loads(path.read_text())
        return obj.get("frozenvit") if isinstance(obj, dict) else None
    except Exception:   # unreadable: not ours
        return None


def config_digest(cfg: dict) -> str:
    """sha256 of a config as JSON with sorted keys: stored with the tensors, checked on load."""
    return hashlib.sha256(json.dumps(_finite(cfg), sort_keys=True, default=_json_default).encode()).hexdigest()


def tensor_metadata(cfg: dict) -> dict[str, str]:
    """safetensors metadata that ties a tensor file to its config.json."""
    return {"format": "pt", "frozenvit_config_sha256": config_digest(cfg)}


def sort_tensor_metadata(path: str | os.PathLike) -> None:
    """Rewrite the header of the safetensors file `path` with its "__metadata__" keys sorted: the same header
    otherwise (tensor entries in their order, so the data offsets stand), padded with spaces to its length.
    safetensors writes the metadata from a hash map, in an order that changes from one call to the next, so the same
    tensors and metadata would not always be the same bytes (nor have the same sha256) without it."""
    with open(path, "r+b") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))                                 # dicts keep the file's key order
        header["__metadata__"] = dict(sorted(header.get("__metadata__", {}).items()))
        text = json.dumps({"__metadata__": header.pop("__metadata__"), **header}, separators=(",", ":"),
                          ensure_ascii=False).encode()
        if len(text) <= n:                                              # a reordering: the length it had
            f.seek(8)
            f.write(text.ljust(n, b" "))
            return
        data = f.read()                                                 # other escapes made it longer: a new file
    text = text.ljust(-(-len(text) // 8) * 8, b" ")                     # safetensors aligns the data to 8 bytes
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


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


def atomic_write_bytes(path: str | os.PathLike, data: bytes, record: bool = True) -> None:
    """Write a single file atomically (temporary sibling, fsync, rename).

    Inside an output folder this process claimed (`output_dir`) its sha256 goes into the folder's marker, unless
    `record` is False (a file frozenvit appends to later, such as a journal).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if record:
        _check_overwrite(path)
    claim = _record_before(path, data) if record else None
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
    _record_after(claim, path)


def _check_overwrite(path: Path) -> None:
    """The last guard of a claimed output folder: refuse to replace a file there that its marker does not list
    (a user's file of the same name) or that changed since frozenvit wrote it."""
    if not (path.exists() or path.is_symlink()):
        return
    claim = _claiming_folder(path)
    if claim is None:
        return
    folder, rel = claim
    marker = read_marker(folder)
    if marker is None:
        return
    files, stats, earlier = (marker.get(k) if isinstance(marker.get(k), dict) else {}
                             for k in ("files", "stats", "previous"))
    if unlisted_files(folder, [rel], marker):
        why = f"exists and frozenvit did not write it (the {MARKER} of {folder} does not list it)"
    elif _differs(path, files[rel], stats.get(rel), earlier.get(rel)):
        why = "changed after frozenvit wrote it (edited by hand?)"
    else:
        return
    raise OutputConflict(f"{path} {why}; frozenvit never deletes or overwrites what it did not write. Move it "
                         "away, or choose another output folder")


def atomic_write_text(path: str | os.PathLike, text: str, record: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), record)


SEAL = "frozenvit_sha256"


def _content_digest(obj: dict) -> str:
    body = {k: v for k, v in obj.items() if k != SEAL}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _seal_holds(obj: Any) -> bool:
    """False only for a sealed JSON object whose content is not what was sealed."""
    return not (isinstance(obj, dict) and SEAL in obj) or obj[SEAL] == _content_digest(obj)


def write_json(path: str | os.PathLike, obj: Any, kind: str | None = None, sealed: bool = False) -> None:
    """Write JSON atomically; with `kind`, stamp {"frozenvit": kind} so a re-run may replace it. NaN -> null.

    `sealed` (a single-file output, with `kind`): also stamp the sha256 of the content, so that a re-run refuses
    to replace it once it was edited (`check_output_file`).
    """
    if kind is not None:
        obj = {"frozenvit": kind, **obj}
    obj = _finite(obj)
    if sealed:
        obj = json.loads(json.dumps(obj, default=_json_default))
        obj[SEAL] = _content_digest(obj)
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def verify_files(directory: str | os.PathLike) -> dict:
    """Check every file an artifact's marker lists against its recorded sha256; return the marker.

    Raises ArtifactError naming the first file that is missing or changed (a flipped byte, a NaN written into a
    tensor file, a config edited by hand), and for a folder without a marker or with a marker of an older format.
    """
    directory = Path(directory)
    marker = read_marker(directory)
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
