"""What keeps coefficients on a tied group (THEORY.md section 2, "Tied groups", and
section 4, attribution rules; docs/properties.md, ``tied_group``): never assuming a tied
group's advantages are 0, its coefficients are read from how they move with the tied
level and from the response features. The readings are the mechanisms' own (M4, M6, M7
modules); this module builds the batches they read (:func:`cause`, run by the (N) probes).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.mechanisms import m6_additive_term, m7_feature_shaping
from exchange.checker.mechanisms.evidence import above, directions
from exchange.checker.mechanisms.m4_not_zero_sum import follows_level
from exchange.checker.properties.residuals import per_event, tied_groups, with_reference_rewards
from exchange.checker.tolerances import RTOL_CANCEL, TINY, ZERO_COLUMN, pattern_tol
from exchange.core.events import events
from exchange.core.rollout import Rollout

__all__ = ["cause", "level_free"]


# A tied group whose responses share a three-token prefix and differ in every feature a
# shaping reads: lengths 4, 5, 4, 6, token 3 in the first response only, different tokens
# (so different log-prob sums) after the prefix.
_FEATURE_GROUP = ((1, 2, 0, 3), (1, 2, 0, 1, 1), (1, 2, 0, 2), (1, 2, 0, 1, 2, 2))
_PREFIX = 3
# Truncates the lengths 5 and 6 of the feature group, not the 4s.
_FEATURE_LIMIT = 5
# The tied levels compared (every reward of the batch at one of them), each batch with
# every baseline reward (``Rollout.baseline_rewards``) at the first level.
_LEVELS = (0.0, 1.0)
# (level, baseline reward) of each batch: the levels above, then the last level with the
# baseline rewards moved to it. A loss that subtracts the baseline rewards (ReMax's greedy
# baseline) gives the first and the last batch the same coefficients (every reward equal
# to its baseline reward in both), and its advantage is 0 there by definition.
_AT_LEVELS = tuple((level, _LEVELS[0]) for level in _LEVELS)
_AT_BASELINE = ((_LEVELS[-1], _LEVELS[-1]),)


def _levels(engine, case: Case, responses: tuple,
            points: tuple = _AT_LEVELS) -> tuple[Rollout, list[torch.Tensor], torch.Tensor]:
    """``case`` with these groups of ``responses``, every reward of the batch at each
    ``(level, baseline reward)`` of ``points`` (at the first of :data:`_AT_LEVELS`, 0,
    every reward equals every centre the rollout gives: its group's, the batch's and its
    baseline reward; at any level every group's own centre, and the batch's, equals it):
    ``(rollout at the first point, kappa [N, T] per point, kappa at reference rewards
    [N, T])``, the latter setting the magnitudes round-off is judged against."""
    rollouts = [build(replace(case, groups=tuple(GroupConfig(tuple(rs), (level,) * len(rs), baseline=base)
                                                 for rs in responses)))
                for level, base in points]
    *kappas, ref = engine(rollouts + [with_reference_rewards(rollouts[0])])
    return rollouts[0], kappas, ref


def _floor(engine, kappas: list[torch.Tensor], reference: float) -> float:
    """The round-off of a tied coefficient between two levels: the pattern tolerance
    (:func:`~exchange.checker.tolerances.pattern_tol`) of the largest coefficient, at the
    tied levels or at mixed ``reference`` rewards (a tied group barely moved by the level
    is judged against what the loss gives it when its rewards differ)."""
    return pattern_tol(engine.precision) * max(max(float(k.abs().max()) for k in kappas), reference)


def _tied_features(engine, probe) -> list:
    """M6 and M7 from :data:`_FEATURE_GROUP`'s shared-prefix coefficients ``[G, 3]``,
    on-policy, the whole batch at each tied level, without a length limit and with one
    that truncates two of the four responses. With every ratio 1 a response's coefficient
    on shared event ``e`` is ``w_i (a_i + m_e)``. Coefficients that follow the level are
    read by their zero crossings (M6's and M7's ``tied_offsets``; from the baseline reward
    where the loss subtracts it and no layout shows a shaping of the responses the level
    moves, M6's ``one_crossing``); the others by their directions (:func:`level_free`)."""
    tol = pattern_tol(engine.precision)
    out: list = []
    following: list = []  # (m0, change, floor, moved, at_baseline) of each layout the level moves
    others = tuple(g.responses for g in probe.case.groups[1:])
    for limit in (None, _FEATURE_LIMIT):
        case = replace(probe.case, off_policy=False, ratio=(), length_limit=limit)
        rollout, (k0, k1, kb), ref = _levels(engine, case, (_FEATURE_GROUP, *others), _AT_LEVELS + _AT_BASELINE)
        rows = (rollout.group_index == 0).nonzero().flatten()
        m0, m1, mb = k0[rows, :_PREFIX], k1[rows, :_PREFIX], kb[rows, :_PREFIX]
        if not bool(torch.isfinite(m0).all() and torch.isfinite(m1).all() and torch.isfinite(mb).all()):
            continue
        floor = _floor(engine, [m0, m1, mb], float(ref[rows, :_PREFIX].abs().max()))
        moved = f"probe {probe.name}: a tied group of different features moved by one reward level" + \
            (f" (length limit {limit})" if limit else "")
        if float((m1 - m0).abs().max()) > floor:
            at_baseline = float((mb - m0).abs().max()) <= floor  # the loss subtracts the baseline rewards
            following.append((m0, m1 - m0, floor, moved, at_baseline))
            out += m7_feature_shaping.tied_offsets(m0, m1 - m0, floor, tol, moved)
        elif float(m0.abs().max()) > max(ZERO_COLUMN * float(ref[rows, :_PREFIX].abs().max()), floor):
            out += level_free(m0, tol, moved)
    unshaped = all(m6_additive_term.one_crossing(m0, change, floor, tol) for m0, change, floor, _, _ in following)
    for m0, change, floor, moved, at_baseline in following:
        out += m6_additive_term.tied_offsets(m0, change, floor, tol, moved, at_baseline and unshaped)
    return out


def level_free(m0: torch.Tensor, tol: float, moved: str = "") -> list:
    """M6 and M7 from a tied group whose coefficients ``m0 [G, P]`` do not move with the
    level (its own centre: every advantage exactly 0, so what is left is ``w_i (s_i +
    m_e)``, ``s_i`` a shaped advantage, ``m_e`` an event term). A second direction
    (relative second singular value beyond ``tol``) is both terms: M6 and M7. One
    direction is read by M6 on its event profile (``tied_profile``) and by M7 on its
    responses' values (``tied_signs``)."""
    found = directions(m0)
    if found is None:
        return []
    u, s, vh, second = found
    if second > tol:
        pattern = "the tied coefficients have two directions (an event term beside a shaping)"
        return above("M6", moved, pattern, second, tol) + above("M7", moved, pattern, second, tol)
    return (m6_additive_term.tied_profile(vh[0], tol, moved)
            + m7_feature_shaping.tied_signs(u[:, 0] * s[0] * vh[0].mean(), tol, moved))


def _on_copies(engine, probe) -> list:
    """M6's ``kept_on_copies`` on one group of copies of the tied group's first response
    (as many as the probe's batch holds), in the probe's regime, at each tied level."""
    first = probe.case.groups[0].responses[0]
    # one group: events are keyed by their group, so copies in other groups would carry
    # other per-event values (a KL shaping would differ, and a batch centre with it)
    copies = ((first,) * sum(len(g.responses) for g in probe.case.groups),)
    rollout, (c0, c1), ref = _levels(engine, probe.case, copies)
    evs = events(rollout)
    K, mass, _ = (x[0] for x in per_event(c0[None], evs, ref[None]))
    floor = _floor(engine, [c0, c1], float(ref.abs().max()))
    mine = evs.shared & (mass > 0)
    return m6_additive_term.kept_on_copies(K[mine], mass[mine], c0[rollout.mask], (c1 - c0)[rollout.mask],
                                           RTOL_CANCEL, pattern_tol(engine.precision), floor,
                                           f"probe {probe.name}: copies of one response at tied levels")


def cause(engine, ev, probe) -> list:
    """The evidence for what keeps coefficients on the tied group: M4's ``follows_level``
    when each group's reward level moves by ``1 + g`` (``g`` its index, so that no batch
    centre follows); M6 and M7 from :func:`_tied_features` and :func:`_on_copies`; else
    M7's ``cancelling``. No evidence names no mechanism: (N)'s break is reported alone."""
    rollout, kappa = ev.rollout, ev.kappa
    tied_rows = tied_groups(rollout.rewards[None], rollout)[0][rollout.group_index]  # [N]
    level = 1.0 + rollout.group_index.to(rollout.rewards.dtype)
    (moved,) = engine([rollout.with_fields({"rewards": rollout.rewards + level})])
    floor = pattern_tol(engine.precision) * float(kappa[tied_rows].abs().max())
    out = follows_level((moved - kappa)[tied_rows][:, :1], floor,
                        f"probe {probe.name}: each group's rewards moved by 1 + its index")
    out += _tied_features(engine, probe)
    if "M6" not in {e.mechanism for e in out}:
        out += _on_copies(engine, probe)
    if not out:
        evs = events(rollout)
        tied_events = torch.zeros(evs.count, dtype=torch.bool, device=kappa.device)
        tied_events[evs.ids[tied_rows][evs.ids[tied_rows] >= 0]] = True
        K, mass, _ = (x[0] for x in per_event(kappa[None], evs))
        live = evs.shared & tied_events & (mass > ZERO_COLUMN * max(float(kappa[tied_rows].abs().max()), TINY))
        out = m7_feature_shaping.cancelling(K, mass, live, max(RTOL_CANCEL, pattern_tol(engine.precision)),
                                            f"probe {probe.name}: {probe.description}")
    return out
