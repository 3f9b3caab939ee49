"""The errors every part of the suite shares. Each says what went wrong and what to do about it.

The CLI turns a FrozenVitError into one line and exit status 2; anything else is a bug of ours.
"""
from __future__ import annotations

from sklearn.exceptions import NotFittedError  # noqa: F401  (re-exported: "not fitted" is sklearn's error everywhere)
from sklearn.utils._param_validation import InvalidParameterError


class FrozenVitError(Exception):
    """Base class of every error this suite raises on purpose (a user's mistake, with its cure)."""


class ArtifactError(FrozenVitError, RuntimeError):
    """A saved artifact is missing, corrupt, of another format version, or built on another backbone."""


class OutputConflict(FrozenVitError, FileExistsError):
    """An output path holds something frozenvit did not write (or another kind of artifact): it is left untouched."""


class UsageError(FrozenVitError, ValueError):
    """A command-line value that cannot be meant (`--step-size 0`, `--configs -3`, `--weights` without `--backbone`)."""


class ParameterError(FrozenVitError, InvalidParameterError):
    """A hyperparameter no estimator can use (`k=0`, `pooling="max"`). The one class for it in every estimator.

    A subclass of scikit-learn's InvalidParameterError (itself a ValueError and TypeError), which is what
    `_parameter_constraints` raises: `except InvalidParameterError` catches both.
    """


class ParameterErrorMixin:
    """Makes a scikit-learn estimator's bad hyperparameter a ParameterError.

    scikit-learn's `_validate_params` checks `_parameter_constraints` and raises its own InvalidParameterError;
    this override raises ParameterError with the same message instead, so that `except ParameterError` catches
    every bad hyperparameter of the estimator, a range (`coreset_ratio=0`) as much as a combination. Put it before
    BaseEstimator in the bases: `class PatchCore(ParameterErrorMixin, BaseEstimator)`.
    """

    def _validate_params(self) -> None:
        try:
            super()._validate_params()                      # type: ignore[misc]
        except ParameterError:
            raise
        except InvalidParameterError as e:
            raise ParameterError(str(e)) from e
