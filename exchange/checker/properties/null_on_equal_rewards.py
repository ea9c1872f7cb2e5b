"""A group whose rewards are all equal gets zero coefficients: (Z) with ``A = 0``
(THEORY.md section 2). Tied groups keep only what does not scale with the advantage,
so an additive event term (M6) shows here however small it is next to the advantages.
The probe: a tied group beside a mixed one (a centre that is not the group's own: M4).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from exchange.checker import generators
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout, placeholder
from exchange.checker.properties.base import (BatchInputs, BatchResult, Evaluation, Probe, ProbeResult, Property,
                                              ShrinkRules, configurations)
from exchange.checker.properties.residuals import (as_residual, fmt, judged_by_response, lifted_ties, per_event,
                                                   reference_rewards, tied_groups, with_reference_rewards)
from exchange.checker.tolerances import (MAX_MISMATCHES, RESOLUTION, RTOL_CANCEL, RTOL_EQUAL, TINY, ZERO_COLUMN,
                                        at_precision, level_noise, pattern_tol)
from exchange.core.coefficients import Engine
from exchange.core.events import events
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import PROPERTY_SUMMARIES, Regime

NAME = "null_on_equal_rewards"


def layout(d: Draw, regime: str) -> Layout:
    """A tied group first, then up to two arbitrary groups."""
    groups = [generators.group(d) for _ in range(1 + d.integer(0, 2))]
    case = Case(groups=tuple(placeholder(g) for g in groups), off_policy=Regime(regime).off_policy)
    kinds = (("tied",),) + (generators.REWARD_KINDS,) * (len(groups) - 1)
    return Layout(Example(case), kinds, (False,) * len(groups))


def _residual(kappa, tied_rows, reference=None):
    """``max |kappa|`` over the tied rows over ``max |kappa|``, ``[K]`` (kappa ``[K, N, T]``).
    ``reference``: the same layout's coefficients at
    :func:`~exchange.checker.properties.residuals.reference_rewards` (every group mixed):
    the scale is then the larger of the two, so that a batch of tied groups only is judged
    against what the loss gives it when its rewards differ, not against its own noise
    (THEORY.md section 2, round-off per event)."""
    scale = kappa.abs().flatten(1).amax(1) if reference is None else _scale(kappa, reference)
    worst = torch.where(tied_rows[..., None], kappa.abs(), torch.zeros_like(kappa)).flatten(1).amax(1)
    return as_residual(worst / (scale + TINY))


def _judged(res: Tensor, kappa: Tensor, lift: Tensor, scale: Tensor, tied_rows: Tensor, tolerance: float,
            precision: str) -> Tensor:
    """``res [K]`` judged against the tied rows' response to :func:`~exchange.checker.properties.residuals.lifted_ties` rewards
    (``lift``, coefficients ``[K, N, T]``), in units of ``scale [K]``, scaled to the
    ``tolerance`` it will be compared with
    (:func:`~exchange.checker.properties.residuals.judged_by_response`)."""
    moved = torch.where(tied_rows[..., None], (lift - kappa).abs(), torch.zeros_like(kappa))
    return judged_by_response(res, moved.flatten(1).amax(1) / (scale + TINY), tolerance, precision)


def _exact(rewards: Tensor, tied_rows: Tensor) -> Tensor:
    """``[K]``: every tied response's reward is exactly 0 (``rewards``, ``tied_rows``
    ``[K, N]``). Every group-, batch- or greedy-centred advantage of those rows is then
    an exact 0 in any precision, so a coefficient left there is no round-off."""
    return tied_rows.any(-1) & ((rewards == 0) | ~tied_rows).all(-1)


def _final_residual(kappa: Tensor, tied_rows: Tensor, lift: Tensor, reference: Tensor, exact: Tensor,
                    precision: str) -> Tensor:
    """``[K]``: the residual of configurations whose raw residual exceeded the tolerance,
    in units of the larger of their own and the reference rewards' coefficients; judged
    against the tied rows' response to :func:`~exchange.checker.properties.residuals.lifted_ties` rewards, except where ``exact``:
    there no round-off is to be measured, and a centre that is not the group's own
    follows the lift by ``sqrt(eps)`` of a unit (0.09 in bf16), which would hide a small
    event term."""
    res = _residual(kappa, tied_rows, reference)
    judged = _judged(res, kappa, lift, _scale(kappa, reference), tied_rows, at_precision(RTOL_EQUAL, precision),
                     precision)
    return torch.where(exact, res, judged)


def _scale(kappa: Tensor, reference: Tensor) -> Tensor:
    """``[K]``: the larger of ``max|kappa|`` and the same at reference rewards."""
    return torch.maximum(kappa.abs().flatten(1).amax(1),
                         torch.nan_to_num(reference.abs().flatten(1).amax(1), nan=0.0, posinf=0.0))


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    (kappa,) = engine([rollout])
    tied_rows = tied_groups(rollout.rewards[None], rollout)[0][rollout.group_index]  # [N]
    res = float(_residual(kappa[None], tied_rows[None])[0])
    exact = _exact(rollout.rewards[None], tied_rows[None])
    if res > RTOL_EQUAL:
        lift, ref = engine([rollout.with_fields({"rewards": lifted_ties(rollout.rewards[None], tied_rows[None],
                                                                    engine.precision)[0]}),
                            with_reference_rewards(rollout)])
        res = float(_final_residual(kappa[None], tied_rows[None], lift[None], ref[None], exact,
                                    engine.precision)[0])
    mism = []
    if res > RTOL_EQUAL:
        scale = float(kappa.abs().max())
        for i in tied_rows.nonzero().flatten().tolist()[:MAX_MISMATCHES]:
            L = int(rollout.lengths[i])
            if float(kappa[i, :L].abs().max()) > RTOL_EQUAL * scale:
                mism.append(
                    f"response {i} (group={int(rollout.group[i])}, all rewards {float(rollout.rewards[i]):g}): "
                    f"kappa={fmt(kappa[i, :L])}"
                )
    return Evaluation(res, bool(tied_rows.any()), rollout, kappa, mism, exact=bool(exact[0]))


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    _, kappa, failed = b.coefficients(rollout, fields)
    tied_rows = tied_groups(b.rewards, rollout)[:, rollout.group_index]  # [K, N]
    res = _residual(kappa, tied_rows)
    todo = (res > RTOL_EQUAL).nonzero().flatten()
    if todo.numel():
        sub = {k: v[todo] for k, v in fields.items()}
        _, lift, _ = b.coefficients(rollout, {**sub, "rewards": lifted_ties(b.rewards[todo], tied_rows[todo], b.precision)})
        _, ref, _ = b.coefficients(rollout, {**sub, "rewards": reference_rewards(b.rewards[todo], rollout)})
        k = kappa[todo]
        res = res.clone()
        res[todo] = _final_residual(k, tied_rows[todo], lift, ref, _exact(b.rewards[todo], tied_rows[todo]),
                                    b.precision)
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), tied_rows.any(1) | failed)


def run_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """The tied group beside a mixed one, on-policy. What keeps coefficients on a tied
    group names the cause (THEORY.md section 2 and section 4, attribution rules): the
    group's shared events cancel: zero-sum advantages of a reward shaped by the responses'
    features (M7); they keep mass that moves with the group's reward level: a centre
    that is not the group's own (M4); mass that does not: an additive event term (M6)."""
    result = ProbeResult(probe)
    ev = evaluate(engine, Example(probe.case), Regime.ON_POLICY)
    result.evaluations[NAME] = ev
    if not (ev.residual > RTOL_EQUAL and bool(torch.isfinite(ev.kappa).all())):
        return result
    result.mechanism = _cause(engine, ev, probe)
    if "M6" in result.mechanism.split("+"):
        # All advantages of the tied group are 0 and its coefficients are not: kappa is not
        # A_i h(e) there ((E), section 2) and its shared events keep K_e != 0 ((C)).
        for name in ("exchangeable", "shared_cancellation"):
            result.evaluations[name] = replace(ev, note=f"probe {probe.name}: a tied group keeps an additive event "
                                                        "term (all advantages 0, coefficients not)")
    return result


