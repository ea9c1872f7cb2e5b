"""(E) gradient exchangeability (THEORY.md section 2): the shared-event coefficient
vectors of a group, across its responses, stay parallel when something that belongs to
one response changes (its suffix length, tokens, ratios or entropies) or a shared event's
ratio crosses a clip boundary. A group constant may rescale them; nothing may turn them.

The probes change one thing each: a suffix length (M3), suffix entropies (M5), suffix
ratios (M1), a shared event's ratio above or below every usual trust region (M2, or M6
when the change is a shift common to every occurrence).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from exchange.checker import generators
from exchange.checker.mechanisms import m1_sequence_weight, m5_response_statistics, m6_additive_term, m7_feature_shaping
from exchange.checker.mechanisms.m2_sign_clip import sign_split
from exchange.checker.mechanisms.m3_response_normaliser import per_response_rescaling
from exchange.checker.mechanisms.m4_not_zero_sum import dropped_response
from exchange.checker.cases import Case, GroupConfig, build, common_prefix
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout
from exchange.checker.mutations import Mutation
from exchange.checker.properties.base import (BatchInputs, BatchResult, Evaluation, Probe, ProbeResult, Property,
                                              configurations)
from exchange.checker.properties.residuals import as_residual, direction_spread, fmt, tied_groups
from exchange.checker.properties import shared_cancellation
from exchange.checker.properties.shared_cancellation import any_groups
from exchange.checker.tolerances import MAX_MISMATCHES, RTOL_CANCEL, RTOL_DIRECTION, at_precision
from exchange.core.coefficients import Engine
from exchange.core.rollout import Rollout

NAME = "exchangeable"


def layout(d: Draw, regime: str) -> Layout:
    lay = any_groups(d, regime)
    case = lay.example.case
    return Layout(Example(case, mutation=generators.mutation(d, case, case.off_policy)), lay.kinds, lay.distinct)


def _padded(example: Example) -> tuple[Case, Case]:
    """Base and variant cases padded to one width, so their rows line up."""
    case = example.case
    variant = example.mutation.apply(case)
    t = max(len(r) for c in (case, variant) for grp in c.groups for r in grp.responses)
    return replace(case, pad_to=t), replace(variant, pad_to=t)


def _shared_columns(kappa: torch.Tensor, rollout: Rollout, g: int, prefix: int) -> torch.Tensor:
    """``[K, prefix, G_g]``: group ``g``'s shared-event vectors (``kappa [K, N, T]``)."""
    rows = (rollout.group == g).nonzero().flatten()
    return kappa[:, rows, :prefix].transpose(1, 2)


