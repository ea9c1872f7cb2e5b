"""The patterns that name a mechanism (THEORY.md section 4, attribution rules).

A probe's break names its mechanism only when the break has that mechanism's pattern:
each signature is ``(engine, probe, evaluation) -> mechanism id or ""``, attached to the
probes of the property modules (:mod:`exchange.checker.properties`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from exchange.checker.cases import GroupConfig, build, common_prefix
from exchange.checker.tolerances import TINY, ZERO_COLUMN, pattern_tol
from exchange.core.coefficients import Engine

__all__ = ["affine_in_rewards", "per_response_rescaling", "sign_split", "dropped_response"]


def affine_in_rewards(engine: Engine, probe, ev) -> str:
    """M4 from a baseline that is not the group mean (OPO's length-weighted one): every
    shared column of group 0 gives equal coefficients to responses with equal rewards."""
    rollout, kappa = ev.rollout, ev.kappa
    p = common_prefix(probe.case.groups[0].responses)
    rows = (rollout.group == 0).nonzero().flatten()
    rewards = rollout.rewards[rows]
    if p == 0:
        return ""
    tol = pattern_tol(engine.precision)
    for t in range(p):
        col = kappa[rows, t]
        scale = float(col.abs().max()) + TINY
        for r in rewards.unique():
            same = col[rewards == r]
            if float(same.max() - same.min()) > tol * scale:
                return ""
    return probe.mechanism


def dropped_response(engine: Engine, probe, ev) -> str:
    """M4 from a mask applied after centring: the mutated response crossed the length
    limit, and its first shared coefficient is exactly 0 in one rollout (truncated,
    dropped from the loss) and not in the other, while its reward, and so its
    advantage, did not change."""
    g, mutated = probe.mutation.group, probe.mutation.response
    if common_prefix(probe.case.groups[g].responses) == 0:
        return ""
    rows = (ev.rollout.group == g).nonzero().flatten()
    a, a_v = ev.kappa[rows, 0], ev.variant_kappa[rows, 0]
    scale = float(torch.maximum(a.abs().max(), a_v.abs().max()))
    zero, zero_v = abs(float(a[mutated])) <= ZERO_COLUMN * scale, abs(float(a_v[mutated])) <= ZERO_COLUMN * scale
    return probe.mechanism if zero != zero_v and scale > 0 else ""


def per_response_rescaling(engine: Engine, probe, ev) -> str:
    """M3: after the mutated response's suffix changed, every other response's first
    shared coefficient rescales by one common factor and the mutated one's by another (a
    per-response weight such as ``1/L_i``)."""
    g, mutated = probe.mutation.group, probe.mutation.response
    if common_prefix(probe.case.groups[g].responses) == 0:
        return ""
    rows = (ev.rollout.group == g).nonzero().flatten()
    alpha, alpha_v = ev.kappa[rows, 0], ev.variant_kappa[rows, 0]
    scale = float(alpha.abs().max())
    ok = alpha.abs() > ZERO_COLUMN * scale
    if not bool(ok[mutated]) or int(ok.sum()) < 2:  # the mutated one and at least one other
        return ""
    q = alpha_v / torch.where(ok, alpha, torch.ones_like(alpha))
    others = [float(q[i]) for i in range(len(q)) if i != mutated and bool(ok[i])]
    ref = others[0]
    tol = pattern_tol(engine.precision)
    same = all(abs(x - ref) <= tol * abs(ref) for x in others)
    return probe.mechanism if same and abs(float(q[mutated]) - ref) > tol * abs(ref) else ""


# Two reward vectors with the same signs, whether the loss centres them (mean 1 and 1.375)
# or not (a greedy or raw baseline): 4 and 6 above every centre, -4 and -2 below, far from
# it next to any shaping of the responses (all of the same length here). Every reward
# moves, and not by an affine map (5 = 1.25 * 4 but 8 != 1.25 * 6), so every advantage
# moves whatever the estimator, a std-scaled one included.
_SPLIT_REWARDS = ((4.0, -4.0, -2.0, 6.0), (5.0, -5.0, -2.5, 8.0))


def _moved_columns(engine: Engine, probe, rewards: tuple) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each reward vector of ``rewards``: the moved shared event's coefficients
    ``[G]`` before and after the probe's mutation, on the probe's one group, on-policy
    before the mutation (one engine call for all)."""
    grp = probe.case.groups[0]
    cases = []
    for r in rewards:
        case = replace(probe.case, off_policy=False, groups=(GroupConfig(grp.responses, r),))
        cases += [case, probe.mutation.apply(case)]
    t = max(len(r) for c in cases for g in c.groups for r in g.responses)
    kappas = engine([build(replace(c, pad_to=t)) for c in cases])
    pos = min(probe.mutation.position, len(cases[0].shared_keys(0)) - 1)
    return [(kappas[2 * k][:, pos], kappas[2 * k + 1][:, pos]) for k in range(len(rewards))]


def sign_split(engine: Engine, probe, ev) -> str:
    """M2 and M6 from a shared event moved across the trust region (THEORY.md section 4,
    attribution rules), on the probe's group of equal-length responses at two reward
    vectors of one order. On every occurrence the coefficient is ``w_i (g_i A_i + m)``
    after the move and ``w_i (A_i + m_1)`` before: ``g_i`` the surrogate's factor,
    ``m`` an additive event term, the same for every occurrence. The difference between
    the two reward vectors removes ``m``: ``q_i = dv_i / db_i = g_i``, whatever ``w_i``
    and whatever the estimator. M2 when ``g`` differs between the occurrences of
    advantages above and below the centre (the higher and lower rewards) by more than
    it varies within each; M6 when the remainder ``v_i - q_i b_i = w_i (m - g_i m_1)``
    is not 0 on every occurrence; a remainder on some occurrences only (0 on the
    others) is a term added to occurrences selected by their advantage: M2 and M6
    (KL-Cov). A mechanism's effect below :func:`pattern_tol` of the loss's precision is
    round-off."""
    (b1, v1), (b2, v2) = _moved_columns(engine, probe, _SPLIT_REWARDS)
    if not all(bool(torch.isfinite(x).all()) for x in (b1, v1, b2, v2)):
        return probe.mechanism
    tol = pattern_tol(engine.precision)
    db, dv = b1 - b2, v1 - v2
    moved = db.abs() > tol * (float(db.abs().max()) + TINY)  # occurrences whose advantage moved
    if not bool(moved.any()):
        return ""
    q = torch.where(moved, dv / torch.where(moved, db, torch.ones_like(db)), torch.zeros_like(db))
    rewards = torch.tensor(_SPLIT_REWARDS[0], dtype=q.dtype, device=q.device)
    high = rewards > rewards.median()
    names = []
    qh, ql = q[moved & high], q[moved & ~high]
    unit = float(q[moved].abs().max()) + TINY
    if qh.numel() and ql.numel():
        within = max(float(qh.max() - qh.min()), float(ql.max() - ql.min()))
        between = max(float(qh.max() - ql.min()), float(ql.max() - qh.min()))
        if between - within > tol * unit:
            names.append(probe.mechanism)
    scale = float(torch.maximum(v1.abs(), b1.abs()).max()) + TINY
    shifted = ((v1 - q * b1).abs() > tol * scale) & moved
    if bool(shifted.any()):
        if probe.mechanism not in names and not bool(shifted[moved].all()):
            names.append(probe.mechanism)  # added only to occurrences selected by their advantage
        names.append("M6")
    return "+".join(names)