# A tied group whose responses share a three-token prefix and differ in every feature a
# shaping reads: lengths 4, 5, 4, 6, token 3 in the first response only, different tokens
# (so different log-prob sums) after the prefix.
_FEATURE_GROUP = ((1, 2, 0, 3), (1, 2, 0, 1, 1), (1, 2, 0, 2), (1, 2, 0, 1, 2, 2))
_PREFIX = 3
# Truncates the lengths 5 and 6 of the feature group, not the 4s.
_FEATURE_LIMIT = 5
# The rewards' magnitude in the level batches (levels 0 and 1, shaped by at most 1).
_LEVEL_MAGNITUDE = 2.0


def _at_level(engine: Engine, case: Case, responses: tuple, level: float = 0.0,
              ) -> tuple[Rollout, torch.Tensor, torch.Tensor]:
    """``case`` with these groups of ``responses``, every reward of the batch ``level``
    (at 0 every centred advantage is an exact 0; at any level every group's own centre,
    and the batch's, equals it): ``(rollout, kappa [N, T], kappa at reference rewards
    [N, T])``, the latter setting the magnitudes round-off is judged against."""
    groups = tuple(GroupConfig(tuple(rs), (level,) * len(rs)) for rs in responses)
    rollout = build(replace(case, groups=groups))
    kappa, ref = engine([rollout, with_reference_rewards(rollout)])
    return rollout, kappa, ref