def _spread(kappa, kappa_v, base: Rollout, case: Case, variant: Case, tied) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Worst direction spread over the groups ``[K]``, informative ``[K]``, and per group
    ``(g, prefix, spread, worst)`` for mismatch lines."""
    k = kappa.shape[0]
    res = torch.zeros(k, dtype=kappa.dtype)
    informative = torch.zeros(k, dtype=torch.bool)
    per_group = []
    for g in range(len(case.groups)):
        prefix = min(common_prefix(case.groups[g].responses), common_prefix(variant.groups[g].responses))
        cols = torch.cat([_shared_columns(kappa, base, g, prefix), _shared_columns(kappa_v, base, g, prefix)], dim=1)
        r_g, worst, used, _ = direction_spread(cols)
        informative |= (used >= 2) & ~tied[:, g]
        res = torch.maximum(res, as_residual(r_g))
        per_group.append((g, prefix, r_g, worst, cols))
    return res, informative, per_group


def exchangeability(base: Rollout, kappa, variant: Rollout, kappa_v, case: Case, variant_case: Case,
                    label: str) -> Evaluation:
    """Rank-1 test of every group's shared-event vectors across ``base`` and ``variant``
    (``kappa [N, T]`` each)."""
    tied = tied_groups(base.rewards[None], base)
    res, informative, per_group = _spread(kappa[None], kappa_v[None], base, case, variant_case, tied)
    mism = []
    for g, prefix, r_g, worst, cols in per_group:
        if float(r_g[0]) > RTOL_DIRECTION:
            w = int(worst[0])
            ref = cols[0, 0] if w != 0 else cols[0, -1]
            where = "base" if w < prefix else f"variant ({label})"
            mism.append(
                f"group={g}: shared-event vectors are not parallel: event t={w % max(prefix, 1)} in {where} "
                f"kappa={fmt(cols[0, w])} vs kappa={fmt(ref)} (sin angle {float(r_g[0]):.3g})"
            )
    return Evaluation(float(res[0]), bool(informative[0]), base, kappa, mism[:MAX_MISMATCHES], variant, kappa_v)


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    case, variant_case = _padded(example)
    base, variant = build(case), build(variant_case)
    kappa, kappa_v = engine([base, variant])
    return exchangeability(base, kappa, variant, kappa_v, case, variant_case, repr(example.mutation))


def evaluate_batch(b: BatchInputs) -> BatchResult:
    k = len(b.seeds)
    case, variant_case = _padded(b.layout.example)
    base, fb = configurations(case, b.seeds, b.rewards, constants=True)
    _, fv = configurations(variant_case, b.seeds, b.rewards, constants=True)
    # One call for both: the tokens differ between base and variant, so they are
    # per-configuration fields on one layout of one shape (a mutation keeps the rows).
    _, kappa2, failed2 = b.coefficients(base, {name: torch.cat([fb[name], fv[name]]) for name in fb})
    kappa, kappa_v = kappa2[:k], kappa2[k:]
    failed = failed2[:k] | failed2[k:]
    tied = tied_groups(b.rewards, base)
    res, informative, _ = _spread(kappa, kappa_v, base, case, variant_case, tied)
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), informative | failed)


def run_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """The probe's base and variant on-policy (its ratios are set explicitly). Its
    evaluations (the counterexamples a report shows) are of the real coefficients; the
    mechanism is decided on the reward-dependent ones where the probe asks for them
    (``engine.with_raw``), and named only when the base alone is exchangeable (then the
    one thing the probe changed is what broke it) and the probe's signature, if any,
    fits; a signature that ``isolates`` its pattern is asked whenever the break shows."""
    result = ProbeResult(probe)
    example = Example(replace(probe.case, off_policy=False), mutation=probe.mutation)
    case, variant_case = _padded(example)
    base, variant = build(case), build(variant_case)
    if probe.reward_dependent:
        (kappa, kappa_v), (dk, dk_v) = engine.with_raw([base, variant])
    else:
        kappa, kappa_v = dk, dk_v = engine([base, variant])
    ex = exchangeability(base, kappa, variant, kappa_v, case, variant_case, repr(probe.mutation))
    ex.note = f"probe {probe.name}: {probe.description}"
    result.evaluations[NAME] = ex
    # (C) on both rollouts: the base when it fails (smaller), else the variant.
    for rollout, kap in ((base, kappa), (variant, kappa_v)):
        cancel = result.evaluations[shared_cancellation.NAME] = shared_cancellation.judged(engine, rollout, kap)
        cancel.note = ex.note
        if cancel.residual > RTOL_CANCEL:
            break
    dex = ex
    if dk is not kappa:
        dex = exchangeability(base, dk, variant, dk_v, case, variant_case, repr(probe.mutation))
    finite = bool(torch.isfinite(dk).all()) and bool(torch.isfinite(dk_v).all())
    tol = at_precision(RTOL_DIRECTION, engine.precision)
    if not (finite and dex.residual > tol):
        return result
    if dex is not ex:
        result.decided_on = dex
    # a signature that builds its own contrasts (isolates) does not need an exchangeable base
    if probe.isolates or exchangeability(base, dk, base, dk, case, case, "base").residual <= tol:
        result.found = probe.signature(engine, probe, dex)
    return result


def _turned(evidence):
    """The signature of a probe whose one change to one response's own events turned the
    shared-event direction of an exchangeable base (M1 from its ratios, M5 from its
    token statistics): the probe's (E) residual is the evidence."""
    def signature(engine: Engine, probe: Probe, ev: Evaluation) -> list:
        return evidence(ev.residual, at_precision(RTOL_DIRECTION, engine.precision),
                        f"probe {probe.name}: {probe.description}")
    return signature


# Rewards 4 apart: the sign of every advantage is the verifiable reward's, next to any
# shaping of O(1) (a positive-only estimator keeps the mutated response 0 above its centre).
_EQUAL_LENGTHS = GroupConfig(
    responses=((1, 2, 0, 1), (1, 2, 1, 3), (1, 2, 3, 0), (1, 2, 2, 2)),
    rewards=(4.0, 0.0, 0.0, 4.0),
)
# Behaviour prob 0.5 on response 0's suffix events, so that its ratios may reach 2.
_HALF_SUFFIX = (((0, 1, 2, 0), 0.5), ((0, 1, 2, 0, 1), 0.5))
_UNEQUAL_LENGTHS = GroupConfig(
    responses=((1, 2, 3), (1, 2, 0, 1, 3), (1, 2, 3, 3), (1, 2, 2, 0, 1, 2)),
    rewards=(4.0, 0.0, 0.0, 4.0),
)
# The moved shared events are common tokens (behaviour prob 0.5), so even trust regions
# that widen for rare tokens (DCPO: r(r-1) <= eps/q) exclude ratios 2.0 and 0.25.
# Every entropy is 1 so that entropy-driven weights (M5) cannot masquerade as M1/M2.
# Rewards of both signs (1, -1, -1, 1): a loss that does not centre them (a greedy or raw
# baseline) still has advantages of both signs for a clip to split.
# Every event at behaviour prob 0.5: the moved event is then the extreme of any ranking by
# log-prob, so a selection by covariance with the advantage (KL-Cov) lands on it.
_COMMON_EVENT = Case(groups=(replace(_EQUAL_LENGTHS, rewards=(1.0, -1.0, -1.0, 1.0)),), entropy_all=1.0,
                     old_prob=tuple(((0, *r[: t + 1]), 0.5) for r in _EQUAL_LENGTHS.responses for t in range(len(r))))

