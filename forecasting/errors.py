"""Named errors of the forecasting application."""
from __future__ import annotations

from frozenvit.backbone.suite.errors import FrozenVitError


class SeriesError(FrozenVitError, ValueError):
    """A series cannot be used as given: unsorted or duplicate timestamps, irregular spacing,
    NaN or gaps, or too short for the look-back plus horizon. The message names the series
    and the place, and says what to do."""
