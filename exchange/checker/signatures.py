"""The patterns that name a mechanism (THEORY.md section 4, attribution rules).

A probe's break names its mechanism only when the break has that mechanism's pattern:
each signature is ``(engine, probe, evaluation) -> mechanism id or ""``, attached to the
probes of the property modules (:mod:`exchange.checker.properties`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from exchange.checker.cases import GroupConfig, build, common_prefix
from exchange.checker.tolerances import RESOLUTION, SHAPING_LEAK, TINY, ZERO_COLUMN, pattern_tol
from exchange.core.coefficients import Engine

__all__ = ["centre_crossing", "per_response_rescaling", "sign_split", "dropped_response", "plain",
           "second_singular_ratio"]


def plain(engine: Engine) -> Engine:
    """The engine of the real coefficients (a probe may hand a signature its
    reward-dependent engine, ``exchange.checker.probes.RewardDependent``); a signature
    that builds its own batches evaluates them with this one."""
    return getattr(engine, "engine", engine)


# The centre test's group: response 0 has exactly the mean of the group's rewards (3/8 of
# the spread, representable in bf16) under both reward vectors (the same multiset, so a
# std's scale is the same too), response 1 is long, the others short. A centre weighted
# by length sits at 0.53 and 0.41 of the spread there, not 0.375.
_CENTRE_RESPONSES = ((1, 2, 0), (1, 2, 1, 3, 3, 0, 1, 2), (1, 2, 2), (1, 2, 3), (1, 2, 1))
_CENTRE_REWARDS = ((0.375, 1.0, 0.0, 0.0, 0.5), (0.375, 0.5, 0.0, 0.0, 1.0))


# The twin: five responses of one length (every centre, a length-weighted one included,
# is the mean there), the same rewards: its share is round-off and shaping leak only.
_TWIN_RESPONSES = ((1, 2, 0, 1), (1, 2, 1, 3), (1, 2, 2, 2), (1, 2, 3, 0), (1, 2, 1, 1))


def _centre_shares(engine: Engine, probe, spread: float) -> tuple[float, float] | None:
    """``d_0 / max|d|`` on the centre group and on its equal-length twin, at rewards of
    ``spread`` (one engine call)."""
    cases = [replace(probe.case, off_policy=False, groups=(GroupConfig(responses, tuple(spread * x for x in r)),))
             for responses in (_CENTRE_RESPONSES, _TWIN_RESPONSES) for r in _CENTRE_REWARDS]
    k = plain(engine)([build(c) for c in cases])
    out = []
    for a, b in ((k[0], k[1]), (k[2], k[3])):
        d = (a - b)[:, 0]
        if not bool(torch.isfinite(d).all()) or float(d.abs().max()) == 0:
            return None
        out.append(float(d[0]) / float(d.abs().max()))
    return out[0], out[1]


def centre_crossing(engine: Engine, probe, ev) -> str:
    """M4 from a centre that is not the mean of the group's rewards (OPO's length-weighted
    baseline, THEORY.md section 4): on a group of unequal lengths where response 0's
    reward is exactly the mean under two reward vectors, every estimator centred on the
    group mean (std- or leave-one-out-scaled, positive-only too) gives it an advantage of
    exactly 0 under both, so its coefficient does not move between them, whatever its
    weight; an additive event term is the same under both. A shaping of O(1) moves it
    through a std by ``O((s / spread)^2)``: the share of response 0's move is taken at
    spreads 4 and 8 and extrapolated (``(4 f(8) - f(4)) / 3``). The same on a twin group
    of equal lengths (where every centre is the mean) measures what round-off and shaping
    leave. M4 when the share exceeds :data:`SHAPING_LEAK`, :func:`pattern_tol` and three
    times the twin's."""
    shares = [_centre_shares(engine, probe, spread) for spread in (4.0, 8.0)]
    if None in shares:
        return ""
    (f4, t4), (f8, t8) = shares
    share, twin = (4 * f8 - f4) / 3, max(abs(t4), abs(t8), abs(4 * t8 - t4) / 3)
    return probe.mechanism if abs(share) > SHAPING_LEAK + pattern_tol(engine.precision) + 3 * twin else ""


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
    """M3: a per-response weight (``1/L_i``, a normaliser per micro-batch): two responses
    of the probe's group with equal rewards and different lengths respond differently to
    another response's reward (:func:`_equal_reward_weights`). The probe's own (E) break
    (one response's suffix made longer) says that something moved; this pattern, read on
    batches of its own, says that it was a weight: a centre weighted by length or a std
    over shaped rewards also moves every advantage when one length changes."""
    if common_prefix(probe.case.groups[probe.mutation.group].responses) == 0:
        return ""
    return probe.mechanism if _equal_reward_weights(engine, probe) else ""


# The weight test's rewards (times the spread): the pair (0 and 3, different lengths) at
# the top, the mover (2) near the centre, so that a std-scaled estimator's cross
# derivative -(1 + z_i z_k) / (G sigma) is far from 0 (a mover at the bottom has
# z_i z_k = -1 with the probe's own rewards 1, 0, 0, 1).
_WEIGHT_REWARDS = (1.0, 0.0, 0.5, 1.0)
_WEIGHT_PAIR, _WEIGHT_MOVER = (0, 3), 2


