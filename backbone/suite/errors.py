"""The errors every part of the suite shares. Each says what went wrong and what to do about it.

The CLI turns a FrozenVitError into one line and exit status 2; anything else is a bug of ours.
"""
from __future__ import annotations


class FrozenVitError(Exception):
    """Base class of every error this suite raises on purpose (a user's mistake, with its cure)."""


class ArtifactError(FrozenVitError, RuntimeError):
    """A saved artifact is missing, corrupt, of another format version, or built on another backbone."""


class OutputConflict(FrozenVitError, FileExistsError):
    """An output path holds something frozenvit did not write (or another kind of artifact): it is left untouched."""


class UsageError(FrozenVitError, ValueError):
    """A command-line value that cannot be meant (`--step-size 0`, `--configs -3`, `--weights` without `--backbone`)."""
