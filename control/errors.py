"""Named errors of the control package. Each says what to do."""
from __future__ import annotations

from frozenvit.backbone.errors import FrozenVitError


class TaskError(FrozenVitError, ValueError):
    """Unknown Meta-World task name, or a task used in a way it does not support."""


class RenderUnavailable(FrozenVitError, RuntimeError):
    """No headless OpenGL context could be made (EGL/OSMesa libraries missing)."""


class DemoError(FrozenVitError, ValueError):
    """A demo directory or feature cache is missing, empty, or inconsistent."""


class PolicyError(FrozenVitError, ValueError):
    """Inputs that do not fit a built policy head: tokens of another grid or width, no CLS token for a CLS head,
    an attention map asked of a head without attention. A hyperparameter that no head can use, or that does not fit
    the encoder (heads that do not divide the token width, CLS pooling without a CLS token), is a ParameterError."""
