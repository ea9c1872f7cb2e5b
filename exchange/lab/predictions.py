"""THEORY.md section 5 as data: each prediction is a paired statistic and a direction.

A statistic maps one finished run (its ``init.json`` and ``metrics.jsonl``) to a
number. ``better = "lower"`` means the theory predicts the exchangeable (treatment) arm
has the lower value, so the paired difference is ``baseline - treatment``; ``"higher"``
gives ``treatment - baseline``; ``"signed"`` multiplies ``baseline - treatment`` by the
sign T3/T4 predict for the baseline's drift, computed from the baseline run itself
(:func:`predicted_drift_sign`). Either way the prediction says the difference is > 0.

``sesoi`` is the smallest effect of interest (in the statistic's units) for the
equivalence test: a well-powered difference smaller than it refutes the prediction.
``primary`` rows carry the verdicts (Holm-corrected together); the others are reported
as supporting evidence.

What each primary statistic measures (issue 14):

- P1: ``||sum_{e shared} K_e grad l_e|| / ||g||``, the share of the update norm on shared
  events (the events exchangeability cancels), not the single-occurrence filler.
- P2: the *signed* change of ``log p(S | prompt, template)`` at fixed probe contexts.
- P3: next-token entropy at fixed weak-credit probe contexts (same contexts every eval).
- P4: area under the greedy-accuracy curve (mean over evaluations, warm start included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from exchange.core.metric_keys import SHARED_RESIDUAL
from exchange.errors import InvalidArgument

__all__ = ["RunData", "Prediction", "PREDICTIONS", "predicted_drift_sign", "MANIPULATION_KEY", "KL_KEY"]

MANIPULATION_KEY = SHARED_RESIDUAL
"""The manipulation check: the treatment must have removed the mechanism (its shared
residual, :data:`exchange.core.metric_keys.SHARED_RESIDUAL`, ~ 0)."""
KL_KEY = "kl/all_contexts"
"""Trust-region match: mean KL(pi_before || pi_after) per step, compared between arms."""


@dataclass(frozen=True)
class RunData:
    """One finished run: the warm-start metrics and the per-step rows."""

    init: dict[str, Any]
    rows: list[dict[str, Any]]
    target_accuracy: float
    where: str = ""
    mechanism: str = ""

    def series(self, key: str) -> np.ndarray:
        """``[S]`` values of ``key`` on the rows that have it (None dropped). Empty when
        the metric was never defined (e.g. no group ever had two different rewards).

        A key counts as known when *any* row logged it: TRL logs some metrics (``reward``)
        only on the first optimizer step of each rollout, so the last row may lack them."""
        if self.rows and key not in self.init and not any(key in r for r in self.rows):
            known = sorted({k for r in self.rows for k in r})
            raise InvalidArgument(f"run {self.where}: no metric {key!r}; known: {', '.join(known)}.")
        return np.asarray([r[key] for r in self.rows if r.get(key) is not None], dtype=np.float64)

    def final(self, key: str) -> float:
        s = self.series(key)
        return float(s[-1]) if len(s) else float("nan")


def _mean(key: str) -> Callable[[RunData], float]:
    def f(run: RunData) -> float:
        s = run.series(key)
        return float(s.mean()) if len(s) else float("nan")
    return f


def _change(key: str) -> Callable[[RunData], float]:
    """Signed ``final - initial`` of a fixed-context probe."""
    return lambda run: run.final(key) - float(run.init[key])


def _late_mean(key: str, frac: float = 0.25) -> Callable[[RunData], float]:
    def f(run: RunData) -> float:
        s = run.series(key)
        return float(s[-max(1, int(len(s) * frac)):].mean()) if len(s) else float("nan")
    return f


def accuracy_auc(run: RunData) -> float:
    """Mean greedy accuracy over the evaluations, the warm start included (area under the
    accuracy curve per eval interval; every eval uses the same fixed eval set)."""
    s = run.series("eval/accuracy")
    return float(np.concatenate([[run.init["eval/accuracy"]], s]).mean())


def _final_accuracy(run: RunData) -> float:
    return float(run.series("eval/accuracy")[-3:].mean())


def predicted_drift_sign(baseline: RunData) -> float:
    """The sign T3/T4 predict for the shared-event drift of the baseline arm, from the
    run's own data: for M3 (per-sequence normalisation, T3) the sign of the mean
    within-group ``cov(R, 1/L)``; otherwise (T4, T1) the sign of the mean signed shared
    coefficient ``sum_{shared} K_e`` at the style token. 0 when undefined."""
    key = "len/cov_reward_inv_len" if baseline.mechanism.strip().upper().startswith("M3") else "tax/style_K_signed"
    s = baseline.series(key)
    return float(np.sign(s.mean())) if len(s) else 0.0


@dataclass(frozen=True)
class Prediction:
    key: str
    claim: str
    statistic: str
    per_run: Callable[[RunData], float]
    better: str  # "lower", "higher" (for the exchangeable arm) or "signed" (see the module)
    primary: bool
    sesoi: float | None = None


PREDICTIONS: tuple[Prediction, ...] = (
    Prediction("P1", "learning tax: less of the update on shared events",
               "mean over minibatches of ||sum_shared K_e grad l_e|| / ||g|| (tax/shared_update_share)",
               _mean("tax/shared_update_share"), "lower", True, sesoi=0.02),
    Prediction("P1", "learning tax (coefficient level, all zero-credit events)",
               "mean over steps of the |K_e| share of zero-credit events (tax/event_share)",
               _mean("tax/event_share"), "lower", False),
    Prediction("P2", "signed drift of the shared style token, in the direction T3/T4 predict",
               "sign x (final - initial) log p(S | prompt, template) at fixed probe contexts",
               _change("drift/style_logp"), "signed", True, sesoi=0.05),
    Prediction("P2", "signed drift of the template",
               "sign x (final - initial) mean template log-prob at fixed probe contexts",
               _change("drift/template_logp"), "signed", False),
    Prediction("P2", "signed drift of a fixed reference solution",
               "sign x (final - initial) total log-prob of the fixed reference solutions",
               _change("drift/ref_seq_logp"), "signed", False),
    Prediction("P3", "slower entropy collapse at fixed weak-credit contexts",
               "mean next-token entropy at fixed template/S/filler probe contexts, last 25% of evals",
               _late_mean("entropy/fixed_weak_credit"), "higher", True, sesoi=0.02),
    Prediction("P4", "sample efficiency (area under the accuracy curve)",
               "mean greedy accuracy over evaluations incl. the warm start",
               accuracy_auc, "higher", True, sesoi=0.02),
    Prediction("P4", "final accuracy",
               "mean greedy accuracy over the last 3 evaluations",
               _final_accuracy, "higher", False),
    # Greedy accuracy saturates where argmax is easy to get right (the tabular control
    # reaches 1.0 at its warm start while sampling still fails); the sampled reward of the
    # training rollouts (the same prompt stream in both arms) still measures learning.
    Prediction("P4", "sample efficiency at temperature 1",
               "mean sampled training reward over steps (charts/reward)",
               _mean("charts/reward"), "higher", False),
)