def _spread(x: torch.Tensor) -> float:
    return float(x.max() - x.min()) if x.numel() else 0.0


def _crossings(m0: torch.Tensor, m1: torch.Tensor, tol: float, floor: float) -> set[str]:
    """M6 and M7 from coefficients ``[G, P]`` (responses x shared events) that move with
    the reward level of the whole batch: every response's advantage is ``lambda + c_i``
    up to a factor (a greedy baseline, raw rewards: no centre of the group's own), so
    ``kappa = w_i (k (lambda + c_i) + m_e)``. Its zero crossing ``-kappa(0) / (kappa(1) -
    kappa(0))`` is free of ``w_i``: one that varies over the events of a response is an
    event term (M6); one that varies over the responses, or responses whose coefficient
    does not move while others do, or a level that moves some responses up and others
    down, is a shaping that reads their features (M7); one
    crossing for all responses, away from the level 0 (where every baseline of the probe
    sits), is a remainder the same for every reward vector: M6 (THEORY.md section 2). An event term
    next to a shaping adds a constant to each ``c_i`` that no level can separate: it is not
    named then (exchange.objectives.interactions, "additive offset inside a non-zero-sum
    estimator"). ``floor``: the round-off of a coefficient (absolute); ``tol``: relative."""
    d = m1 - m0
    moving = d.abs() > floor
    live = m0.abs() > floor
    names: set[str] = set()
    if bool((live & ~moving).any(dim=1).logical_and(~moving.any(dim=1)).any()) and bool(moving.any()):
        names.add("M7")  # a response the level does not reach, beside others it moves
    if not bool(moving.any()):
        return names
    if bool((d[moving] > 0).any()) and bool((d[moving] < 0).any()):
        # a centre moves every advantage one way and an event term does not move: a level
        # that raises some responses and lowers others reaches them through their features,
        # a shaping that needs a reward to act on (a truncated response's reward set to 0)
        names.add("M7")
    cross = torch.where(moving, -m0 / torch.where(moving, d, torch.ones_like(d)), torch.zeros_like(d))
    unit = max(1.0, float(cross[moving].abs().max()))
    # a crossing is known to floor / |d| (the round-off of both evaluations, over the slope)
    slack = tol * unit + 2 * floor / float(d.abs()[moving].min())
    for i in range(cross.shape[0]):
        if _spread(cross[i][moving[i]]) > slack:
            names.add("M6")
    for e in range(cross.shape[1]):
        if _spread(cross[:, e][moving[:, e]]) > slack:
            names.add("M7")
    # one crossing for all speaks for an event term only where it was compared across
    # every feature of the group (a mask that drops some rows leaves responses of one
    # length, whose common crossing may be a length shaping)
    if not names and bool(moving.any(dim=1).all()) and bool((cross[moving].abs() > slack).all()):
        names.add("M6")
    return names


