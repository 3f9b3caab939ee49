"""Two writes of one artifact path at once: the later is refused while the first runs, and neither the first's
temporary folder nor its result is lost (`atomic_dir` holds a lock on its temporary)."""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from frozenvit.backbone.suite.artifacts import _siblings, atomic_dir, check_artifact_dir, read_marker
from frozenvit.backbone.suite.errors import OutputConflict

pytest.importorskip("fcntl")


def _slow_write(target: str, started: "mp.synchronize.Event", release: "mp.synchronize.Event") -> None:
    with atomic_dir(target, "test.kind") as tmp:
        (tmp / "a.txt").write_text("first")
        started.set()
        release.wait(30)
        (tmp / "b.txt").write_text("first")


def _start_slow_write(target: Path) -> tuple["mp.process.BaseProcess", "mp.synchronize.Event"]:
    """A process writing `target` that has begun and waits for the event returned (set it to let it finish)."""
    ctx = mp.get_context("fork")
    started, release = ctx.Event(), ctx.Event()
    first = ctx.Process(target=_slow_write, args=(str(target), started, release))
    first.start()
    assert started.wait(30)
    return first, release


def test_second_write_while_first_runs_is_refused_and_first_lands(tmp_path: Path) -> None:
    target = tmp_path / "out"
    first, release = _start_slow_write(target)
    try:
        with pytest.raises(OutputConflict, match="being written by another frozenvit run"):
            check_artifact_dir(target, "test.kind")
        with pytest.raises(OutputConflict, match="being written by another frozenvit run"):
            with atomic_dir(target, "test.kind") as tmp:
                (tmp / "a.txt").write_text("second")
        assert len(_siblings(target, "tmp")) == 1          # the first's temporary is still there
    finally:
        release.set()
        first.join(30)
    assert first.exitcode == 0
    assert (target / "a.txt").read_text() == "first" and (target / "b.txt").read_text() == "first"
    assert set(read_marker(target)["files"]) == {"a.txt", "b.txt"}


def test_killed_write_temporary_is_still_cleaned(tmp_path: Path) -> None:
    target = tmp_path / "out"
    first, _ = _start_slow_write(target)
    os.kill(first.pid, 9)
    first.join(30)
    assert len(_siblings(target, "tmp")) == 1          # left by the killed write, its lock gone with it
    with atomic_dir(target, "test.kind") as tmp:
        (tmp / "a.txt").write_text("second")
    assert (target / "a.txt").read_text() == "second"
    assert _siblings(target, "tmp") == []


def test_sequential_writes_replace_as_before(tmp_path: Path) -> None:
    target = tmp_path / "out"
    for text in ("one", "two"):
        with atomic_dir(target, "test.kind") as tmp:
            (tmp / "a.txt").write_text(text)
        time.sleep(0.01)
    assert (target / "a.txt").read_text() == "two"
    assert _siblings(target, "tmp") == [] and _siblings(target, "old") == []


def _hold_temporary(path: str, held: "mp.synchronize.Event", release: "mp.synchronize.Event") -> None:
    import fcntl

    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    held.set()
    release.wait(30)
    os.close(fd)


def test_two_writes_that_passed_the_early_check_together_the_later_gives_way(tmp_path: Path) -> None:
    """Ordered by when each temporary was made, not by its folder's mtime, which the earlier write's files move."""
    from frozenvit.backbone.suite.artifacts import _new_temporary, _refuse_running

    target = tmp_path / "out"
    first = _new_temporary(target, "tmp")
    ctx = mp.get_context("fork")
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_temporary, args=(str(first), held, release))
    holder.start()
    try:
        assert held.wait(30)
        time.sleep(0.05)
        second = _new_temporary(target, "tmp")
        time.sleep(0.05)
        (first / "written-later.bin").write_bytes(b"x")     # the first write goes on: its folder's mtime moves on
        with pytest.raises(OutputConflict, match="being written by another frozenvit run"):
            _refuse_running(target, "--out", mine=second)
    finally:
        release.set()
        holder.join(30)
