"""(Z) zero-sum advantages, observed on a black box (THEORY.md section 2).

Identical responses, on-policy: every event is shared, so the part of ``K_e`` that
depends on the rewards must vanish (T1/T2); it is read across the reward vectors of
:mod:`~exchange.checker.properties.reward_moves`. Where identical responses get different
weights (a normaliser per micro-batch, a position weight), ``K_e`` is averaged over the
cyclic shifts of each group's rewards first: ``mean_pi sum_i A_pi(i) w_i = mean(w) sum_i
A_i`` vanishes exactly when the advantages are zero-sum; over a declared optimizer step
(:mod:`~exchange.checker.properties.update_rows`) the average reads the step's (Z), and a
break that the whole group's average does not show is the split's (M8). A remainder
that is the same for every reward vector is an additive event term (M6), read by (C).
The probes: identical responses on two reward scales, and unequal lengths after a shared
prefix (a length-weighted baseline is not zero-sum once lengths differ: M4).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from exchange.checker import generators
from exchange.checker.mechanisms import m6_additive_term
from exchange.checker.mechanisms.evidence import Evidence
from exchange.checker.mechanisms.m4_not_zero_sum import centre_crossing, pruned_copies, truncation_probe
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout, placeholder
from exchange.checker.properties.base import (BatchInputs, BatchResult, Evaluation, Probe, ProbeResult, Property,
                                              ShrinkRules, configurations)
from exchange.checker.properties import shared_cancellation
from exchange.checker.properties.residuals import cancellation_mismatches, tied_groups
from exchange.checker.properties.reward_moves import cyclic_shifts, reward_dependent, reward_vectors
from exchange.checker.properties.update_rows import splits_a_group, update_rows
from exchange.checker.tolerances import RTOL_CANCEL, at_precision
from exchange.core.coefficients import Engine
from exchange.core.events import events
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import Regime

NAME = "zero_sum"


def layout(d: Draw, regime: str) -> Layout:
    """Identical-response groups of one size (the cyclic shifts of their rewards then
    average every group exactly)."""
    size = d.integer(generators.DEFAULT_SIZES.min_size, generators.DEFAULT_SIZES.max_size)
    sizes = replace(generators.DEFAULT_SIZES, min_size=size, max_size=size)
    groups = [generators.identical_group(d, sizes) for _ in range(d.integer(1, 4))]
    case = Case(groups=tuple(placeholder(g) for g in groups), off_policy=False)
    return Layout(Example(case), (("binary", "continuous"),) * len(groups), (True,) * len(groups))


def _identical(case: Case) -> bool:
    """Every group holds copies of one response (the shifts then permute identical rows)."""
    return all(len(set(g.responses)) == 1 for g in case.groups)


def _shift_average(kappa_of, rewards: Tensor, rollout: Rollout, update: Tensor | None) -> Tensor:
    """The coefficients averaged over the cyclic shifts of the rewards (within the step's
    rows ``update [N]`` where the loss declares one), ``[K, N, T]``."""
    shifts = cyclic_shifts(rollout, update)
    return sum(kappa_of(rewards[:, perm]) for perm in shifts) / len(shifts)


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    return _evaluate(engine, rollout, update_rows(engine.loss_fn, rollout), _identical(example.case))


def _evaluate(engine: Engine, rollout: Rollout, update: Tensor | None, identical: bool) -> Evaluation:
    """(Z) on ``rollout``, read on the optimizer step ``update [N]`` (``None``: the batch)."""
    ev = events(rollout)
    rewards = rollout.rewards[None]

    def kappa_of(r: Tensor) -> Tensor:
        (k,) = engine([rollout.with_fields({"rewards": r[0]})])
        return k[None]

    variants = reward_vectors(rewards, rollout)
    raw = [kappa_of(r) for r in variants]
    res = reward_dependent(raw, ev, ev.shared)
    if float(res[0]) > RTOL_CANCEL and identical:  # identical responses, unequal weights
        res = reward_dependent([_shift_average(kappa_of, r, rollout, update) for r in variants], ev, ev.shared, raw)
    kappa = raw[0][0]
    mism = cancellation_mismatches(rollout, kappa, ev, ev.shared, RTOL_CANCEL) if float(res[0]) > RTOL_CANCEL else []
    return Evaluation(float(res[0]), True, rollout, kappa, mism)


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    ev = events(rollout)
    # Shared events that cancel at the drawn rewards leave nothing to split into a
    # reward-dependent part and a remainder: only the others need the other reward vectors
    # (b.on_rows: a configuration the loss raises on there fails, as in the plain path).
    _, first, failed = b.coefficients(rollout, fields)
    res = shared_cancellation.residual(shared_cancellation.event_residuals(  # (its layouts draw no tied group)
        first, rollout, ev, tied_groups(b.rewards, rollout), lambda rows: b.at_reference(rollout, fields, rows)))
    todo = (res > RTOL_CANCEL).nonzero().flatten()
    if todo.numel():
        sub = {k: v[todo] for k, v in fields.items()}
        variants = [v[todo] for v in reward_vectors(b.rewards, rollout)]
        raw = [first[todo]] + [b.on_rows(rollout, {**sub, "rewards": v}, todo) for v in variants[1:]]
        part = reward_dependent(raw, ev, ev.shared)
        again = (part > RTOL_CANCEL).nonzero().flatten()
        if again.numel() and _identical(b.layout.example.case):  # unequal weights of identical responses
            sub2 = {k: v[again] for k, v in sub.items()}
            update = update_rows(b.loss_fn, rollout)
            averaged = [_shift_average(lambda r: b.on_rows(rollout, {**sub2, "rewards": r}, todo[again]), v[again],
                                       rollout, update) for v in variants]
            part = part.clone()
            part[again] = reward_dependent(averaged, ev, ev.shared, [k[again] for k in raw])
        res = res.clone()
        res[todo] = part
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), torch.ones_like(failed) | failed)


def run_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """The probe's group, on-policy. A reward-dependent break is evidence for the probe's
    mechanism when its signature fits (unequal lengths: M4 only when the centre is not
    the group's mean); on identical responses, copies of one token pruned in some
    responses only are M2 and M4 (:func:`~exchange.checker.mechanisms.m4_not_zero_sum.pruned_copies`).
    A (C) break that every reward vector and assignment shares is an additive event term:
    M6 (:func:`~exchange.checker.mechanisms.m6_additive_term.reward_independent`). The
    break is judged at the loss's precision: below it, (Z) holds and a (C) break left is
    an additive term's. Where the loss declares an optimizer step that holds part of a
    group (:mod:`~exchange.checker.properties.update_rows`), a break on identical
    responses that the whole group's average does not show is the split's: M8."""
    result = ProbeResult(probe)
    # the reward vectors (Z) compares, as the probe chose them (never re-mapped: probes.KeptGroups)
    unmapped = getattr(engine, "unmapped", engine)
    ev = result.evaluations[NAME] = evaluate(unmapped, Example(probe.case), Regime.ON_POLICY)
    rollout, kappa, identical = ev.rollout, ev.kappa, _identical(probe.case)
    if not bool(torch.isfinite(kappa).all()):
        return result
    evs, update = events(rollout), update_rows(engine.loss_fn, rollout)
    cancel = shared_cancellation.judged(engine, rollout, kappa)
    moved, tol = f"probe {probe.name}: {probe.description}", at_precision(RTOL_CANCEL, engine.precision)
    if ev.residual > tol and identical and splits_a_group(rollout, update) \
            and _evaluate(unmapped, rollout, None, identical).residual <= tol:
        result.found = [Evidence(
            "M8", moved, "the optimizer step the loss declares (exchange_update_rows) holds part of a group: the "
            "reward-dependent part of K_e does not vanish over the step's rows, while over the whole group it does",
            ev.residual, tol)]
        ev.note = f"probe {probe.name}: {probe.description}; " + result.found[0].pattern
        result.evaluations[shared_cancellation.NAME] = cancel
    elif ev.residual > tol:
        if probe.signature is not None:
            result.found = probe.signature(engine, probe, ev)
            if not result.found:  # the pattern does not fit: left to the other probes and the fuzzer
                del result.evaluations[NAME]
                return result
        elif identical:
            kappas = engine([rollout.with_fields({"rewards": v[0]}) for v in reward_vectors(rollout.rewards[None], rollout)])
            result.found = next((found for k in kappas if (found := pruned_copies(rollout, k, moved))), [])
        result.found = result.found or [Evidence(
            probe.mechanism, moved, "the reward-dependent part of K_e does not vanish on identical responses",
            ev.residual, tol)]
        ev.note = f"probe {probe.name}: {probe.description}; " + result.found[0].pattern
        result.evaluations[shared_cancellation.NAME] = cancel
    elif cancel.residual > tol and identical:
        # unequal weights of identical responses (a normaliser per micro-batch) move with
        # the assignment and are left to (E)/(P); a term the same up to the loss's own
        # round-off is no less an additive term
        shifts = cyclic_shifts(rollout, update)  # one shift only where the step holds single rows
        (shifted,) = engine([rollout.with_fields({"rewards": rollout.rewards[shifts[min(1, len(shifts) - 1)]]})])
        again = float(reward_dependent([kappa[None], shifted[None]], evs, evs.shared)[0])
        result.found = m6_additive_term.reward_independent(cancel.residual, again, tol, moved)
        if result.found:
            cancel.note = f"probe {probe.name}: K_e is the same for every reward vector and assignment"
            result.evaluations[shared_cancellation.NAME] = cancel
            result.through_cancellation = True
    return result


# A long response with the only reward: a centre weighted by length sits at 8/19 of the
# spread, the mean at 1/4 (the advantages' sum is off by two thirds of a reward).
_UNEQUAL_LENGTHS = ((1, 2, 3), (1, 2, 0, 1, 3, 3, 0, 1), (1, 2, 3, 3), (1, 2, 2, 0))

PROBES = (
    Probe(
        "identical_responses",
        "G identical responses with different rewards, two groups on different reward scales, on-policy",
        NAME, "M4",
        # Length 4 with set, varied entropies (0.5, 2.0, 0.1, 1.3: within-response
        # z-scores -0.65, 1.40, -1.19, 0.44): an entropy reallocation clipped to |A_i|/phi
        # (HAPO) cancels when every copy is clipped or none is; with the z-scored rewards
        # (1, 0, 0), A = (1.15, -0.58, -0.58) and the bounds are 0.58 and 0.29, so z = 0.44
        # is clipped for one sign only and its non-zero sum shows, whatever the event-key
        # hash picks elsewhere.
        Case(groups=(GroupConfig(((1, 2, 3, 0), (1, 2, 3, 0), (1, 2, 3, 0)), (1.0, 0.0, 0.0)),
                     GroupConfig(((1, 3, 2, 2), (1, 3, 2, 2)), (5.0, 3.0))),
             entropy=(((0, 1), 0.5), ((0, 1, 2), 2.0), ((0, 1, 2, 3), 0.1), ((0, 1, 2, 3, 0), 1.3))),
    ),
    Probe(
        "unequal_lengths", "one group with a shared prefix and unequal lengths, on-policy, every entropy equal",
        NAME, "M4",
        Case(groups=(GroupConfig(_UNEQUAL_LENGTHS, (0.0, 1.0, 0.0, 0.0)),), entropy_all=1.0),
        # Only a centre that is not the group's mean speaks for M4 here; anything else
        # (1/L_i, entropy weights, a shaping) is left to the other probes and the fuzzer.
        signature=centre_crossing,
    ),
    Probe(
        "truncated_after_centring", "four identical responses, two of them flagged truncated, on-policy",
        NAME, "M4",
        Case(groups=(GroupConfig(((1, 2, 3), (1, 2, 3), (1, 2, 3), (1, 2, 3)), (1.0, 0.0, 0.0, 0.0)),), entropy_all=1.0),
        run=truncation_probe,
    ),
)

PROPERTY = Property(name=NAME, tolerance=RTOL_CANCEL, layout=layout, evaluate=evaluate,
                    evaluate_batch=evaluate_batch, shrink=ShrinkRules(identical_responses=True), probes=PROBES,
                    run_probe=run_probe, regime_free=True)
