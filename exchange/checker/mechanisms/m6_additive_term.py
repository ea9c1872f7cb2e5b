"""M6, additive event terms (THEORY.md section 4): a per-occurrence term that does not
scale with the advantage (a sign-free ``tau (log rho)^2``, a sampled-token KL estimator,
an entropy bonus on sampled tokens). It adds ``m_e`` to every occurrence of an event.

Evidence: a mixed group's coefficients have a second direction their reward-dependent
part lacks (:func:`profile_probe`); ``K_e`` on identical responses is the same for every
reward vector (:func:`reward_independent`); a tied group's coefficients cross zero where
no advantage does (:func:`tied_offsets`), have an event profile (:func:`tied_profile`) or a
second direction (:func:`~exchange.checker.mechanisms.tied.level_free`), or stay on copies
of one response (:func:`kept_on_copies`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from exchange.checker.cases import build, common_prefix
from exchange.checker.mechanisms.evidence import Evidence, above, second_singular_ratio
from exchange.checker.properties.base import Evaluation, ProbeResult
from exchange.checker.properties.residuals import second_rewards
from exchange.checker.tolerances import FLOOR_MARGIN, ROUNDINGS, pattern_tol

__all__ = ["varying_profile", "profile_probe", "reward_independent", "crossings", "one_crossing", "tied_offsets", "tied_profile",
           "kept_on_copies"]


def varying_profile(raw: float, dependent: float, tol: float, moved: str = "") -> list[Evidence]:
    """M6 from a mixed group on-policy: a response's coefficient on shared event ``e`` is
    ``w_i (A_i + m_e)``, so the matrix has rank 2 (relative second singular value
    ``raw``) when ``m_e`` varies over the events; its reward-dependent part ``w_i dA_i``
    has rank 1 (``dependent``: its measured round-off) unless a weight from response
    statistics (M5) is there. M6 when ``raw`` exceeds ``tol`` and :data:`FLOOR_MARGIN`
    times ``dependent``."""
    return above("M6", moved, "the coefficients have a second direction their reward-dependent part lacks",
                 raw, max(tol, FLOOR_MARGIN * dependent))


def profile_probe(engine, probe) -> ProbeResult:
    """:func:`varying_profile` on the probe's one mixed group, on-policy, the
    reward-dependent part taken at
    :func:`~exchange.checker.properties.residuals.second_rewards`. Reaches a term only
    mixed groups show (tied groups dropped by a filter); a constant gradient (k1) is an
    offset of the advantages on-policy and shows nowhere here."""
    result = ProbeResult(probe)
    rollout = build(replace(probe.case, off_policy=False))
    kappa, kappa2 = engine([rollout, rollout.with_fields({"rewards": second_rewards(rollout.rewards, rollout)})])
    shared = common_prefix(probe.case.groups[0].responses)
    raw, diff = kappa[:, :shared], (kappa - kappa2)[:, :shared]
    if not (bool(torch.isfinite(raw).all()) and bool(torch.isfinite(diff).all())):
        return result
    moved = f"probe {probe.name}: {probe.description}"
    res = second_singular_ratio(raw)
    result.evaluations["exchangeable"] = Evaluation(res, True, rollout, kappa, note=moved)
    result.found = varying_profile(res, second_singular_ratio(diff), pattern_tol(engine.precision), moved)
    return result


def reward_independent(cancel: float, moved_by_rewards: float, tol: float, moved: str = "") -> list[Evidence]:
    """M6 from identical responses whose shared events do not cancel (``cancel``, (C)'s
    residual) while ``K_e`` moves by no more than ``tol`` (``moved_by_rewards``) when the
    rewards are reassigned among them: a remainder the same for every reward vector is an
    additive event term, not a (Z) failure (THEORY.md section 2)."""
    if moved_by_rewards > tol:
        return []
    return above("M6", moved, "K_e the same for every reward vector and assignment, not 0", cancel, tol)


def crossings(m0: torch.Tensor, change: torch.Tensor, floor: float, tol: float):
    """``(q [G, P], moving [G, P], slack)``: a tied group's zero crossing in the level,
    ``q = -m0 / change`` where the coefficients ``m0`` moved by ``change`` beyond
    ``floor``, and how far two crossings may differ in round-off (``tol`` relative, and
    the floor over the smallest slope, twice: both levels round)."""
    moving = change.abs() > floor
    q = torch.where(moving, -m0 / torch.where(moving, change, torch.ones_like(change)), torch.zeros_like(change))
    if not bool(moving.any()):
        return q, moving, float("inf")
    unit = max(1.0, float(q[moving].abs().max()))
    return q, moving, tol * unit + ROUNDINGS * floor / float(change.abs()[moving].min())


def _spread(x: torch.Tensor) -> float:
    return float(x.max() - x.min()) if x.numel() else 0.0


def one_crossing(m0: torch.Tensor, change: torch.Tensor, floor: float, tol: float) -> bool:
    """Whether every tied coefficient the level moves (``m0 [G, P]``, ``change`` per unit
    of level) crosses zero at one level, within the crossings' round-off slack
    (:func:`crossings`); ``True`` where the level moves nothing."""
    q, moving, slack = crossings(m0, change, floor, tol)
    return not bool(moving.any()) or _spread(q[moving]) <= slack


def tied_offsets(m0: torch.Tensor, change: torch.Tensor, floor: float, tol: float, moved: str = "",
                 at_baseline: bool = False) -> list[Evidence]:
    """M6 from a tied group whose coefficients ``m0 [G, P]`` follow the tied level
    (``change`` per unit of level): with advantages ``lambda + c_i`` up to a factor,
    ``kappa = w_i (h_e (lambda + c_i) + m_e)``, so the zero crossing ``c_i + m_e / h_e``
    is free of ``w_i`` and varies over a response's events only through an additive term
    ``m_e``. One crossing on every event scales with an advantage, offset (M4) or shaped
    (M7), unless it is measured from a level where the advantage is 0 by definition.

    ``at_baseline``: ``m0`` was taken with every reward at its baseline reward
    (``Rollout.baseline_rewards``), which the loss subtracts (ReMax), and no layout shows
    a shaping of the responses the level moves (:func:`one_crossing` on each). Every
    advantage ``r - b`` is then 0 at ``m0`` and (E) demands ``kappa = 0`` there
    (section 2): a crossing away from the baseline is a term that does not scale with the
    advantage (k1, an entropy bonus), not an offset. A shaping ``A_i = r + s_i - b`` moves
    every crossing by ``-s_i``, so the baseline is no zero of its advantage; a loss that
    ignores the baseline rewards is read by the spread alone (docs/properties.md,
    ``tied_group``)."""
    q, moving, slack = crossings(m0, change, floor, tol)
    worst = max((_spread(q[i][moving[i]]) for i in range(q.shape[0])), default=0.0)
    out = above("M6", moved, "the tied coefficients' zero crossing in the level varies over one response's events",
                worst, slack)
    if out or not at_baseline or not one_crossing(m0, change, floor, tol):
        return out
    return above("M6", moved, "every tied coefficient crosses zero at one level away from the baseline reward "
                              "the loss subtracts (where its advantage is 0 by definition)",
                 float(q[moving].abs().max()), slack)


def tied_profile(profile: torch.Tensor, tol: float, moved: str = "") -> list[Evidence]:
    """M6 from a tied group whose coefficients do not move with the level and have one
    direction (:func:`~exchange.checker.mechanisms.tied.level_free`; its own centre: every
    advantage exactly 0, so what is left is ``w_i (s_i + m_e)``, ``s_i`` a shaped
    advantage): its event ``profile [P]`` (the right singular vector) varies, so ``m_e``
    varies over the events; a shaping's profile is the surrogate's factor, constant
    on-policy."""
    return above("M6", moved, "the tied coefficients have an event profile that varies over the shared events",
                 float(profile.max() - profile.min()), tol * float(profile.abs().max()))


def kept_on_copies(K: torch.Tensor, mass: torch.Tensor, c0: torch.Tensor, change: torch.Tensor, rtol: float,
                   tol: float, floor: float, moved: str = "") -> list[Evidence]:
    """M6 from a group of copies of one response at tied levels: every response has the
    same features, so a shaping gives each the same reward and every centre the same
    value, and every such advantage is an exact 0 (at level 0 a greedy baseline's too).
    Shared events that keep ``K_e`` (``K``, ``mass`` per shared event) beyond ``rtol`` of
    their mass carry a term that is no centred advantage; it is an event term unless it
    follows the advantage's own profile: where the coefficients ``c0`` (per occurrence)
    move with the level (``change`` beyond ``floor``), an uncentred advantage ``A``
    gives ``c0 / change`` one value on every occurrence (``A h_e / h_e``), an event term
    does not (relative spread beyond ``tol``)."""
    share = float((K.abs() / mass.clamp(min=floor)).max()) if K.numel() else 0.0
    if share <= rtol:
        return []
    moving = change.abs() > floor
    if bool(moving.any()):
        q = c0[moving] / change[moving]
        spread = float(q.max() - q.min())
        return above("M6", moved, "copies of one response keep K_e != 0 that does not follow the advantage's "
                                  "profile", spread, tol * float(q.abs().max()))
    return above("M6", moved, "copies of one response at a tied level keep K_e != 0", share, rtol)