def _moves(engine: Engine, probe, movers: tuple[int, int], spread: float) -> tuple[float, float, float] | None:
    """``(d_i, d_j, round-off)``: the first shared coefficients' change of the pair when
    ``movers[0]``'s (for ``d_i``) and ``movers[1]``'s (for ``d_j``) reward rises by
    ``spread`` from :data:`_WEIGHT_REWARDS` times ``spread`` (on-policy, real
    coefficients); None when not finite."""
    grp = probe.case.groups[probe.mutation.group]
    base = tuple(spread * r for r in _WEIGHT_REWARDS)

    def moved(k: int) -> tuple[float, ...]:
        return tuple(r + (spread if n == k else 0.0) for n, r in enumerate(base))

    cases = [replace(probe.case, off_policy=False, groups=(GroupConfig(grp.responses, r),))
             for r in (base, moved(movers[0]), moved(movers[1]))]
    k0, ki, kj = plain(engine)([build(c) for c in cases])
    if not all(bool(torch.isfinite(k).all()) for k in (k0, ki, kj)):
        return None
    i, j = _WEIGHT_PAIR
    noise = 4.0 * RESOLUTION[engine.precision] * float(torch.stack([k0, ki, kj]).abs().max())
    return float(ki[i, 0] - k0[i, 0]), float(kj[j, 0] - k0[j, 0]), noise


def _equal_reward_weights(engine: Engine, probe) -> bool:
    """Whether two responses of the probe's group with equal rewards and different
    lengths (:data:`_WEIGHT_PAIR`) get different weights: moving a third response's
    reward ``k`` changes response ``i``'s shared coefficient by ``w_i dA_ik``, and ``dA_ik =
    dA_jk`` for every estimator that treats the responses alike given their rewards (a
    group mean, a length-weighted centre, a std or leave-one-out scale), so ``d_i / d_j =
    w_i / w_j``. Where another response's reward reaches neither (a greedy baseline, raw
    rewards: no centre shared by the group), each one's own reward moves its advantage
    alike, and its own move gives the quotient instead. A shaping by length makes the
    derivatives differ through a std by ``O(s / spread)``: the quotient is taken at
    spreads 4 and 8 (rewards within the clips libraries apply) and extrapolated (``2 q(8)
    - q(4)``), which leaves ``O((s / spread)^2)``; M3 when it differs from 1 by more than
    :data:`SHAPING_LEAK`, :func:`pattern_tol` and ``|q(8) - q(4)|`` (the measured error of
    the extrapolation: the leak's first order and the round-off). An additive event term
    cancels in the differences."""
    grp = probe.case.groups[probe.mutation.group]
    lengths = [len(r) for r in grp.responses]
    i, j = _WEIGHT_PAIR
    if len(lengths) != len(_WEIGHT_REWARDS) or lengths[i] == lengths[j]:
        return False
    quotients = []
    for spread in (4.0, 8.0):
        cross = _moves(engine, probe, (_WEIGHT_MOVER, _WEIGHT_MOVER), spread)
        if cross is None:
            return False
        di, dj, noise = cross
        if max(abs(di), abs(dj)) <= noise:  # no centre shared by the group
            own = _moves(engine, probe, _WEIGHT_PAIR, spread)
            if own is None:
                return False
            di, dj, noise = own
        if min(abs(di), abs(dj)) <= noise / 4:
            # one weight 0 and the other resolved (a response masked by its own sampler
            # ratios) is as unequal as weights get; both 0 is not resolved at the precision
            return max(abs(di), abs(dj)) > noise
        quotients.append(di / dj)
    q4, q8 = quotients
    # the two spreads' disagreement is the measured error of the extrapolation (the
    # shaping's first-order leak and the round-off of both)
    return abs(2 * q8 - q4 - 1.0) > SHAPING_LEAK + pattern_tol(engine.precision) + abs(q8 - q4)


# Two reward vectors with the same signs, whether the loss centres them (means 1 and 0.75)
# or not (a greedy or raw baseline): 4 and 6 (6 and 4) above every centre, -4 and -2 (-2
# and -5) below, far from it next to any shaping of the responses (all of the same length
# here). The second reorders the responses within each sign: every advantage moves by
# O(1), a std-scaled one included (a scaling of the first would barely move it).
_SPLIT_REWARDS = ((4.0, -4.0, -2.0, 6.0), (6.0, -2.0, -5.0, 4.0))


