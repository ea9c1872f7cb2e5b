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
from exchange.checker.properties.residuals import (cancellation, cancellation_mismatches, conditioning, judged_by_response,
                                                      lifted_ties, per_event, reference_rewards, tied_groups, tied_level,
                                                      with_reference_rewards)
from exchange.checker.tolerances import RTOL_CANCEL, TINY, at_precision
from exchange.core.coefficients import Engine
from exchange.core.events import Events, events
from exchange.core.vocabulary import PROPERTY_SUMMARIES, Regime

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


# The sizes of the moves of a tied group's rewards (times sqrt(eps) (|R| + 1)): a
# rounding of the group's mean is one of a few discrete values (0 or half an ulp for two
# responses), which one move keeps about half the time; five sizes rarely all keep it
# (with three, float32 z-scores of shaped tied groups still read as broken in 2 of 4
# compositions where five leave 1). At most twice the first move, so the floor that a
# centre which is not the group's own sets (it follows the move) stays within a factor 2
# of one move's, under the same ceiling.
_LIFTS = (1.0, 1.25, 1.5, 1.75, 2.0)


def _judged(kappa: torch.Tensor, ev: Events, tied: torch.Tensor, reference: torch.Tensor, lifts: list[torch.Tensor],
            level: torch.Tensor, cond: torch.Tensor, precision: str) -> torch.Tensor:
    """``[K]``: the residual of configurations that failed at first (``kappa``,
    ``reference`` and each of ``lifts`` ``[K, N, T]``; ``tied [K, G]``), per event against the larger
    of its own mass and the mass at reference rewards (round-off per event), in units of
    the rewards' conditioning ``cond [K]``
    (:func:`~exchange.checker.properties.residuals.conditioning`: centred advantages are
    differences of rewards of size ``max|R|``, and round off by that much); a shared
    event of a tied group also against its ``K_e``'s largest response to the tied groups'
    rewards moved as one by :data:`_LIFTS` times ``sqrt(eps)``
    (:func:`~exchange.checker.properties.residuals.lifted_ties`):
    a tied group's advantages are 0 in exact arithmetic, and what a std of ~0 plus a small
    epsilon makes of their round-off moves with the move; or against the round-off of
    the tied rewards' own size, ``level [K]``
    (:func:`~exchange.checker.properties.residuals.tied_level`): copies of one response
    whose equal shaped rewards round off their low-precision mean all keep one advantage
    of one sign, the same before and after a move that keeps the rounding. Other events
    are not judged by either: neither reaches them."""
    K, mass, res = per_event(kappa, ev, reference)  # K is kappa's own; mass and res at least the reference's
    on_tied = ev.shared[None] & tied[:, ev.group]  # [K, E]
    others = torch.where(ev.shared[None] & ~on_tied, res, torch.zeros_like(res)).amax(1) / cond
    raw = torch.where(on_tied, res, torch.zeros_like(res)).amax(1)
    response = torch.zeros_like(raw)
    for lift in lifts:
        K_lift, mass_lift, _ = per_event(lift, ev)
        moved = (K_lift - K).abs() / torch.maximum(mass, mass_lift).clamp(min=TINY)
        response = torch.maximum(response, torch.where(on_tied, moved, torch.zeros_like(res)).amax(1))
    tol = at_precision(RTOL_CANCEL, precision)
    judged = torch.minimum(judged_by_response(raw, response, tol, precision), raw / level)
    return torch.maximum(others, judged)


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    (kappa,) = engine([rollout])
    ev = events(rollout)
    tied = tied_groups(rollout.rewards[None], rollout)
    informative = bool((ev.shared & ~tied[0][ev.group]).any())
    res = float(cancellation(kappa[None], ev, ev.shared)[0])
    if res > RTOL_CANCEL:  # judged again against the magnitudes of mixed rewards (round-off per event)
        rewards = rollout.rewards[None]
        ref, *lifts = engine([with_reference_rewards(rollout)]
                             + [rollout.with_fields({"rewards": lifted_ties(rewards, tied[:, rollout.group_index],
                                                                            engine.precision, size)[0]})
                                for size in _LIFTS])
        level = tied_level(rewards, tied, rollout, engine.precision)
        cond = conditioning([rewards], rollout, engine.precision)
        res = float(_judged(kappa[None], ev, tied, ref[None], [lift[None] for lift in lifts], level, cond,
                            engine.precision)[0])
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
        lifts = [b.coefficients(rollout, {**sub, "rewards": lifted_ties(rewards, tied[todo][:, rollout.group_index],
                                                                         b.precision, size)})[1] for size in _LIFTS]
        res = res.clone()
        res[todo] = _judged(kappa[todo], ev, tied[todo], ref, lifts, tied_level(rewards, tied[todo], rollout, b.precision),
                            conditioning([rewards], rollout, b.precision), b.precision)
    informative = (ev.shared[None] & ~tied[:, ev.group]).any(1)
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), informative | failed)


PROPERTY = Property(
    name=NAME,
    summary=PROPERTY_SUMMARIES[NAME],
    theory="THEORY.md s2 (C); T1, T3, T4",
    tolerance=RTOL_CANCEL,
    layout=layout,
    evaluate=evaluate,
    evaluate_batch=evaluate_batch,
)
