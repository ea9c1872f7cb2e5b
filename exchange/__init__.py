"""exchange: verify token-gradient exchangeability of group-relative RL objectives.

The public surface (THEORY.md is the spec):

- :class:`Rollout`: one batch of grouped responses, validated.
- :func:`token_coefficients`: ``kappa = -d loss / d logprobs``, float64, one backward pass.
- :func:`events`, :func:`event_coefficients`, :func:`shared_events`,
  :func:`shared_residual`: events, their coefficients ``K_e``, and the share of
  shared-event mass that does not cancel; :func:`shared_residual_parts` gives it with
  its parts (:class:`SharedResidual`: ``abs_K``, ``mass``, ``events``, ``.value``).
- :func:`inspect`: one real batch, exactly (no fuzzing): shared events, ``K_e``, the
  shared residual, per-group weight vectors, offending events, mechanism hints.
- :func:`check` -> :class:`Report`: properties (Z), (E), (C) ..., mechanisms M1-M8,
  minimal counterexamples.
- ``exchange.strategies``: Hypothesis strategies for group configurations.
- ``exchange.objectives``: the catalog of published objectives.
- :func:`compose` -> :class:`Composition`: an objective described by parts (estimator,
  shaping, weight, clip, aggregation, additive term, mask, precision), a ``loss_fn``
  whose verdict is derived from its parts (``.expected()``), to set beside ``check``'s.
- ``exchange.testing.assert_holds``: for a user's own pytest suite.

Names are imported on first use, so ``import exchange`` (and the CLI's ``--help``) does
not pay for torch or Hypothesis until something needs them.
"""

import importlib as _importlib

from exchange.core.distribution import VERSION as __version__  # written once, there

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "Rollout": "exchange.core.rollout",
    "token_coefficients": "exchange.core.coefficients",
    "events": "exchange.core.events",
    "event_coefficients": "exchange.core.events",
    "shared_events": "exchange.core.events",
    "shared_residual": "exchange.core.events",
    "shared_residual_parts": "exchange.core.events",
    "SharedResidual": "exchange.core.events",
    "check": "exchange.checker.checking",
    "inspect": "exchange.checker.batch_analysis",
    "Report": "exchange.checker.report",
    "property_names": "exchange.checker.properties",
    "compose": "exchange.objectives.composition",
    "Composition": "exchange.objectives.composition",
    "ExchangeError": "exchange.errors",
    "InvalidArgument": "exchange.errors",
    "RolloutError": "exchange.errors",
    "ObjectiveError": "exchange.errors",
}
# public submodules reachable as attributes: exchange.strategies, exchange.objectives
_SUBMODULES: dict[str, str] = {
    "strategies": "exchange.checker.strategies",
    "objectives": "exchange.objectives",
}

__all__ = [*_EXPORTS, *_SUBMODULES]


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        value = getattr(_importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = _importlib.import_module(_SUBMODULES[name])
    else:
        raise AttributeError(f"module 'exchange' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
