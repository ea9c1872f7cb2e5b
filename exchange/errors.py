"""One root error class; every message names the field, the value and the fix.

Modelled on Hypothesis's ``InvalidArgument``: ``name=value`` plus what to do instead.
"""

from __future__ import annotations

# Hypothesis is a hard dependency (the checker is built on it), so the core may import
# its error module; tools that catch Hypothesis's InvalidArgument catch ours too.
from hypothesis.errors import InvalidArgument as _HypothesisInvalidArgument


class ExchangeError(Exception):
    """Root of every error this package raises on purpose."""


class InvalidArgument(ExchangeError, ValueError, _HypothesisInvalidArgument):
    """A function or command was called with an argument it cannot accept.

    Also a ``hypothesis.errors.InvalidArgument``, as the strategies raise it."""


class RolloutError(InvalidArgument):
    """A ``Rollout`` field has the wrong shape, dtype, or value."""


class ObjectiveError(ExchangeError):
    """An objective (``loss_fn``) failed, returned a non-scalar, or has no gradient path."""