def _tied_features(engine: Engine, probe: Probe) -> set[str]:
    """M6 and M7 from the coefficients of :data:`_FEATURE_GROUP`'s shared-prefix events,
    on-policy, every reward of the batch at one level (the probe's other groups too, so
    that no group's or batch's centre moves away from it), once without a length limit
    and once with one that truncates two of the four responses. With every ratio 1, a
    response's coefficient on shared event ``e`` is ``w_i (a_i + m_e)``: ``a_i`` its
    advantage, ``m_e`` an additive event term (M6, the same for every occurrence), ``w_i``
    any per-response weight. When the level moves the coefficients (no centre of the
    group's own) :func:`_crossings` decides. Otherwise every ``a_i`` comes from a
    shaping (M7: its advantages of a tied group are not 0) and the matrix ``[G, 3]`` at
    level 0 has rank 2 when both are present; rank 1 with an event profile that varies is
    M6; rank 1 with a constant profile is M7 when the responses' values have both signs
    (shaped advantages) and ``"?"`` when they share one: a constant additive gradient
    such as k1's, or one-signed shaped advantages (a positive-only estimator); the caller
    decides with :func:`_additive_on_identical`. Entries below ``1e-9`` of the same
    layout's coefficients at mixed rewards are round-off and count as 0. Off-policy, a
    surrogate's ``g(rho_e)`` would multiply ``a_i`` by a profile of its own: the terms
    that vanish on-policy are left to :func:`_additive_on_identical`."""
    tol = pattern_tol(engine.precision)
    out: set[str] = set()
    others = tuple(g.responses for g in probe.case.groups[1:])
    for limit in (None, _FEATURE_LIMIT):
        case = replace(probe.case, off_policy=False, ratio=(), length_limit=limit)
        rollout, k0, ref = _at_level(engine, case, (_FEATURE_GROUP, *others), 0.0)
        _, k1, _ = _at_level(engine, case, (_FEATURE_GROUP, *others), 1.0)
        rows = (rollout.group_index == 0).nonzero().flatten()
        m0, m1 = k0[rows, :_PREFIX], k1[rows, :_PREFIX]
        per_unit = float(ref[rows, :_PREFIX].abs().max())
        scale = max(float(m0.abs().max()), float(m1.abs().max()), per_unit)
        if not bool(torch.isfinite(m0).all() and torch.isfinite(m1).all()) or scale == 0:
            continue
        floor = max(tol * scale, level_noise(engine.precision, _LEVEL_MAGNITUDE, per_unit))
        if float((m1 - m0).abs().max()) > floor:
            out |= _crossings(m0, m1, tol, floor)
            continue
        if float(m0.abs().max()) <= max(ZERO_COLUMN * scale, floor):
            continue
        u_, s, vh = torch.linalg.svd(m0)
        if float(s[1]) > tol * float(s[0]):
            out |= {"M6", "M7"}
            continue
        v = vh[0]
        if float(v.max() - v.min()) > tol * float(v.abs().max()):
            out.add("M6")
            continue
        u = u_[:, 0] * s[0] * v.mean()  # the responses' values, sign restored
        floor = tol * float(u.abs().max())
        out.add("M7" if float(u.max()) > floor and float(u.min()) < -floor else "?")
    return out


