"""THEORY.md section 5 as data: each prediction is a paired statistic, an arm to compare
against and an orientation.

A statistic maps one finished run (its ``init.json`` and ``metrics.jsonl``) to a
number. ``against`` names the arm the baseline is compared with: ``"surgical"`` (the
pathway test: only the shared-event residual removed) or ``"treatment"`` (the
restoring transformation: the method test). ``orient``:

- ``"pilot"``: ``d = sign * (baseline - other)`` with the sign frozen by the pilot at the
  probe event (:mod:`exchange.lab.pilot`); the prediction says ``d > 0``;
- ``"lower"``: ``d = baseline - other`` (the other arm is predicted lower);
- ``"higher"``: ``d = other - baseline``.

``primary`` rows carry the verdicts (:mod:`exchange.lab.verdict`); the others are
reported with their interval only.

What each primary statistic measures:

- P1: ``||sum_{e shared} K_e grad l_e|| / ||g||``, the share of the update norm on shared
  events (the events exchangeability cancels).
- P2: the signed change of ``log p(S | prompt, template)`` at fixed probe contexts.
- P3: the signed change of the next-token entropy at the fixed weak-credit probe
  contexts (template, S and filler positions of the probes).
- P4: area under the greedy-accuracy curve (mean over evaluations, warm start included).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from exchange.core import metric_keys as mk
from exchange.core.metric_keys import SHARED_RESIDUAL
from exchange.errors import InvalidArgument
from exchange.lab.runlog import check_steps, read_metrics

__all__ = ["KL_KEY", "MANIPULATION_KEY", "ROLLOUT_HASH", "PREDICTIONS", "Prediction", "RunData", "read_run"]

MANIPULATION_KEY = SHARED_RESIDUAL
"""The manipulation check: the treatment must have removed the mechanism (its shared
residual, :data:`exchange.core.metric_keys.SHARED_RESIDUAL`, ~ 0)."""
KL_KEY = mk.KL_CONTROL
"""Trust-region match: mean KL(pi_before || pi_after) per step on the control contexts
(neither shared nor probe contexts, :mod:`exchange.lab.klstep`), compared between arms."""
ROLLOUT_HASH = mk.ROLLOUT_HASH
"""Per step, a hash of the rollout an arm trained on (:func:`exchange.lab.trainer.rollout_hash`):
with ``[train] common_rollouts`` every arm's must equal the baseline's."""


def read_run(d) -> "RunData":
    """The finished run in directory ``d`` (``init.json``, ``metrics.jsonl`` checked
    against ``done.json``'s step count)."""
    d = Path(d)
    if not (d / "done.json").exists():
        raise InvalidArgument(f"run_dir={str(d)!r} is unfinished; finish it with `exchange experiment run CONFIG` "
                              "(it resumes).")
    rows = read_metrics(d / "metrics.jsonl")
    check_steps(rows, json.loads((d / "done.json").read_text())["steps"], str(d))
    return RunData(init=json.loads((d / "init.json").read_text()), rows=rows, target_accuracy=0.0, where=str(d))


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
    """Signed ``final - initial`` of a fixed-context probe (NaN where the probe has no
    position, e.g. the template's log-prob when the template ends the prompt)."""
    return lambda run: float("nan") if run.init.get(key) is None else run.final(key) - float(run.init[key])


def _late_mean(key: str, frac: float = 0.25) -> Callable[[RunData], float]:
    def f(run: RunData) -> float:
        s = run.series(key)
        return float(s[-max(1, int(len(s) * frac)):].mean()) if len(s) else float("nan")
    return f


def accuracy_auc(run: RunData) -> float:
    """Mean greedy accuracy over the evaluations, the warm start included (area under the
    accuracy curve per eval interval; every eval uses the same fixed eval set)."""
    s = run.series(mk.EVAL_ACCURACY)
    return float(np.concatenate([[run.init[mk.EVAL_ACCURACY]], s]).mean())


def _final_accuracy(run: RunData) -> float:
    return float(run.series(mk.EVAL_ACCURACY)[-3:].mean())


@dataclass(frozen=True)
class Prediction:
    key: str
    claim: str
    statistic: str
    per_run: Callable[[RunData], float]
    against: str  # "surgical" or "treatment" (see the module)
    orient: str  # "pilot", "lower" or "higher" (see the module)
    primary: bool


PREDICTIONS: tuple[Prediction, ...] = (
    Prediction("P1", "learning tax: less of the update on shared events",
               "mean over minibatches of ||sum_shared K_e grad l_e|| / ||g|| (tax/shared_update_share)",
               _mean(mk.SHARED_UPDATE_SHARE), "treatment", "lower", True),
    Prediction("P1", "learning tax (coefficient level, all zero-credit events)",
               "mean over steps of the |K_e| share of zero-credit events (tax/event_share)",
               _mean(mk.EVENT_SHARE), "treatment", "lower", False),
    Prediction("P2", "signed drift of the shared style token S, in the direction its signed K predicts",
               "sign x (final - initial) log p(S | prompt, template) at fixed probe contexts",
               _change(mk.DRIFT_STYLE), "surgical", "pilot", True),
    Prediction("P2", "signed drift of the template",
               "sign x (final - initial) mean template log-prob at fixed probe contexts",
               _change(mk.DRIFT_TEMPLATE), "surgical", "pilot", False),
    Prediction("P3", "entropy at fixed weak-credit contexts moves the way the signed K at S predicts",
               "sign x (final - initial) next-token entropy at fixed template/S/filler probe contexts",
               _change(mk.ENTROPY_FIXED_WEAK_CREDIT), "surgical", "pilot", True),
    Prediction("P4", "sample efficiency (area under the accuracy curve)",
               "mean greedy accuracy over evaluations incl. the warm start",
               accuracy_auc, "treatment", "higher", True),
    Prediction("P4", "final accuracy",
               "mean greedy accuracy over the last 3 evaluations",
               _final_accuracy, "treatment", "higher", False),
    Prediction("P4", "sample efficiency at temperature 1",
               "mean sampled training reward over steps (charts/reward)",
               _mean(mk.REWARD), "treatment", "higher", False),
)
