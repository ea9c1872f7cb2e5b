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
from exchange.checker.mechanisms.evidence import second_singular_ratio
from exchange.checker.mechanisms.m2_sign_clip import sign_split
from exchange.checker.mechanisms.m3_response_normaliser import per_response_rescaling
from exchange.checker.mechanisms.m4_not_zero_sum import dropped_response
from exchange.checker.cases import Case, GroupConfig, build, common_prefix
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout
from exchange.checker.mutations import Mutation
from exchange.checker.properties.base import (BatchInputs, BatchResult, Evaluation, Probe, ProbeResult, Property,
                                              configurations)
from exchange.checker.properties.residuals import (as_residual, cancellation, cancellation_mismatches, second_rewards,
                                                   direction_spread, fmt, tied_groups)
from exchange.checker.properties import shared_cancellation
from exchange.checker.properties.shared_cancellation import any_groups
from exchange.checker.tolerances import MAX_MISMATCHES, RTOL_CANCEL, RTOL_DIRECTION, TINY, at_precision, pattern_tol
from exchange.core.coefficients import Engine
from exchange.core.events import events
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import PROPERTY_SUMMARIES

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
        r_g, worst, used = direction_spread(cols)
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
    return exchangeability(base, kappa, variant, kappa_v, example.case, example.mutation.apply(example.case),
                           repr(example.mutation))


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
    res, informative, _ = _spread(kappa, kappa_v, base, b.layout.example.case, b.layout.example.mutation.apply(b.layout.example.case), tied)
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), informative | failed)


FEATURES_PROBE = "equal_rewards_different_features"
# Two responses X and Y after a shared prefix (1, 2): X is short and holds token 3, Y is
# long (it reaches the probe's length limit), its tokens (so its log-prob sums) differ.
_X, _Y = (1, 2, 3), (1, 2, 0, 1, 1, 2, 2)


# The reward levels the features probe cycles through: two of them above the centre, so
# that one-signed (positive-only) advantages have two non-zero levels to compare; all at
# or below 0, so that a truncated response whose reward a shaping sets to 0 sits above the
# centre (a positive-only estimator would give it nothing below it).
_LEVELS = (0.0, -0.75, -2.0, -2.0)
# A greedy baseline reward in the middle of the levels: a loss with no centre of its own
# then has advantages of both signs, as a centred one has (far from 0 the two rows of a
# shaping look parallel), and keeps a truncated response whose reward a shaping zeroes at
# 2, not at the 0 a mask would give.
_BASELINE = -1.0


