"""M2, asymmetric piecewise clipping (THEORY.md section 4, T4): a clip, mask or gate
whose decision depends on the sign of the advantage. Attribution rule: M2 only when the
occurrences of one event are scaled differently according to the sign of their
response's advantage; a shift the same for every occurrence is M6.

Evidence: shared events moved across the trust region, on a group of equal-length
responses at two reward vectors of one order (:func:`sign_split`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from exchange.checker.cases import GroupConfig, build
from exchange.checker.mechanisms.evidence import Evidence, above, second_singular_ratio
from exchange.checker.tolerances import FLOOR_MARGIN, RESOLUTION, ROUNDINGS, TINY, pattern_tol

__all__ = ["sign_split", "column_split"]

# Two reward vectors with the same signs, whether the loss centres them (means 1 and 0.75)
# or not (a greedy or raw baseline): 4 and 6 (6 and 4) above every centre, -4 and -2 (-2
# and -5) below, far from it next to any shaping of the responses (all of the same length
# here). The second reorders the responses within each sign: every advantage moves by
# O(1), a std-scaled one included (a scaling of the first would barely move it).
_SPLIT_REWARDS = ((4.0, -4.0, -2.0, 6.0), (6.0, -2.0, -5.0, 4.0))


def _moved_columns(engine, probe, rewards: tuple) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each reward vector of ``rewards``: the shared events' coefficients ``[G,
    shared]`` before and after the probe's mutation, on the probe's one group, on-policy
    before the mutation (one engine call for all)."""
    grp = probe.case.groups[0]
    cases = []
    for r in rewards:
        case = replace(probe.case, off_policy=False, groups=(GroupConfig(grp.responses, r),))
        cases += [case, probe.mutation.apply(case)]
    t = max(len(r) for c in cases for g in c.groups for r in g.responses)
    kappas = engine([build(replace(c, pad_to=t)) for c in cases])
    shared = len(cases[0].shared_keys(0))
    return [(kappas[2 * k][:, :shared], kappas[2 * k + 1][:, :shared]) for k in range(len(rewards))]


def sign_split(engine, probe, ev) -> list[Evidence]:
    """M2 and M6 from shared events moved across the trust region. On every occurrence
    the coefficient is ``w_i (g_i A_i + m)`` after the move and ``w_i (A_i + m_1)``
    before: ``g_i`` the surrogate's factor (0 for an occurrence clipped or masked), ``m``
    an additive event term, the same for every occurrence. The difference between the
    two reward vectors removes ``m``: ``(db_i, dv_i) = w_i dA_i (1, g_i)``, whatever
    ``w_i`` and the estimator, so the pairs of all occurrences are proportional (rank 1)
    unless ``g`` differs between them (:func:`column_split`). Every shared column is read."""
    (b1, v1), (b2, v2) = _moved_columns(engine, probe, _SPLIT_REWARDS)
    moved = f"probe {probe.name}: {probe.description}"
    if not all(bool(torch.isfinite(x).all()) for x in (b1, v1, b2, v2)):
        return [Evidence("M2", moved, "coefficients not finite after the move", float("inf"), 0.0)]
    rewards = torch.tensor(_SPLIT_REWARDS[0], dtype=b1.dtype, device=b1.device)
    high = rewards > rewards.median()
    found: dict[str, Evidence] = {}
    for t in range(b1.shape[1]):
        for e in column_split(b1[:, t], v1[:, t], b2[:, t], v2[:, t], high, engine.precision, moved):
            found.setdefault(e.mechanism, e)
    return list(found.values())


def column_split(b1, v1, b2, v2, high, precision: str, moved: str = "") -> list[Evidence]:
    """:func:`sign_split` on one shared column (``[G]`` each; ``high``: the responses
    above the median reward). M2 when the pairs' second singular value exceeds
    :func:`~exchange.checker.tolerances.pattern_tol` and :data:`FLOOR_MARGIN` times its
    value within one sign (occurrences of one sign and one length share ``g`` in exact
    arithmetic: the measured round-off); a mask that opens on one sign only is a split
    too. M6 when the remainder ``v_i - q b_i`` (``q`` the factor of the occurrence's
    sign) is not 0 on every occurrence of a sign; a remainder on some occurrences only
    (the others' within their round-off bound: 0 in exact arithmetic) is a term added to occurrences
    selected by their advantage: M2 and M6 (KL-Cov)."""
    tol, eps = pattern_tol(precision), RESOLUTION[precision]
    db, dv = b1 - b2, v1 - v2
    pairs = torch.stack([db, dv])  # [2, G]
    size = pairs.abs().amax(0)
    live = size > tol * float(size.max()) + ROUNDINGS * eps * float(torch.stack([b1, v1, b2, v2]).abs().max())
    if not bool(live.any()):
        return []
    out: list[Evidence] = []
    within = max(second_singular_ratio(pairs[:, live & side]) for side in (high, ~high))
    if bool((live & high).any()) and bool((live & ~high).any()):
        out += above("M2", moved, "the occurrences' factors after the move differ between the signs of their "
                     "advantages", second_singular_ratio(pairs[:, live]), max(tol, FLOOR_MARGIN * within))
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
        noise = dq * b1.abs() + ROUNDINGS * eps * (v1.abs() + abs(qs) * b1.abs())
        bound = torch.where(cols, tol * scale + ROUNDINGS * noise, bound)
    shifted = rest > bound
    if bool(shifted.any()):
        quiet = (bound < float("inf")) & ~shifted
        worst = float((rest / bound)[shifted].max())
        # a term added to some occurrences only: the others' remainder is within its round-off bound
        if bool(quiet.any()) and not out:
            out.append(Evidence("M2", moved, "a term added to the occurrences of one sign only (selected by the "
                                             "advantage)", worst, 1.0))
        out.append(Evidence("M6", moved, "a remainder the advantage's factor does not explain, the same for every "
                                         "occurrence of a sign", worst, 1.0))
    return out
