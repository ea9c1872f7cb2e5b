"""The patterns that name a mechanism (THEORY.md section 4, attribution rules).

A probe's break names its mechanism only when the break has that mechanism's pattern:
each signature is ``(engine, probe, evaluation) -> mechanism id or ""``, attached to the
probes of the property modules (:mod:`exchange.checker.properties`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from exchange.checker.cases import GroupConfig, build, common_prefix
from exchange.checker.tolerances import SIGNATURE_RTOL, TINY, ZERO_COLUMN
from exchange.core.coefficients import Engine

__all__ = ["affine_in_rewards", "per_response_rescaling", "common_shift", "dropped_response"]

# Four distinct rewards, two of each sign, so that advantages have both signs whether
# the loss centres them (0.625, -1.375, -0.875, 1.625) or not (a greedy or raw baseline).
_SIGN_SPLIT_REWARDS = (1.0, -1.0, -0.5, 2.0)


def affine_in_rewards(engine: Engine, probe, ev) -> str:
    """M4 from a baseline that is not the group mean (OPO's length-weighted one): every
    shared column of group 0 gives equal coefficients to responses with equal rewards."""
    rollout, kappa = ev.rollout, ev.kappa
    p = common_prefix(probe.case.groups[0].responses)
    rows = (rollout.group == 0).nonzero().flatten()
    rewards = rollout.rewards[rows]
    if p == 0:
        return ""
    for t in range(p):
        col = kappa[rows, t]
        scale = float(col.abs().max()) + TINY
        for r in rewards.unique():
            same = col[rewards == r]
            if float(same.max() - same.min()) > SIGNATURE_RTOL * scale:
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
    same = all(abs(x - ref) <= SIGNATURE_RTOL * abs(ref) for x in others)
    return probe.mechanism if same and abs(float(q[mutated]) - ref) > SIGNATURE_RTOL * abs(ref) else ""


# The same order of advantages on another scale: what a selection by the advantage picks
# stays picked, a term proportional to the advantage changes and an additive one does not.
_SIGN_SPLIT_REWARDS_RESCALED = (1.0, -1.0, -0.5, 3.0)


def _moved_column(engine: Engine, probe, rewards) -> tuple[torch.Tensor, torch.Tensor]:
    """The moved shared event's coefficients ``[G]`` before and after the probe's
    mutation, on a one-group case with ``rewards``."""
    grp = probe.case.groups[0]
    case = replace(probe.case, off_policy=False, groups=(GroupConfig(grp.responses, rewards),))
    variant_case = probe.mutation.apply(case)
    t = max(len(r) for c in (case, variant_case) for g in c.groups for r in g.responses)
    base, variant = build(replace(case, pad_to=t)), build(replace(variant_case, pad_to=t))
    kappa, kappa_v = engine([base, variant])
    t = min(probe.mutation.position, len(case.shared_keys(0)) - 1)
    return kappa[:, t], kappa_v[:, t]


def _additive_on_selected(engine: Engine, probe, b: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether the occurrences that leave the common scaling ``v = c * b`` (the majority's
    ``c``) are shifted by an amount that stays the same when the advantages change scale
    with their order kept: an additive term on occurrences selected by the advantage
    (KL-Cov's ``abs(log rho)`` penalty, M6), not a sign-dependent scaling (M2 alone)."""

    def deviations(b, v):
        q = v / torch.where(b.abs() > TINY, b, torch.ones_like(b))
        c = float(q.median())
        d = v - c * b
        return d.abs() > SIGNATURE_RTOL * (float(v.abs().max()) + TINY), d

    b2, v2 = _moved_column(engine, probe, _SIGN_SPLIT_REWARDS_RESCALED)
    (sel, d), (sel2, d2) = deviations(b, v), deviations(b2, v2)
    if not bool(sel.any()) or not bool((sel == sel2).all()) or int(sel.sum()) * 2 >= sel.numel():
        return False
    if bool((v[sel] == 0).any()):  # pruned or clipped to nothing: not an added term
        return False
    return bool(((d[sel] - d2[sel]).abs() <= SIGNATURE_RTOL * d[sel].abs()).all())


def common_shift(engine: Engine, probe, ev) -> str:
    """M6 rather than M2: on a group with four distinct advantages, the moved event's
    variant coefficients are ``c * base + d`` with one ``c`` and one ``d`` for every
    occurrence (a shift common to all occurrences, M6), not a scaling split by the sign
    of the advantage (M2)."""
    b, v = _moved_column(engine, probe, _SIGN_SPLIT_REWARDS)
    if not (bool(torch.isfinite(b).all()) and bool(torch.isfinite(v).all())):
        return probe.mechanism
    design = torch.stack([b, torch.ones_like(b)], dim=1)
    coef = torch.linalg.lstsq(design, v[:, None]).solution.flatten()
    scale = float(v.abs().max()) + TINY
    exact = float((design @ coef - v).abs().max()) <= SIGNATURE_RTOL * scale
    if exact:
        return "M6" if abs(float(coef[1])) > SIGNATURE_RTOL * scale else probe.mechanism
    # a selection by the advantage that adds a term to what it selects: both (section 4)
    return f"{probe.mechanism}+M6" if _additive_on_selected(engine, probe, b, v) else probe.mechanism
