"""The patterns that name a mechanism (THEORY.md section 4, attribution rules).

A probe's break names its mechanism only when the break has that mechanism's pattern:
each signature is ``(engine, probe, evaluation) -> mechanism id or ""``, attached to the
probes of the property modules (:mod:`exchange.checker.properties`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from exchange.checker.cases import GroupConfig, build, common_prefix
from exchange.checker.tolerances import RESOLUTION, TINY, ZERO_COLUMN, pattern_tol
from exchange.core.coefficients import Engine

__all__ = ["centre_crossing", "per_response_rescaling", "sign_split", "dropped_response", "plain"]


def plain(engine: Engine) -> Engine:
    """The engine of the real coefficients (a probe may hand a signature its
    reward-dependent engine, ``exchange.checker.probes.RewardDependent``); a signature
    that builds its own batches evaluates them with this one."""
    return getattr(engine, "engine", engine)


# The centre test's group: response 0 has exactly the mean of the group's rewards (3/8 of
# the scale, representable in bf16) under both reward vectors (the same multiset, so a
# std's scale is the same too), response 1 is long, the others short. A centre weighted
# by length sits at 0.53 and 0.41 of the scale there, not 0.375.
_CENTRE_SCALE = 2.0 ** 30
_CENTRE_RESPONSES = ((1, 2, 0), (1, 2, 1, 3, 3, 0, 1, 2), (1, 2, 2), (1, 2, 3), (1, 2, 1))
_CENTRE_REWARDS = ((0.375, 1.0, 0.0, 0.0, 0.5), (0.375, 0.5, 0.0, 0.0, 1.0))


def centre_crossing(engine: Engine, probe, ev) -> str:
    """M4 from a centre that is not the mean of the group's rewards (OPO's length-weighted
    baseline, THEORY.md section 4): on a group of unequal lengths where response 0's
    reward is exactly the mean under two reward vectors, every estimator centred on the
    group mean (std- or leave-one-out-scaled, positive-only too) gives it an advantage of
    exactly 0 under both, so its coefficient does not move between them, whatever its
    weight; an additive event term is the same under both. Rewards at
    :data:`_CENTRE_SCALE`: a shaping of O(1) is 1e-9 of them. Judged against
    :func:`pattern_tol` plus four epsilons of the precision (the centre's round-off) of
    the largest move."""
    cases = [replace(probe.case, off_policy=False,
                     groups=(GroupConfig(_CENTRE_RESPONSES, tuple(_CENTRE_SCALE * x for x in r)),))
             for r in _CENTRE_REWARDS]
    k1, k2 = plain(engine)([build(c) for c in cases])
    d = (k1 - k2)[:, 0]
    if not bool(torch.isfinite(d).all()):
        return ""
    scale = float(d.abs().max())
    noise = 4.0 * RESOLUTION[engine.precision] * float(torch.maximum(k1[:, 0].abs(), k2[:, 0].abs()).max())
    return probe.mechanism if scale > 0 and abs(float(d[0])) > pattern_tol(engine.precision) * scale + noise else ""


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
    """M3: a per-response weight (``1/L_i``), by either of two patterns.

    - After the mutated response's suffix changed, every other response's first shared
      coefficient rescales by one common factor and the mutated one's by another.
    - :func:`_equal_reward_weights`: two responses with equal rewards and different
      lengths respond differently to another response's reward (a length-weighted
      baseline moves every advantage when one length changes, hiding the first pattern).

    Factors agree up to :func:`pattern_tol` and the round-off of the terms the
    coefficients were computed from (``ev.term_scale``, for a reward-dependent
    difference)."""
    g, mutated = probe.mutation.group, probe.mutation.response
    if common_prefix(probe.case.groups[g].responses) == 0:
        return ""
    rows = (ev.rollout.group == g).nonzero().flatten()
    alpha, alpha_v = ev.kappa[rows, 0], ev.variant_kappa[rows, 0]
    scale = float(alpha.abs().max())
    noise = 4.0 * RESOLUTION[engine.precision] * ev.term_scale
    ok = (alpha.abs() > max(ZERO_COLUMN * scale, 10 * noise)) & (alpha_v.abs() > 10 * noise)
    tol = pattern_tol(engine.precision)
    if bool(ok[mutated]) and int(ok.sum()) >= 2:  # the mutated one and at least one other
        safe = torch.where(ok, alpha, torch.ones_like(alpha))
        q = alpha_v / safe
        slack = noise / safe.abs() + noise / torch.where(ok, alpha_v, torch.ones_like(alpha_v)).abs()  # relative
        others = [i for i in range(len(q)) if i != mutated and bool(ok[i])]
        ref = float(q[others[0]])

        def close(i: int) -> bool:
            return abs(float(q[i]) - ref) <= (tol + float(slack[i]) + float(slack[others[0]])) * abs(ref)

        if all(close(i) for i in others) and not close(mutated):
            return probe.mechanism
    return probe.mechanism if _equal_reward_weights(engine, probe) else ""


# The rewards' scale in the equal-reward test: next to it, a shaping of O(1) moves a
# std-scaled advantage's derivatives by O(1 / scale) = 1e-7, below every pattern tolerance.
_LARGE = 1e7


def _equal_reward_weights(engine: Engine, probe) -> bool:
    """Whether two responses of the probe's group with equal rewards and different
    lengths get different weights: moving a third response's reward ``k`` changes
    response ``i``'s shared coefficient by ``w_i J_ik``, and ``J_ik = J_jk`` for every
    estimator that treats the responses alike given their rewards (a group mean, a
    length-weighted centre, a std or leave-one-out scale), so ``d_i / d_j = w_i / w_j``.
    On-policy, rewards at :data:`_LARGE` scale (an additive event term cancels in the
    differences; a shaping by length is negligible next to the rewards)."""
    grp = probe.case.groups[probe.mutation.group]
    rewards, lengths = grp.rewards, [len(r) for r in grp.responses]
    pairs = [(i, j) for i in range(len(rewards)) for j in range(i + 1, len(rewards))
             if rewards[i] == rewards[j] and lengths[i] != lengths[j]]
    movers = [k for k in range(len(rewards)) if all(k not in p for p in pairs[:1])]
    if not pairs or not movers:
        return False
    (i, j), k = pairs[0], movers[0]
    base = tuple(_LARGE * r for r in rewards)
    # a move of twice the spread: a finite difference keeps J_ik = J_jk exactly (rows i and
    # j still have equal rewards), and the differences stay far above bf16's round-off
    spread = _LARGE * (max(rewards) - min(rewards))
    moved = tuple(r + (2.0 * spread if n == k else 0.0) for n, r in enumerate(base))
    cases = [replace(probe.case, off_policy=False, groups=(GroupConfig(grp.responses, r),)) for r in (base, moved)]
    k0, k1 = plain(engine)([build(c) for c in cases])
    if not (bool(torch.isfinite(k0).all()) and bool(torch.isfinite(k1).all())):
        return False
    d = (k1 - k0)[:, 0]
    noise = 4.0 * RESOLUTION[engine.precision] * float(torch.maximum(k0.abs(), k1.abs()).max())
    if min(abs(float(d[i])), abs(float(d[j]))) <= 2 * noise:
        return False
    ratio = float(d[i]) / float(d[j])
    slack = noise / abs(float(d[i])) + noise / abs(float(d[j]))
    return abs(ratio - 1.0) > pattern_tol(engine.precision) + slack


# Two reward vectors with the same signs, whether the loss centres them (means 1 and 0.75)
# or not (a greedy or raw baseline): 4 and 6 (6 and 4) above every centre, -4 and -2 (-2
# and -5) below, far from it next to any shaping of the responses (all of the same length
# here). The second reorders the responses within each sign: every advantage moves by
# O(1), a std-scaled one included (a scaling of the first would barely move it).
_SPLIT_REWARDS = ((4.0, -4.0, -2.0, 6.0), (6.0, -2.0, -5.0, 4.0))


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
    kappas = plain(engine)([build(replace(c, pad_to=t)) for c in cases])
    pos = min(probe.mutation.position, len(cases[0].shared_keys(0)) - 1)
    return [(kappas[2 * k][:, pos], kappas[2 * k + 1][:, pos]) for k in range(len(rewards))]


def _spread(x: torch.Tensor) -> float:
    return float(x.max() - x.min()) if x.numel() else 0.0


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
    (KL-Cov). A mechanism's effect below :func:`pattern_tol` of the loss's precision, or
    below twice the spread of ``q`` among the occurrences of one sign (equal in exact
    arithmetic: the measured round-off), is round-off."""
    (b1, v1), (b2, v2) = _moved_columns(engine, probe, _SPLIT_REWARDS)
    if not all(bool(torch.isfinite(x).all()) for x in (b1, v1, b2, v2)):
        return probe.mechanism
    tol, eps = pattern_tol(engine.precision), RESOLUTION[engine.precision]
    db, dv = b1 - b2, v1 - v2
    moved = db.abs() > tol * float(db.abs().max()) + 2 * eps * float(b1.abs().max() + b2.abs().max())
    if not bool(moved.any()):
        return ""
    q = torch.where(moved, dv / torch.where(moved, db, torch.ones_like(db)), torch.zeros_like(db))
    rewards = torch.tensor(_SPLIT_REWARDS[0], dtype=q.dtype, device=q.device)
    high = rewards > rewards.median()
    names = []
    qh, ql = q[moved & high], q[moved & ~high]
    unit = float(q[moved].abs().max()) + TINY
    # occurrences of one sign (equal lengths) share g in exact arithmetic: their spread is
    # the measured round-off of q
    spread = {True: _spread(qh), False: _spread(ql)}
    within = max(spread.values())
    if qh.numel() and ql.numel():
        between = max(float(qh.max() - ql.min()), float(ql.max() - qh.min()))
        if between - within > tol * unit + 2 * within:
            names.append(probe.mechanism)
    scale = float(torch.maximum(v1.abs(), b1.abs()).max()) + TINY
    dq = torch.tensor([spread[bool(h)] for h in high], dtype=q.dtype, device=q.device)
    shift_noise = dq * b1.abs() + 2 * eps * (v1.abs() + (q * b1).abs())
    shifted = ((v1 - q * b1).abs() > tol * scale + 2 * shift_noise) & moved
    if bool(shifted.any()):
        if probe.mechanism not in names and not bool(shifted[moved].all()):
            names.append(probe.mechanism)  # added only to occurrences selected by their advantage
        names.append("M6")
    return "+".join(names)
