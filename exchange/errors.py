"""One root error class; every message names the field, the value and the fix.

Modelled on Hypothesis's ``InvalidArgument``: ``name=value`` plus what to do instead.
Dependency-free, as the lowest layer must be (Hypothesis's own ``errors.py`` imports
nothing): the public strategies, the one place that raises into Hypothesis, convert at
that boundary (:class:`exchange.checker.strategies.InvalidStrategyArgument` is both this
``InvalidArgument`` and Hypothesis's).
"""

from __future__ import annotations


class ExchangeError(Exception):
    """Root of every error this package raises on purpose."""


class InvalidArgument(ExchangeError, ValueError):
    """A function or command was called with an argument it cannot accept."""


class RolloutError(InvalidArgument):
    """A ``Rollout`` field has the wrong shape, dtype, or value."""


class ObjectiveError(ExchangeError):
    """An objective (``loss_fn``) failed, returned a non-scalar, or has no gradient path."""
