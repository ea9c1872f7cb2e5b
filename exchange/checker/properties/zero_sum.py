"""(Z) zero-sum advantages, observed on a black box (THEORY.md section 2).

Identical responses, on-policy: every event is shared, so the part of ``K_e`` that
depends on the rewards must vanish (T1/T2). ``K_e`` is compared across reward vectors:
the drawn one shifted by a level per group, a one-hot and a ramp pattern. Where identical
responses get different weights (a normaliser per micro-batch, a position weight), ``K_e``
of the drawn rewards is averaged over the cyclic shifts of each group's rewards first:
``mean_pi sum_i A_pi(i) w_i = mean(w) sum_i A_i`` vanishes exactly when the advantages are
zero-sum (THEORY.md section 2). A remainder that is the same for every reward vector is
an additive event term (M6), not a (Z) failure: (C) reads it from the same evaluation.
The probes: identical responses on two reward scales, and unequal lengths after a shared
prefix (a length-weighted baseline is not zero-sum once lengths differ: M4).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from exchange.checker import generators
from exchange.checker.mechanisms import m6_additive_term
from exchange.checker.mechanisms.evidence import Evidence
from exchange.checker.mechanisms.m4_not_zero_sum import centre_crossing, pruned_copies
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout, placeholder
from exchange.checker.properties.base import (BatchInputs, BatchResult, Evaluation, Probe, ProbeResult, Property,
                                              ShrinkRules, configurations)
from exchange.checker.properties import shared_cancellation
from exchange.checker.properties.residuals import as_residual, cancellation, cancellation_mismatches, conditioning, per_event
from exchange.checker.tolerances import ATOL_REL, RTOL_CANCEL, TINY, at_precision
from exchange.core.coefficients import Engine
from exchange.core.events import events
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import PROPERTY_SUMMARIES, Regime

NAME = "zero_sum"


def layout(d: Draw, regime: str) -> Layout:
    """Identical-response groups of one size (the cyclic shifts of their rewards then
    average every group exactly)."""
    size = d.integer(generators.DEFAULT_SIZES.min_size, generators.DEFAULT_SIZES.max_size)
    sizes = replace(generators.DEFAULT_SIZES, min_size=size, max_size=size)
    groups = [generators.identical_group(d, sizes) for _ in range(d.integer(1, 4))]
    case = Case(groups=tuple(placeholder(g) for g in groups), off_policy=False)
    return Layout(Example(case), (("binary", "continuous"),) * len(groups), (True,) * len(groups))


def reward_variants(rewards: Tensor, rollout: Rollout) -> tuple[Tensor, ...]:
    """Three more reward vectors of ``rewards [K, N]``'s shape, each group at its own
    level ``1 + g`` (a centre that is not the group's own moves with it): the drawn
    rewards shifted, a one-hot pattern (the group's first response 1) and a ramp
    (``0, 1/(G-1), ..., 1``). Advantages that are not zero-sum change their sum with the
    pattern, even when they are invariant to shifts and scales, as std-normalised ones
    are; two patterns, because the drawn rewards may be one of them. None ties a group
    (the drawn rewards are mixed in every group), so filters of tied groups (DAPO's
    dynamic sampling) keep the same groups under all four."""
    gi = rollout.group_index.to(rewards.device)
    level = (1.0 + gi.to(rewards.dtype))[None]
    starts = torch.ones(rollout.n, dtype=torch.bool, device=rewards.device)
    starts[1:] = gi[1:] != gi[:-1]
    first = starts.to(rewards.dtype)
    # position of each response in its group (rows of a group are contiguous or not: count)
    position = torch.zeros(rollout.n, dtype=rewards.dtype, device=rewards.device)
    for g in range(rollout.n_groups):
        rows = (gi == g).nonzero().flatten()
        position[rows] = torch.arange(len(rows), dtype=rewards.dtype, device=rewards.device) / max(len(rows) - 1, 1)
    return rewards + level, (first[None] + level).expand_as(rewards), (position[None] + level).expand_as(rewards)


def cyclic_shifts(rollout: Rollout, classes: Tensor | None = None) -> list[Tensor]:
    """Index permutations ``[N]``: for ``k`` in ``range(lcm of the class sizes)``, each
    response takes the reward of the one ``k`` places later in its class (``classes
    [N]``: labels of responses that are interchangeable; default: the groups)."""
    labels = (rollout.group_index if classes is None else classes).cpu()
    _, dense = torch.unique(labels, return_inverse=True)
    sizes = torch.bincount(dense)
    period = math.lcm(*sizes.tolist())
    rows = [torch.nonzero(dense == c).flatten() for c in range(len(sizes))]
    out = []
    for k in range(period):
        perm = torch.arange(rollout.n)
        for r in rows:
            perm[r] = r.roll(-k)
        out.append(perm.to(rollout.rewards.device))
    return out


def reward_dependent(kappas: list[Tensor], ev, which: Tensor, scales: list[Tensor] | None = None) -> Tensor:
    """``[K]``: max over the events in ``which`` of ``max_v |K_e(v) - K_e(r)|`` over the
    per-event mass (``sum |kappa|`` of the occurrences, the largest over ``v``), for
    ``kappas``: one ``[K, N, T]`` per reward vector, the drawn one ``r`` first.
    ``scales``: the coefficients that set the mass and the absolute floor, when
    ``kappas`` are averages that cancel (default ``kappas``)."""
    scales = kappas if scales is None else scales
    if not bool(which.any()):
        return torch.zeros(kappas[0].shape[0], dtype=kappas[0].dtype, device=kappas[0].device)
    Ks = [per_event(k, ev)[0] for k in kappas]
    mass = torch.stack([per_event(k, ev)[1] for k in scales]).amax(0)  # [K, E]
    spread = torch.stack([(K - Ks[0]).abs() for K in Ks[1:]]).amax(0)
    scale = torch.stack([k.abs().flatten(1).amax(1) for k in scales]).amax(0)
    res = as_residual(spread / (mass + (ATOL_REL * scale + TINY)[:, None]))
    res = torch.where((mass == 0) & (spread == 0), torch.zeros_like(res), res)
    return torch.where(which[None], res, torch.zeros_like(res)).amax(1)


def _identical(case: Case) -> bool:
    """Every group holds copies of one response (the shifts then permute identical rows)."""
    return all(len(set(g.responses)) == 1 for g in case.groups)


def _variants(rewards: Tensor, rollout: Rollout) -> list[Tensor]:
    return [rewards, *reward_variants(rewards, rollout)]


def _shift_average(kappa_of, rewards: Tensor, rollout: Rollout) -> Tensor:
    """The coefficients averaged over the cyclic shifts of the rewards, ``[K, N, T]``."""
    shifts = cyclic_shifts(rollout)
    return sum(kappa_of(rewards[:, perm]) for perm in shifts) / len(shifts)


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    ev = events(rollout)
    rewards = rollout.rewards[None]

    def kappa_of(r: Tensor) -> Tensor:
        (k,) = engine([rollout.with_fields({"rewards": r[0]})])
        return k[None]

    variants = _variants(rewards, rollout)
    raw = [kappa_of(r) for r in variants]
    res = reward_dependent(raw, ev, ev.shared) / conditioning(variants, rollout, engine.precision)
    if float(res[0]) > RTOL_CANCEL and _identical(example.case):  # identical responses, unequal weights
        res = reward_dependent([_shift_average(kappa_of, r, rollout) for r in variants], ev, ev.shared, raw)
        res = res / conditioning(variants, rollout, engine.precision)
    kappa = kappa_of(rewards)[0]
    mism = cancellation_mismatches(rollout, kappa, ev, ev.shared, RTOL_CANCEL) if float(res[0]) > RTOL_CANCEL else []
    return Evaluation(float(res[0]), True, rollout, kappa, mism)


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    ev = events(rollout)
    failed = torch.zeros(len(b.seeds), dtype=torch.bool, device=b.rewards.device)

    def kappa_of(r: Tensor, flds: dict = fields) -> Tensor:
        nonlocal failed
        _, kappa, bad = b.coefficients(rollout, {**flds, "rewards": r})
        if bad.shape == failed.shape:
            failed = failed | bad
        return kappa

    # Shared events that cancel at the drawn rewards leave nothing to split into a
    # reward-dependent part and a remainder: only the others need the other reward vectors.
    first = kappa_of(b.rewards)
    res = cancellation(first, ev, ev.shared)
    todo = (res > RTOL_CANCEL).nonzero().flatten()
    if todo.numel():
        sub = {k: v[todo] for k, v in fields.items()}
        variants = [v[todo] for v in _variants(b.rewards, rollout)]
        raw = [first[todo]] + [kappa_of(v, sub) for v in variants[1:]]
        cond = conditioning(variants, rollout, b.precision)
        part = reward_dependent(raw, ev, ev.shared) / cond
        again = (part > RTOL_CANCEL).nonzero().flatten()
        if again.numel() and _identical(b.layout.example.case):  # unequal weights of identical responses
            sub2 = {k: v[again] for k, v in sub.items()}
            averaged = [_shift_average(lambda r: kappa_of(r, sub2), v[again], rollout) for v in variants]
            part = part.clone()
            part[again] = reward_dependent(averaged, ev, ev.shared, [k[again] for k in raw]) / cond[again]
        res = res.clone()
        res[todo] = part
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), torch.ones_like(failed) | failed)


def run_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """The probe's group, on-policy. A reward-dependent break is evidence for the probe's
    mechanism when its signature fits (unequal lengths: M4 only when the centre is not
    the group's mean); on identical responses, copies of one token pruned in some
    responses only are M2 and M4 (:func:`~exchange.checker.mechanisms.m4_not_zero_sum.pruned_copies`).
    A (C) break that every reward vector shares, all rewards 0 included, is an additive
    event term: M6 (THEORY.md section 4, attribution rules)."""
    result = ProbeResult(probe)
    ev = evaluate(engine, Example(probe.case), Regime.ON_POLICY)
    finite = bool(torch.isfinite(ev.kappa).all())
    rollout, kappa = ev.rollout, ev.kappa
    evs = events(rollout)
    cancel = Evaluation(float(cancellation(kappa[None], evs, evs.shared)[0]), True, rollout, kappa,
                        cancellation_mismatches(rollout, kappa, evs, evs.shared, RTOL_CANCEL))
    moved = f"probe {probe.name}: {probe.description}"
    # judged at the loss's precision here: below it, (Z) holds and the (C) break left is
    # an additive term's (the branch after this one)
    tol = at_precision(RTOL_CANCEL, getattr(engine, "precision", "float64"))
    result.evaluations[NAME] = ev
    if ev.residual > tol and finite:
        if probe.signature is not None:
            result.found = probe.signature(engine, probe, ev)
            if not result.found:  # the pattern does not fit: left to the other probes and the fuzzer
                del result.evaluations[NAME]
                return result
            ev.note = f"probe {probe.name}: {probe.description}; the break has the mechanism's pattern"
        else:
            pruned = [e for k in engine([rollout.with_fields({"rewards": v[0]})
                                         for v in _variants(rollout.rewards[None], rollout)])
                      for e in pruned_copies(rollout, k, moved)] if _identical(probe.case) else []
            if pruned:
                result.found = pruned[:2]
                ev.note = f"probe {probe.name}: some copies of one token get exactly 0, the others do not"
            else:
                result.found = [Evidence(probe.mechanism, moved, "the reward-dependent part of K_e does not vanish "
                                                                 "on identical responses", ev.residual, tol)]
        result.evaluations[shared_cancellation.NAME] = cancel
        return result
    if cancel.residual > tol and finite and _identical(probe.case):
        # K_e that neither the rewards nor their assignment to the (identical) responses
        # move: an additive event term. Unequal weights of identical responses (a
        # normaliser per micro-batch) move with the assignment and are left to (E)/(P).
        shifted = cyclic_shifts(rollout)[1]
        (moved_kappa,) = engine([rollout.with_fields({"rewards": rollout.rewards[shifted]})])
        # the same K_e up to the loss's own round-off (a bf16 additive term is no less one)
        again = float(reward_dependent([kappa[None], moved_kappa[None]], evs, evs.shared)[0])
        result.found = m6_additive_term.reward_independent(cancel.residual, again, tol, moved)
        if result.found:
            cancel.note = f"probe {probe.name}: K_e is the same for every reward vector and assignment"
            result.evaluations[shared_cancellation.NAME] = cancel
            result.through_cancellation = True
    return result


TRUNCATED_PROBE = "truncated_after_centring"
# Responses 0 and 1 of four identical ones are flagged truncated (``Rollout.truncated``
# is an input the loss reads; the checker sets it on responses that are otherwise the
# same, so that length effects cannot stand in for it).
_TRUNCATED_ROWS = (0, 1)


def _truncation_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """(Z) with some responses of a group truncated (THEORY.md section 2): the part of
    ``K_e`` that the truncation flags change must not depend on the rewards. Dropping
    truncated responses after centring leaves ``-sum_truncated A_i w``: reward-dependent,
    (Z) broken (M4). Weights that ignore the flags change nothing; a reward set to 0 on
    truncated responses before centring keeps the shaped advantages zero-sum. Where the
    identical responses' weights differ (a normaliser per micro-batch depends on the
    position), each (reward, flag) pair is moved through every position of the group
    (cyclic shifts of whole rows) and the coefficients averaged: every response then
    carries the mean weight, and ``K_e`` is that weight times the sum of the advantages
    the loss keeps."""
    result = ProbeResult(probe)
    off = build(probe.case)
    flags = torch.zeros(off.n, dtype=torch.bool)
    flags[list(_TRUNCATED_ROWS)] = True
    flags = flags.to(off.rewards.device)
    on = off.with_fields({"truncated": flags})
    ev = events(off)
    shifts = cyclic_shifts(off)

    def averaged(r: Tensor, truncated: Tensor) -> Tensor:
        kappas = engine([off.with_fields({"rewards": r[perm], "truncated": truncated[perm]}) for perm in shifts])
        return sum(kappas)[None] / len(kappas)

    variants = _variants(off.rewards[None], off)
    none = torch.zeros_like(flags)
    pairs = [engine([on.with_fields({"rewards": v[0]}), off.with_fields({"rewards": v[0]})]) for v in variants]
    kappa = pairs[0][0]
    raws = [k_on[None] for k_on, _ in pairs]
    diffs = [(k_on - k_off)[None] for k_on, k_off in pairs]
    res = float(reward_dependent(diffs, ev, ev.shared, raws)[0])
    if res > RTOL_CANCEL:  # unequal weights of the copies: every (reward, flag) through every position
        diffs = [averaged(v[0], flags) - averaged(v[0], none) for v in variants]
        res = float(reward_dependent(diffs, ev, ev.shared, raws)[0])
    evaluation = Evaluation(res, True, on, kappa, cancellation_mismatches(on, kappa, ev, ev.shared, RTOL_CANCEL)
                            if res > RTOL_CANCEL else [],
                            note=f"probe {probe.name}: responses {list(_TRUNCATED_ROWS)} flagged truncated")
    result.evaluations[NAME] = evaluation
    if res > at_precision(RTOL_CANCEL, engine.precision) and bool(torch.isfinite(kappa).all()):
        result.evaluations[shared_cancellation.NAME] = evaluation
        result.found = [Evidence(probe.mechanism, f"probe {probe.name}: {probe.description}",
                                 "the truncation flags change K_e by a reward-dependent amount (dropped after "
                                 "centring)", res, at_precision(RTOL_CANCEL, engine.precision))]
    return result


# A long response with the only reward: a centre weighted by length sits at 8/19 of the
# spread, the mean at 1/4 (the advantages' sum is off by two thirds of a reward).
_UNEQUAL_LENGTHS = ((1, 2, 3), (1, 2, 0, 1, 3, 3, 0, 1), (1, 2, 3, 3), (1, 2, 2, 0))

PROBES = (
    Probe(
        "identical_responses",
        "G identical responses with different rewards, two groups on different reward scales, on-policy",
        NAME,
        "M4",
        # Length 4 with set, varied entropies (0.5, 2.0, 0.1, 1.3: within-response
        # z-scores -0.65, 1.40, -1.19, 0.44): an entropy reallocation clipped to |A_i|/phi
        # (HAPO) cancels when every copy is clipped or none is; with the z-scored rewards
        # (1, 0, 0), A = (1.15, -0.58, -0.58) and the bounds are 0.58 and 0.29, so z = 0.44
        # is clipped for one sign only and its non-zero sum shows, whatever the event-key
        # hash picks elsewhere.
        Case(groups=(GroupConfig(((1, 2, 3, 0),) * 3, (1.0, 0.0, 0.0)), GroupConfig(((1, 3, 2, 2),) * 2, (5.0, 3.0))),
             entropy=(((0, 1), 0.5), ((0, 1, 2), 2.0), ((0, 1, 2, 3), 0.1), ((0, 1, 2, 3, 0), 1.3))),
    ),
    Probe(
        "unequal_lengths",
        "one group with a shared prefix and unequal lengths, on-policy, every entropy equal",
        NAME,
        "M4",
        Case(groups=(GroupConfig(_UNEQUAL_LENGTHS, (0.0, 1.0, 0.0, 0.0)),), entropy_all=1.0),
        # Only a centre that is not the group's mean speaks for M4 here; anything else
        # (1/L_i, entropy weights, a shaping) is left to the other probes and the fuzzer.
        signature=centre_crossing,
    ),
    Probe(
        TRUNCATED_PROBE,
        "four identical responses, two of them flagged truncated, on-policy",
        NAME,
        "M4",
        Case(groups=(GroupConfig(((1, 2, 3),) * 4, (1.0, 0.0, 0.0, 0.0)),), entropy_all=1.0),
        run=_truncation_probe,
    ),
)

PROPERTY = Property(
    name=NAME,
    summary=PROPERTY_SUMMARIES[NAME],
    theory="THEORY.md s2 (Z); T1/T2",
    tolerance=RTOL_CANCEL,
    layout=layout,
    evaluate=evaluate,
    evaluate_batch=evaluate_batch,
    shrink=ShrinkRules(identical_responses=True),
    probes=PROBES,
    run_probe=run_probe,
    regime_free=True,
)