_ALL_SHARED = replace(_COMMON_EVENT, old_prob=_COMMON_EVENT.old_prob + (((0, 1), 0.25), ((0, 1, 2), 0.25)))

PROBES = (
    Probe(
        "suffix_length",
        "shared prefix, one response's suffix made longer, on-policy, every entropy equal",
        NAME, "M3", Case(groups=(_UNEQUAL_LENGTHS,), entropy_all=1.0), Mutation("length", 0, 0, 7),
        signature=per_response_rescaling, reward_dependent=True,
    ),
    Probe(
        "suffix_crosses_length_limit",
        "shared prefix, equal lengths under a length limit of 5, one response's suffix made longer so it "
        "is truncated, on-policy, every entropy equal",
        NAME, "M4", Case(groups=(_EQUAL_LENGTHS,), entropy_all=1.0, length_limit=5), Mutation("length", 0, 0, 5),
        signature=dropped_response, reward_dependent=True,
    ),
    Probe(
        "suffix_entropy",
        "shared prefix, equal lengths, every entropy 1 then one response's suffix entropies 3, on-policy",
        NAME, "M5", Case(groups=(_EQUAL_LENGTHS,), entropy_all=1.0), Mutation("entropy", 0, 0, 3.0),
        signature=_turned(m5_response_statistics.suffix_statistics_turn), reward_dependent=True,
    ),
    Probe(
        "suffix_ratio",
        "shared prefix at ratio 1, one response's suffix ratios 1.0 -> 2.0, every entropy 1",
        # 2 on two of four tokens moves a geometric-mean weight by 41%, so that the shared
        # column turns by more than bf16's tolerance (3%) even where the response's share
        # of it is small (THEORY.md section 4, precision rule)
        NAME, "M1", Case(groups=(_EQUAL_LENGTHS,), entropy_all=1.0, old_prob=_HALF_SUFFIX), Mutation("ratio", 0, 0, 2.0),
        off_policy_only=True, signature=_turned(m1_sequence_weight.suffix_ratios_turn), reward_dependent=True,
    ),
    Probe(
        "shared_ratio_high",
        "a shared event (behaviour prob 0.5) moved to ratio 2.0, above any usual trust region",
        NAME, "M2", _COMMON_EVENT, Mutation("shared_ratio", 0, 0, 2.0, position=1),
        off_policy_only=True, signature=sign_split, isolates=True,
    ),
    Probe(
        "shared_ratio_low",
        "a shared event (behaviour prob 0.5) moved to ratio 0.25, below any usual trust region",
        NAME, "M2", _COMMON_EVENT, Mutation("shared_ratio", 0, 0, 0.25, position=1),
        off_policy_only=True, signature=sign_split, isolates=True,
    ),
    # Every shared event moved, from behaviour prob 0.25 to ratio 4: a geometric mean over
    # four tokens (two of them shared) then moves to 2, where a sign-dependent gate's two
    # temperatures (1 and 1.5) differ by 24%, ten times bf16's resolution and more.
    Probe(
        "shared_ratios_high",
        "every shared event (behaviour prob 0.25) moved to ratio 4.0",
        NAME, "M2", _ALL_SHARED, Mutation("shared_ratios", 0, 0, 4.0, position=1),
        off_policy_only=True, signature=sign_split, isolates=True,
    ),
    Probe(
        "shared_ratios_low",
        "every shared event (behaviour prob 0.25) moved to ratio 0.25",
        NAME, "M2", _ALL_SHARED, Mutation("shared_ratios", 0, 0, 0.25, position=1),
        off_policy_only=True, signature=sign_split, isolates=True,
    ),
    Probe(
        "equal_rewards_different_features",
        "equal rewards, different response features (length 3 with token 3 vs length 7 reaching the length "
        "limit), rows X, Y, X, Y, ... whose rewards 0, -0.75, -2, -2 rotate over four batches, on-policy, every "
        "entropy 1",
        NAME, "M7", Case(groups=(GroupConfig((m7_feature_shaping.X, m7_feature_shaping.Y), (1.0, 0.0)),),
                         entropy_all=1.0, length_limit=len(m7_feature_shaping.Y)),
        run=m7_feature_shaping.features_probe,
    ),
    Probe(
        "event_profile",
        "one mixed group sharing four events of different behaviour probabilities, on-policy, every entropy 1",
        # four shared events with different behaviour probabilities, then a distinct token
        NAME, "M6", Case(groups=(GroupConfig(((1, 2, 3, 1, 0), (1, 2, 3, 1, 2), (1, 2, 3, 1, 3), (1, 2, 3, 1, 1)),
                                             (4.0, 0.0, 0.0, 4.0)),), entropy_all=1.0,
                         old_prob=(((0, 1), 0.5), ((0, 1, 2), 0.1), ((0, 1, 2, 3), 0.25), ((0, 1, 2, 3, 1), 0.05))),
        run=m6_additive_term.profile_probe,
    ),
)

PROPERTY = Property(name=NAME, tolerance=RTOL_DIRECTION, layout=layout, evaluate=evaluate,
                    evaluate_batch=evaluate_batch, probes=PROBES, run_probe=run_probe)