def _cycled(engine: Engine, probe: Probe) -> tuple[torch.Tensor, list[Rollout], list[torch.Tensor]]:
    """Every row's shared-event coefficients at every reward level, ``[rows, levels x
    shared events]``, from one group of rows X, Y, X, Y, ... whose rewards are
    :data:`_LEVELS` rotated once per batch: every batch holds each (feature, level) pair
    once, so every group statistic (centre, std, length-weighted centre, token counts per
    micro-batch) is the same in all of them and each row keeps its weight."""
    n = len(_LEVELS)
    rows = tuple(r for _ in range(n) for r in (_X, _Y))
    batches = []
    for k in range(n):
        rewards = tuple(_LEVELS[(k + j // 2 + j % 2) % n] for j in range(2 * n))
        batches.append(build(replace(probe.case, groups=(GroupConfig(rows, rewards, baseline=_BASELINE),))))
    kappas = engine(batches)
    shared = common_prefix((_X, _Y))
    table = torch.zeros(2 * n, n, shared, dtype=kappas[0].dtype, device=kappas[0].device)
    for k, kappa in enumerate(kappas):
        for j in range(2 * n):
            table[j, (k + j // 2 + j % 2) % n] = kappa[j, :shared]  # row j holds this level in batch k
    return table.flatten(1), batches, kappas


def _sine(a: torch.Tensor, b: torch.Tensor, floor: float) -> float:
    """The sine of the angle between rows ``a`` and ``b`` (each normalised, so that a
    small row counts as much as a large one); 0 when either is within ``floor`` of zero
    (its direction is round-off)."""
    na, nb = float(a.norm()), float(b.norm())
    if na <= floor or nb <= floor:
        return 0.0
    cos = float((a @ b) / (na * nb))
    return max(0.0, 1.0 - cos * cos) ** 0.5


def _features_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """Responses with equal verifiable rewards but different features (length, a token,
    log-prob sums), on-policy. A row of X's coefficient on shared event ``e`` at reward
    level ``r`` is ``w (A(X, r) + m_e)`` and a row of Y's ``w' (A(Y, r) + m_e)`` (``w``
    any weight of the row, fixed by :func:`_cycled`'s rotation; ``m_e`` an additive event
    term). Without a shaping ``A(X, .) = A(Y, .)``, so the two rows are proportional over
    levels and events (rank 1); a reward shaped by the features makes them differ by more
    than a factor: M7 (THEORY.md section 4). Its ``exchangeable`` evaluation is the sine
    of the angle between rows 0 (X) and 1 (Y), each normalised (a row that a shaping
    brings near 0 counts as much as a large one; only an exact 0 has no direction). The
    noise floor is measured: rows of the same feature at other positions
    are proportional in exact arithmetic whatever the loss, so their own angle is the
    round-off; M7 needs the angle above :func:`pattern_tol` and four times that floor. Run
    without the length limit first (a mask after centring drops Y), then with it (a
    reward set to 0 on truncated responses needs one)."""
    result = ProbeResult(probe)
    tol = pattern_tol(engine.precision)
    for limit in (None, probe.case.length_limit):
        table, batches, kappas = _cycled(engine, replace(probe, case=replace(probe.case, length_limit=limit)))
        if not bool(torch.isfinite(table).all()):
            continue
        # only an exact 0 has no direction: a small row's own round-off shows in the floor
        # (its copies at other positions disagree as much)
        res = _sine(table[0], table[1], TINY)
        floor = max(_sine(table[j], table[j + 2], TINY) for j in range(table.shape[0] - 2))
        if NAME not in result.evaluations or res > result.evaluations[NAME].residual:
            result.evaluations[NAME] = Evaluation(res, True, batches[0], kappas[0],
                                                  note=f"probe {probe.name}: {probe.description}")
        result.found = m7_feature_shaping.feature_rows(res, floor, tol, f"probe {probe.name}: {probe.description}")
        if result.found:
            break
    return result


PROFILE_PROBE = "event_profile"
# Four shared events with different behaviour probabilities, then a distinct token.
_PROFILE = GroupConfig(responses=((1, 2, 3, 1, 0), (1, 2, 3, 1, 2), (1, 2, 3, 1, 3), (1, 2, 3, 1, 1)),
                       rewards=(4.0, 0.0, 0.0, 4.0))


def _profile_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """An additive event term in a mixed group (THEORY.md section 4, M6): on-policy a
    response's coefficient on shared event ``e`` is ``w_i (A_i + m_e)``, so the matrix
    ``[responses, shared events]`` has rank 2 when ``m_e`` varies over the events (and
    rank 1 without it: a weight of the event alone multiplies the whole column). The
    reward-dependent part ``w_i (A_i(R) - A_i(R'))`` (:func:`second_rewards`) has rank 1
    in both cases; a token weight from response statistics (M5) keeps rank 2 there, so
    M6 is named only when the difference is rank 1 up to :func:`pattern_tol` and its own
    second singular value (the measured round-off, four times). Reaches a term that only
    mixed groups show (tied groups dropped by a filter); a constant gradient (k1) is an
    offset of the advantages on-policy and shows nowhere here."""
    result = ProbeResult(probe)
    rollout = build(replace(probe.case, off_policy=False))
    other = rollout.with_fields({"rewards": second_rewards(rollout.rewards, rollout)})
    kappa, kappa2 = engine([rollout, other])
    shared = common_prefix(probe.case.groups[0].responses)
    raw, diff = kappa[:, :shared], (kappa - kappa2)[:, :shared]
    if not (bool(torch.isfinite(raw).all()) and bool(torch.isfinite(diff).all())):
        return result
    res, floor = second_singular_ratio(raw), second_singular_ratio(diff)
    result.evaluations[NAME] = Evaluation(res, True, rollout, kappa, note=f"probe {probe.name}: {probe.description}")
    result.found = m6_additive_term.varying_profile(res, floor, pattern_tol(engine.precision),
                                                    f"probe {probe.name}: {probe.description}")
    return result


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
    variant_of_case = probe.mutation.apply(example.case)
    ex = exchangeability(base, kappa, variant, kappa_v, example.case, variant_of_case, repr(probe.mutation))
    ex.note = f"probe {probe.name}: {probe.description}"
    result.evaluations[NAME] = ex
    # (C) on both rollouts: the base when it fails (smaller), else the variant.
    for rollout, kap in ((base, kappa), (variant, kappa_v)):
        evs = events(rollout)
        res = float(cancellation(kap[None], evs, evs.shared)[0])
        mism = cancellation_mismatches(rollout, kap, evs, evs.shared, RTOL_CANCEL)
        result.evaluations[shared_cancellation.NAME] = Evaluation(res, True, rollout, kap, mism, note=ex.note)
        if res > RTOL_CANCEL:
            break
    dex = ex
    if dk is not kappa:
        dex = exchangeability(base, dk, variant, dk_v, example.case, variant_of_case, repr(probe.mutation))
    finite = bool(torch.isfinite(dk).all()) and bool(torch.isfinite(dk_v).all())
    tol = at_precision(RTOL_DIRECTION, engine.precision)
    if not (finite and dex.residual > tol):
        return result
    if dex is not ex:
        result.decided_on = dex
    if probe.isolates:  # the signature builds its own contrasts: the base need not be exchangeable
        result.found = probe.signature(engine, probe, dex)
        return result
    base_only = exchangeability(base, dk, base, dk, example.case, example.case, "base")
    if base_only.residual <= tol:
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
)
PROBES += (
    Probe(
        FEATURES_PROBE,
        "equal rewards, different response features (length 3 with token 3 vs length 7 reaching the length "
        "limit), rows X, Y, X, Y, ... whose rewards 0, -0.75, -2, -2 rotate over four batches, on-policy, every "
        "entropy 1",
        NAME, "M7", Case(groups=(GroupConfig((_X, _Y), (1.0, 0.0)),), entropy_all=1.0, length_limit=7),
        run=_features_probe,
    ),
    Probe(
        PROFILE_PROBE,
        "one mixed group sharing four events of different behaviour probabilities, on-policy, every entropy 1",
        NAME, "M6", Case(groups=(_PROFILE,), entropy_all=1.0,
                         old_prob=(((0, 1), 0.5), ((0, 1, 2), 0.1), ((0, 1, 2, 3), 0.25), ((0, 1, 2, 3, 1), 0.05))),
        run=_profile_probe,
    ),
)

PROPERTY = Property(
    name=NAME,
    summary=PROPERTY_SUMMARIES[NAME],
    theory="THEORY.md s2 (E); T2, T5",
    tolerance=RTOL_DIRECTION,
    layout=layout,
    evaluate=evaluate,
    evaluate_batch=evaluate_batch,
    probes=PROBES,
    run_probe=run_probe,
)
