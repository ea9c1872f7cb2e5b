"""(C) shared-event cancellation (THEORY.md section 2): ``K_e == 0`` for every event that
occurs in every response of its group, on arbitrary groups of either regime (T1, T3, T4).
"""

from __future__ import annotations

import torch

from exchange.checker import generators
from exchange.checker.cases import build
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout, placeholder
from exchange.checker.properties.base import BatchInputs, BatchResult, Evaluation, Property, configurations
from exchange.checker.properties.residuals import (cancellation, cancellation_mismatches, reference_rewards,
                                                      tied_groups, with_reference_rewards)
from exchange.checker.tolerances import RTOL_CANCEL
from exchange.core.coefficients import Engine
from exchange.core.events import events
from exchange.core.vocabulary import Regime

NAME = "shared_cancellation"


def any_groups(d: Draw, regime: str, first: tuple[str, ...] | None = None) -> Layout:
    """1-4 arbitrary groups in ``regime``, sometimes with a generation limit at the
    longest response (those responses count as truncated). Shared by the properties
    fuzzed over arbitrary batches; ``first``: the reward kinds of group 0."""
    groups = [generators.group(d) for _ in range(d.integer(1, 4))]
    off = Regime(regime).off_policy
    case = generators.case(d, [placeholder(g) for g in groups], off)
    kinds = [generators.REWARD_KINDS] * len(groups)
    if first is not None:
        kinds[0] = first
    return Layout(Example(case), tuple(kinds), (False,) * len(groups))


def layout(d: Draw, regime: str) -> Layout:
    return any_groups(d, regime)


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    (kappa,) = engine([rollout])
    ev = events(rollout)
    tied = tied_groups(rollout.rewards[None], rollout)
    informative = bool((ev.shared & ~tied[0][ev.group]).any())
    res = float(cancellation(kappa[None], ev, ev.shared)[0])
    if res > RTOL_CANCEL:  # judged again against the magnitudes of mixed rewards (round-off per event)
        (ref,) = engine([with_reference_rewards(rollout)])
        res = float(cancellation(kappa[None], ev, ev.shared, ref[None])[0])
    return Evaluation(res, informative, rollout, kappa, cancellation_mismatches(rollout, kappa, ev, ev.shared, RTOL_CANCEL))


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    _, kappa, failed = b.coefficients(rollout, fields)
    ev = events(rollout)
    tied = tied_groups(b.rewards, rollout)
    res = cancellation(kappa, ev, ev.shared)
    todo = (res > RTOL_CANCEL).nonzero().flatten()
    if todo.numel():  # judged again against the magnitudes of mixed rewards (round-off per event)
        sub = {k: v[todo] for k, v in fields.items()}
        rewards = b.rewards[todo]
        _, ref, _ = b.coefficients(rollout, {**sub, "rewards": reference_rewards(rewards, rollout)})
        res = res.clone()
        res[todo] = cancellation(kappa[todo], ev, ev.shared, ref)
    informative = (ev.shared[None] & ~tied[:, ev.group]).any(1)
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), informative | failed)


PROPERTY = Property(
    name=NAME,
    tolerance=RTOL_CANCEL,
    layout=layout,
    evaluate=evaluate,
    evaluate_batch=evaluate_batch,
)