def _additive_on_identical(engine: Engine, probe: Probe, shaped: bool = False) -> bool:
    """Whether one group of copies of the tied group's first response (as many as the
    probe's batch holds), every reward 0, keeps ``K_e != 0`` on a shared event beyond round-off,
    without moving when every reward moves to 1. Every response has the same features,
    so a shaping gives every one the same reward and every centre (the group's, the
    batch's, one group here) the same value: every such advantage is an exact 0 and what is left is
    an additive event term (M6). Coefficients that move with the level have no centre of
    their own (a greedy baseline keeps ``A_i = R'_i - b``): at level 0 every reward equals
    every baseline, so without a shaping (``shaped``: :func:`_tied_features` found M7) each
    advantage is still an exact 0 in any precision and any ``K_e`` left is an event term,
    however small next to the round-off of other levels; with a shaping the copies keep
    ``A_i = s_i``, which :func:`_tied_features` reads."""
    first = probe.case.groups[0].responses[0]
    # one group: events are keyed by their group, so copies in other groups would carry
    # other per-event values (a KL shaping would differ, and a batch centre with it)
    copies = ((first,) * sum(len(g.responses) for g in probe.case.groups),)
    rollout, kappa, ref = _at_level(engine, probe.case, copies, 0.0)
    _, moved, _ = _at_level(engine, probe.case, copies, 1.0)
    evs = events(rollout)
    K, mass, _ = (x[0] for x in per_event(kappa[None], evs, ref[None]))
    rows = rollout.group_index == 0
    per_unit = float(ref[rows].abs().max())
    floor = max(pattern_tol(engine.precision) * max(float(kappa[rows].abs().max()), per_unit),
                level_noise(engine.precision, _LEVEL_MAGNITUDE, per_unit))
    if shaped and float((moved - kappa)[rows].abs().max()) > floor:
        return False
    mine = torch.zeros(evs.count, dtype=torch.bool, device=kappa.device)
    mine[evs.ids[rows][evs.ids[rows] >= 0]] = True
    return bool((mine & evs.shared & (mass > 0) & (K.abs() > RTOL_CANCEL * mass)).any())


