"""exchange: verify token-gradient exchangeability of group-relative RL objectives.

The public surface (THEORY.md is the spec):

- :class:`Rollout`: one batch of grouped responses, validated.
- :func:`token_coefficients`: ``kappa = -d loss / d logprobs``, float64, one backward pass.
- :func:`check` -> :class:`Report`: properties (Z), (E), (C) ..., mechanisms M1-M5,
  minimal counterexamples.
- ``exchange.strategies``: Hypothesis strategies for group configurations.
- ``exchange.objectives``: the catalog of published objectives.
- ``exchange.testing.assert_holds``: for a user's own pytest suite.
"""

from exchange.checker import check
from exchange.coefficients import token_coefficients
from exchange.errors import ExchangeError, InvalidArgument, ObjectiveError, RolloutError
from exchange.events import event_coefficients, events, shared_events
from exchange.properties import property_names
from exchange.report import Report
from exchange.rollout import Rollout

__all__ = [
    "Rollout",
    "token_coefficients",
    "check",
    "Report",
    "events",
    "event_coefficients",
    "shared_events",
    "property_names",
    "ExchangeError",
    "InvalidArgument",
    "RolloutError",
    "ObjectiveError",
]

__version__ = "0.1.0"
