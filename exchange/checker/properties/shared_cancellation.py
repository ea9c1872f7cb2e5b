"""(C) shared-event cancellation (THEORY.md section 2): ``K_e == 0`` for every event that
occurs in every response of its group, on arbitrary groups of either regime (T1, T3, T4).

**(C)'s residual**, defined here once (:func:`event_residuals`, :func:`residual`) and
reported by the checker (:data:`PROPERTY`) and by :func:`exchange.inspect` alike: the
largest over the shared events of ``|K_e| / M_e``, with ``M_e`` the magnitude of the
terms summed into the event's coefficients. THEORY.md states (C) for *every* shared
event and judges round-off "per event, against the magnitudes of the terms summed into
that event's coefficients", so a break is as large as its worst event. The aggregate
``sum |K_e| / sum M_e`` (:func:`exchange.core.events.shared_residual`, what the training
integrations log) is a mass-weighted mean of these: it can read 0.11 where one event
does not cancel at all (a T4 clip that keeps one sign), so it is not (C)'s size.

``M_e`` is the event's own coefficient mass ``sum_{(i,t) in e} |kappa[i, t]|``, plus
:data:`~exchange.checker.tolerances.ATOL_REL` times the largest ``|kappa|`` (an event with
no mass of its own is not judged on round-off alone). One exception, and only where it
can change the reading: a **tied group** (equal rewards) has advantages 0 in exact
arithmetic, so its coefficients are what is left of terms that cancelled inside each
``kappa`` (``r_i - mean(r)``) and their own mass is round-off too; its events are judged
against the larger of their own mass and the mass the same layout gets at mixed rewards
(:func:`~exchange.checker.properties.residuals.reference_rewards`: one more loss call, made
only when a tied group's shared event is above :data:`RTOL_CANCEL` at first). A group
whose rewards differ is never judged against a reward vector it does not have.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from exchange.checker import generators
from exchange.checker.cases import build
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout, placeholder
from exchange.checker.properties.base import BatchInputs, BatchResult, Evaluation, Property, configurations
from exchange.checker.properties.residuals import cancellation_mismatches, per_event, tied_groups, with_reference_rewards
from exchange.checker.tolerances import RTOL_CANCEL
from exchange.core.coefficients import Engine
from exchange.core.events import Events, events
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import Regime

NAME = "shared_cancellation"


def event_residuals(kappa: Tensor, rollout: Rollout, ev: Events, tied: Tensor,
                    reference: Callable[[Tensor], Tensor]) -> Tensor:
    """``[K, S]``: each shared event's ``|K_e| / M_e`` (module docstring), in
    :func:`exchange.core.events.shared_events` order, for ``kappa [K, N, T]``, the
    coefficients of ``K`` configurations of ``rollout``'s layout whose groups ``tied
    [K, n_groups]`` have equal rewards. ``reference(rows)`` gives the coefficients of the
    configurations ``rows [k]`` at :func:`~exchange.checker.properties.residuals.reference_rewards`
    (``[k, N, T]``); it is called only for configurations with a tied group's shared event
    above :data:`RTOL_CANCEL`, and only its tied groups' rows count. NaN reads as inf."""
    res = per_event(kappa, ev, shared=True)[2]
    todo = ((res > RTOL_CANCEL) & tied[:, ev.group[ev.shared]]).any(1).nonzero().flatten()
    if todo.numel():
        rows = tied[todo][:, rollout.group_index.to(tied.device)]  # [k, N]: the tied groups' rows
        ref = reference(todo)
        res = res.clone()
        res[todo] = per_event(kappa[todo], ev, torch.where(rows[..., None], ref, torch.zeros_like(ref)), shared=True)[2]
    return res


def residual(res: Tensor) -> Tensor:
    """``[K]``: (C)'s residual, the largest of :func:`event_residuals` ``res [K, S]`` (0 where
    there is no shared event)."""
    return res.amax(1) if res.shape[1] else res.sum(1)


def any_groups(d: Draw, regime: str) -> Layout:
    """1-4 arbitrary groups in ``regime``, sometimes with a generation limit at the
    longest response (those responses count as truncated). Shared by the properties
    fuzzed over arbitrary batches."""
    groups = [generators.group(d) for _ in range(d.integer(1, 4))]
    case = generators.case(d, [placeholder(g) for g in groups], Regime(regime).off_policy)
    return Layout(Example(case), (generators.REWARD_KINDS,) * len(groups), (False,) * len(groups))


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    (kappa,) = engine([rollout])
    return judged(engine, rollout, kappa)


def judged(engine: Engine, rollout: Rollout, kappa: Tensor) -> Evaluation:
    """(C) on ``rollout``'s coefficients ``kappa [N, T]`` (``engine`` gives the reference
    coefficients a tied group's events are judged against): the evaluation the fuzzer and
    every probe that reports (C) show."""
    ev = events(rollout)
    tied = tied_groups(rollout.rewards[None], rollout)
    informative = bool((ev.shared & ~tied[0][ev.group]).any())
    res = event_residuals(kappa[None], rollout, ev, tied, lambda rows: engine([with_reference_rewards(rollout)])[0][None])
    above = torch.zeros_like(ev.shared)
    above[ev.shared] = res[0] > RTOL_CANCEL  # the events (C) judges broken (a tied group's rounding is not)
    return Evaluation(float(residual(res)[0]), informative, rollout, kappa,
                      cancellation_mismatches(rollout, kappa, ev, above, RTOL_CANCEL))


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    _, kappa, failed = b.coefficients(rollout, fields)
    ev = events(rollout)
    tied = tied_groups(b.rewards, rollout)
    res = residual(event_residuals(kappa, rollout, ev, tied, lambda rows: b.at_reference(rollout, fields, rows)))
    informative = (ev.shared[None] & ~tied[:, ev.group]).any(1)
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), informative | failed)


PROPERTY = Property(name=NAME, tolerance=RTOL_CANCEL, layout=any_groups, evaluate=evaluate,
                    evaluate_batch=evaluate_batch)
