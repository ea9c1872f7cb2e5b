"""The loss and every coefficient are finite: tied rewards, length-1 responses and far
ratios included (a guard, not a property of THEORY.md)."""

from __future__ import annotations

import torch

from exchange.checker.cases import build
from exchange.checker.examples import Example
from exchange.checker.properties.base import BatchInputs, BatchResult, Evaluation, Property, configurations
from exchange.checker.properties.shared_cancellation import any_groups
from exchange.core.coefficients import Engine, loss_and_coefficients

NAME = "finite"


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    loss, kappa = loss_and_coefficients(engine.loss_fn, rollout.logprobs, rollout)
    finite = bool(torch.isfinite(loss)) and bool(torch.isfinite(kappa).all())
    mism = []
    if not finite:
        bad = torch.nonzero(~torch.isfinite(kappa))[:4].tolist()
        overflow = bool(torch.isinf(loss)) or bool(torch.isinf(kappa).any())
        if overflow and not bool(torch.isnan(kappa).any()) and not bool(torch.isnan(loss)):
            mism = [
                f"overflow: loss={float(loss):.6g} (|loss| beyond float64's 1.8e308); non-finite kappa at {bad}. "
                "The loss's scale is out of range (a huge constant factor?)"
            ]
        else:
            mism = [f"loss={float(loss):.6g}, non-finite kappa at {bad}"]
    return Evaluation(0.0 if finite else float("inf"), True, rollout, kappa, mism)


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    loss, kappa, failed = b.coefficients(rollout, fields)
    ok = torch.isfinite(loss) & torch.isfinite(kappa).flatten(1).all(1) & ~failed
    res = torch.where(ok, torch.zeros_like(loss), torch.full_like(loss, float("inf")))
    return BatchResult(res, torch.ones_like(ok))


PROPERTY = Property(name=NAME, tolerance=0.0, layout=any_groups, evaluate=evaluate, evaluate_batch=evaluate_batch)