def _cause(engine: Engine, ev: Evaluation, probe: Probe) -> str:
    """The mechanisms that keep coefficients on the tied group, ``"+"``-joined: M4 when
    the group's reward level moves its shared events' ``K_e`` (the reward-dependent part
    of ``K_e`` is not zero-sum) by moving every tied coefficient one way; M6
    and M7 from :func:`_tied_features` (M6 also when copies of one response keep
    ``K_e != 0``, :func:`_additive_on_identical`); M7 also when nothing else explains
    shared events that carry mass and cancel at the group's own level (a shaping that
    needs a reward to act on, such as a truncated response's reward set to 0)."""
    rollout, kappa = ev.rollout, ev.kappa
    tied_rows = tied_groups(rollout.rewards[None], rollout)[0][rollout.group_index]  # [N]
    evs = events(rollout)
    tied_events = torch.zeros(evs.count, dtype=torch.bool, device=kappa.device)
    tied_events[evs.ids[tied_rows][evs.ids[tied_rows] >= 0]] = True
    which = evs.shared & tied_events
    names = set()
    level = 1.0 + rollout.group_index.to(rollout.rewards.dtype)
    magnitude = float((rollout.rewards + level).abs().max()) + 1.0
    # the coefficients' response to a small move of one tied reward: what a unit of reward
    # is worth there (a std over shaped rewards that barely differ amplifies it)
    delta = max(8 * RESOLUTION[engine.precision], 1e-6) * magnitude
    nudged = rollout.rewards.clone()
    nudged[tied_rows.nonzero()[0]] += delta
    moved, poked = engine([rollout.with_fields({"rewards": rollout.rewards + level}),
                           rollout.with_fields({"rewards": nudged})])
    per_unit = float((poked - kappa)[tied_rows].abs().max()) / delta
    scale = float(kappa[tied_rows].abs().max())
    # A centre that is not the group's own moves the tied advantages by a share of the
    # level (O(0.1-1) here); the level also changes how the rewards round, by a few
    # epsilons of their magnitude times what a unit of reward is worth (level_noise),
    # however small the tied group's own (shaped) advantages are
    tol = pattern_tol(engine.precision)
    floor = max(tol * scale, level_noise(engine.precision, magnitude, per_unit))
    if float((moved - kappa)[tied_rows].abs().max()) > floor:
        # a centre that is not the group's own moves the tied group's K_e with the level;
        # a shaping that moves with it (a reward set to 0) keeps them cancelling, and an
        # additive event term is the same at both levels (the difference removes it)
        Kd = per_event((moved - kappa)[None], evs)[0][0]
        mass = torch.maximum(per_event(moved[None], evs)[1][0], per_event(kappa[None], evs)[1][0])
        # a centre that is not the group's own shifts every tied advantage one way; a
        # zero-sum redistribution (a shaping the level reaches on some responses only)
        # moves them both ways, and changes K_e only through unequal weights (M3)
        change = (moved - kappa)[tied_rows][:, 0]
        live = change[change.abs() > floor]
        one_way = bool(live.numel()) and (bool((live > 0).all()) or bool((live < 0).all()))
        if one_way and bool((which & (Kd.abs() > torch.clamp(tol * mass, min=floor)) & (mass > 0)).any()):
            names.add("M4")
    features = _tied_features(engine, probe)
    additive = ("M6" not in features or "?" in features) and _additive_on_identical(engine, probe, "M7" in features)
    if "?" in features:  # one-signed, profile constant: k1-like if copies keep it, else shaping
        features = (features - {"?"}) | ({"M6"} if additive else {"M7"})
    names |= features
    if additive:
        names.add("M6")
    if not names:
        K, mass, _ = (x[0] for x in per_event(kappa[None], evs))
        live = which & (mass > ZERO_COLUMN * max(scale, TINY))
        cancel = max(RTOL_CANCEL, tol)  # a cancelling sum at the loss's precision
        if bool(live.any()) and bool((K[live].abs() <= cancel * mass[live]).all()):
            names.add("M7")
    return "+".join(sorted(names)) or "M4"


PROBES = (
    Probe(
        "tied_group",
        "one group with all rewards 0 beside a mixed group, on-policy",
        NAME,
        "M4",
        Case(groups=(GroupConfig(((1, 2), (1, 3)), (0.0, 0.0)), GroupConfig(((1, 2), (2, 2)), (1.0, 0.0)))),
    ),
    Probe(
        "tied_group_off_policy",
        "the same tied group beside a mixed group, off-policy (terms in log rho vanish on-policy)",
        NAME,
        "M4",
        Case(groups=(GroupConfig(((1, 2), (1, 3)), (0.0, 0.0)), GroupConfig(((1, 2), (2, 2)), (1.0, 0.0))),
             off_policy=True, ratio=(((0, 1), 1.5), ((0, 1, 2), 0.7), ((0, 1, 3), 1.25))),
        off_policy_only=True,
    ),
    Probe(
        "tied_group_truncated",
        "a tied group whose longest response hit the length limit beside a mixed group, on-policy",
        NAME,
        "M4",
        # tied at 1, not 0: a reward set to 0 on truncated responses must have one to change
        Case(groups=(GroupConfig(((1, 2), (1, 3), (1, 2, 2)), (1.0, 1.0, 1.0)), GroupConfig(((1, 2), (2, 2)), (1.0, 0.0))),
             length_limit=3),
    ),
)

PROPERTY = Property(
    name=NAME,
    summary=PROPERTY_SUMMARIES[NAME],
    theory="THEORY.md s2 (Z) with A = 0",
    tolerance=RTOL_EQUAL,
    layout=layout,
    evaluate=evaluate,
    evaluate_batch=evaluate_batch,
    shrink=ShrinkRules(keep_first_group=True),
    probes=PROBES,
    run_probe=run_probe,
)
