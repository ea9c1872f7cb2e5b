"""THEORY.md section 5 as data: each prediction is a per-run statistic and a direction.

A statistic maps one finished run (its ``init.json`` and ``metrics.jsonl``) to a
number. ``better = "lower"`` means the paper predicts the exchangeable (treatment) arm
has the lower value, so the paired difference is ``baseline - treatment``; ``"higher"``
gives ``treatment - baseline``. Either way the prediction says the difference is > 0.
``primary`` rows carry the verdicts; the others are reported as supporting evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from exchange.errors import InvalidArgument

__all__ = ["RunData", "Prediction", "PREDICTIONS"]


@dataclass(frozen=True)
class RunData:
    """One finished run: the warm-start metrics and the per-step rows."""

    init: dict[str, Any]
    rows: list[dict[str, Any]]
    target_accuracy: float
    where: str = ""

    def series(self, key: str) -> np.ndarray:
        """``[S]`` values of ``key`` on the rows that have it (None dropped). Empty when
        the metric was never defined (e.g. no group ever had two different rewards)."""
        if self.rows and key not in self.rows[-1] and key not in self.init:
            raise InvalidArgument(f"run {self.where}: no metric {key!r}; known: {', '.join(sorted(self.rows[-1]))}.")
        return np.asarray([r[key] for r in self.rows if r.get(key) is not None], dtype=np.float64)

    def final(self, key: str) -> float:
        s = self.series(key)
        return float(s[-1]) if len(s) else float("nan")


def _mean(key: str) -> Callable[[RunData], float]:
    def f(run: RunData) -> float:
        s = run.series(key)
        return float(s.mean()) if len(s) else float("nan")
    return f


def _abs_change(key: str) -> Callable[[RunData], float]:
    return lambda run: abs(run.final(key) - float(run.init[key]))


def _late_mean(key: str, frac: float = 0.25) -> Callable[[RunData], float]:
    def f(run: RunData) -> float:
        s = run.series(key)
        return float(s[-max(1, int(len(s) * frac)):].mean()) if len(s) else float("nan")
    return f


def _kl_share(run: RunData) -> float:
    """Mean of ``kl/shared_contexts / kl/all_contexts`` over steps where both exist."""
    vals = [r["kl/shared_contexts"] / r["kl/all_contexts"] for r in run.rows
            if r.get("kl/shared_contexts") is not None and r.get("kl/all_contexts")]
    return float(np.mean(vals)) if vals else float("nan")


def _final_accuracy(run: RunData) -> float:
    return float(run.series("eval/accuracy")[-3:].mean())


def samples_to_target(run: RunData) -> float:
    """Samples drawn when greedy accuracy first reached the target (0 if the warm start
    already did); runs that never reach it are censored at the total budget."""
    if run.init["eval/accuracy"] >= run.target_accuracy:
        return 0.0
    for r in run.rows:
        if r.get("eval/accuracy") is not None and r["eval/accuracy"] >= run.target_accuracy:
            return float(r["charts/samples"])
    return float(run.rows[-1]["charts/samples"])


@dataclass(frozen=True)
class Prediction:
    key: str
    claim: str
    statistic: str
    per_run: Callable[[RunData], float]
    better: str  # "lower" or "higher" for the exchangeable arm
    primary: bool


PREDICTIONS: tuple[Prediction, ...] = (
    Prediction("P1", "learning tax: less update norm on zero-credit events",
               "mean over steps of |g_zc| / (|g_zc| + |g_dec|) (tax/update_norm_share)",
               _mean("tax/update_norm_share"), "lower", True),
    Prediction("P1", "learning tax (coefficient level)",
               "mean over steps of the |K_e| share of zero-credit events (tax/event_share)",
               _mean("tax/event_share"), "lower", False),
    Prediction("P2", "drift of reward-irrelevant log-probs",
               "|final - initial| mean log-prob of template+filler tokens of fixed reference solutions",
               _abs_change("drift/zero_credit_logp"), "lower", True),
    Prediction("P2", "drift between equally rewarded solutions",
               "|final - initial| log-odds of short vs long correct reference solution",
               _abs_change("drift/short_vs_long_logodds"), "lower", False),
    Prediction("P2", "movement of shared contexts (Prop. 3.1, measured side)",
               "mean over steps of KL(pi_before || pi_after) at shared-event contexts",
               _mean("kl/shared_contexts"), "lower", False),
    Prediction("P2", "share of the policy's movement at shared contexts (step-size free)",
               "mean over steps of KL at shared-event contexts / KL at all contexts",
               _kl_share, "lower", False),
    Prediction("P3", "slower entropy collapse at weak-credit positions",
               "mean sampling entropy at template/filler positions over the last 25% of steps",
               _late_mean("entropy/weak_credit"), "higher", True),
    Prediction("P4", "sample efficiency",
               "samples until greedy accuracy >= target (censored at the budget)",
               samples_to_target, "lower", True),
    Prediction("P4", "final accuracy",
               "mean greedy accuracy over the last 3 evaluations",
               _final_accuracy, "higher", True),
)
