"""The metric keys exchange's instruments log, one key per quantity, defined once.

The training integrations (:mod:`exchange.libraries.trl`: ``ExchangeCallback`` and
``ExchangeGRPOTrainer``) and the lab (:mod:`exchange.lab.instruments`, the CPU harness and
the TRL runs of :mod:`exchange.lab.llm_run`) import these names instead of spelling the
strings, so a quantity has the same key in a TRL ``log_history``, in every ``report_to``
backend and in a lab run's ``metrics.jsonl``, and the lab's reports
(:data:`exchange.lab.predictions.MANIPULATION_KEY`) read it under that key.

Every key the lab wrote before these names were unified is unchanged (its runs stay
readable as they are). The TRL integrations logged ``exchange/shared_residual``,
``exchange/shared_events``, ``exchange/p1_share``, ``exchange/learning_tax`` and
``exchange/learning_tax_skipped`` until issue 29; TRL logs are not read back by exchange.
"""

from __future__ import annotations

__all__ = [
    "SHARED_RESIDUAL",
    "SHARED_EVENTS",
    "SHARED_KAPPA_SHARE",
    "LEARNING_TAX",
    "LEARNING_TAX_SKIPPED",
    "INTEGRATION_KEYS",
]

SHARED_RESIDUAL = "tax/shared_residual"
""":func:`exchange.core.events.shared_residual` of the batch: the share of the coefficient
mass on shared events that does not cancel (the lab's manipulation check)."""

SHARED_EVENTS = "tax/shared_events"
"""The number of shared events in the batch (:attr:`~exchange.core.events.SharedResidual.events`)."""

SHARED_KAPPA_SHARE = "tax/shared_kappa_share"
"""P1 in coefficient space: ``sum |kappa|`` over the occurrences of shared events
(:attr:`~exchange.core.events.SharedResidual.mass`) over ``sum |kappa|`` over all tokens."""

LEARNING_TAX = "tax/learning_tax"
""":attr:`exchange.paramspace.LearningTax.tax`: the update-norm share of zero-credit
occurrences (one extra backward pass; ``ExchangeGRPOTrainer(learning_tax=True)``)."""

LEARNING_TAX_SKIPPED = "tax/learning_tax_skipped"
"""1 for each batch whose learning tax was undefined (a zero update) and not logged."""

INTEGRATION_KEYS: tuple[str, ...] = (SHARED_RESIDUAL, SHARED_EVENTS, SHARED_KAPPA_SHARE, LEARNING_TAX,
                                     LEARNING_TAX_SKIPPED)
"""The keys the library integrations log (a lab run keeps them under these names)."""