def _moved_columns(engine: Engine, probe, rewards: tuple) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each reward vector of ``rewards``: the shared events' coefficients ``[G,
    shared]`` before and after the probe's mutation, on the probe's one group, on-policy
    before the mutation (one engine call for all)."""
    grp = probe.case.groups[0]
    cases = []
    for r in rewards:
        case = replace(probe.case, off_policy=False, groups=(GroupConfig(grp.responses, r),))
        cases += [case, probe.mutation.apply(case)]
    t = max(len(r) for c in cases for g in c.groups for r in g.responses)
    kappas = plain(engine)([build(replace(c, pad_to=t)) for c in cases])
    shared = len(cases[0].shared_keys(0))
    return [(kappas[2 * k][:, :shared], kappas[2 * k + 1][:, :shared]) for k in range(len(rewards))]


def second_singular_ratio(m: torch.Tensor) -> float:
    """The relative second singular value of ``m [k, n]``: how far its rows are from one
    direction (0 for a zero matrix, or with fewer than two rows or columns)."""
    if min(m.shape) < 2:
        return 0.0
    sv = torch.linalg.svdvals(m)
    return float(sv[1] / sv[0]) if float(sv[0]) > 0 else 0.0


def sign_split(engine: Engine, probe, ev) -> str:
    """M2 and M6 from shared events moved across the trust region (THEORY.md section 4,
    attribution rules), on the probe's group of equal-length responses at two reward
    vectors of one order. On every occurrence the coefficient is ``w_i (g_i A_i + m)``
    after the move and ``w_i (A_i + m_1)`` before: ``g_i`` the surrogate's factor (0 for
    an occurrence clipped or masked), ``m`` an additive event term, the same for every
    occurrence. The difference between the two reward vectors removes ``m``:
    ``(db_i, dv_i) = w_i dA_i (1, g_i)``, whatever ``w_i`` and the estimator, so the pairs
    of all occurrences are proportional (rank 1) unless ``g`` differs between them. M2
    when it does beyond the pairs' rank within one sign (occurrences of one sign and one
    length share ``g`` in exact arithmetic: the measured round-off), the signs told by the
    rewards (higher and lower half); a mask that opens on one sign only (``db = 0``,
    ``dv != 0``) is a split too. M6 when the remainder ``v_i - q b_i`` (``q`` the factor of
    the occurrence's sign) is not 0 on every occurrence of a sign; a remainder on some
    occurrences only is a term added to occurrences selected by their advantage: M2 and
    M6 (KL-Cov). Every shared column is read. A pattern below :func:`pattern_tol` is
    round-off."""
    blocks = _moved_columns(engine, probe, _SPLIT_REWARDS)
    (b1, v1), (b2, v2) = blocks
    if not all(bool(torch.isfinite(x).all()) for x in (b1, v1, b2, v2)):
        return probe.mechanism
    tol, eps = pattern_tol(engine.precision), RESOLUTION[engine.precision]
    rewards = torch.tensor(_SPLIT_REWARDS[0], dtype=b1.dtype, device=b1.device)
    high = rewards > rewards.median()
    names: list[str] = []
    for t in range(b1.shape[1]):
        found = _column_split(b1[:, t], v1[:, t], b2[:, t], v2[:, t], high, tol, eps)
        names += [n for n in found if n not in names]
    names = [probe.mechanism if n == "M2" else n for n in names]
    return "+".join(sorted(names, key=lambda n: n != probe.mechanism))


def _column_split(b1, v1, b2, v2, high, tol: float, eps: float) -> list[str]:
    """:func:`sign_split` on one shared column (``[G]`` each)."""
    db, dv = b1 - b2, v1 - v2
    pairs = torch.stack([db, dv])  # [2, G]
    size = pairs.abs().amax(0)
    live = size > tol * float(size.max()) + 2 * eps * float(torch.stack([b1, v1, b2, v2]).abs().max())
    if not bool(live.any()):
        return []
    names = []
    within = max(second_singular_ratio(pairs[:, live & side]) for side in (high, ~high))
    if bool((live & high).any()) and bool((live & ~high).any()) and second_singular_ratio(pairs[:, live]) > max(tol, 4 * within):
        names.append("M2")
    scale = float(torch.maximum(v1.abs(), b1.abs()).max()) + TINY
    rest = torch.zeros_like(b1)
    bound = torch.full_like(b1, float("inf"))
    for side in (high, ~high):
        cols = live & side & (db.abs() > tol * float(db.abs().max()))
        if not bool(cols.any()):
            continue
        q = dv[cols] / db[cols]
        qs = float((db[cols] * dv[cols]).sum() / (db[cols] * db[cols]).sum())  # the side's factor
        dq = float(q.max() - q.min())  # one factor in exact arithmetic: the measured round-off of q
        rest = torch.where(cols, (v1 - qs * b1).abs(), rest)
        noise = dq * b1.abs() + 2 * eps * (v1.abs() + abs(qs) * b1.abs())
        bound = torch.where(cols, tol * scale + 2 * noise, bound)
    shifted = rest > bound
    if bool(shifted.any()):
        checked = bound < float("inf")
        quiet = checked & ~shifted
        # a term added to some occurrences only: the others' remainder is nothing next to it
        selected = bool(quiet.any()) and float(rest[quiet].max()) <= 0.1 * float(rest[shifted].min())
        if "M2" not in names and selected:
            names.append("M2")
        names.append("M6")
    return names
