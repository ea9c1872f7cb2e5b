"""M7, response-feature shaping (THEORY.md section 4): advantages of a reward shaped by
features of the response other than the verifiable reward (a length penalty, a format
bonus, a reward set to 0 on truncated responses). A design choice to report, not a
cancellation defect.

Evidence: two responses with equal verifiable rewards and different features get
coefficient rows that are not proportional over reward levels (:func:`feature_rows`); on a
tied group, the coefficients' zero crossing varies over the responses, or the level reaches
some responses and not others, or moves them both ways (:func:`tied_offsets`); where the
level does not move them, their values have both signs (zero-sum shaped advantages,
:func:`tied_signs`) or the shared events carry mass and cancel (:func:`cancelling`).
"""

from __future__ import annotations

import torch

from exchange.checker.mechanisms.evidence import Evidence, above
from exchange.checker.mechanisms.m6_additive_term import crossings
from exchange.checker.tolerances import FLOOR_MARGIN

__all__ = ["feature_rows", "tied_offsets", "tied_signs", "cancelling"]


def feature_rows(sine: float, floor: float, tol: float, moved: str = "") -> list[Evidence]:
    """M7 when the rows of two equal-reward responses with different features are not
    proportional over reward levels and events (``sine`` of their angle) beyond ``tol``
    and :data:`FLOOR_MARGIN` times ``floor`` (the angle between rows of one feature at
    other positions: proportional in exact arithmetic, so their angle is round-off)."""
    return above("M7", moved, "equal verifiable rewards, different features: the rows are not proportional",
                 sine, max(tol, FLOOR_MARGIN * floor))


def tied_offsets(m0: torch.Tensor, change: torch.Tensor, floor: float, tol: float, moved: str = "") -> list[Evidence]:
    """M7 from a tied group whose coefficients ``m0 [G, P]`` follow the level: the zero
    crossing ``c_i + m_e / h_e`` varies over the responses (each its own shaped offset
    ``c_i``), or a response the level does not reach sits beside others it moves, or the
    level moves some responses up and others down (a shaping that needs a reward to act
    on, such as a reward set to 0 on truncated responses)."""
    q, moving, slack = crossings(m0, change, floor, tol)
    if not bool(moving.any()):
        return []
    live = m0.abs() > floor
    out = []
    if bool((live & ~moving).any(dim=1).logical_and(~moving.any(dim=1)).any()):
        out.append(Evidence("M7", moved, "the level moves some tied responses and not others", 1.0, 1.0))
    if bool((change[moving] > 0).any()) and bool((change[moving] < 0).any()):
        out.append(Evidence("M7", moved, "the level moves some tied responses up and others down", 1.0, 1.0))
    worst = max((float(q[:, e][moving[:, e]].max() - q[:, e][moving[:, e]].min())
                 for e in range(q.shape[1]) if bool(moving[:, e].any())), default=0.0)
    out += above("M7", moved, "the tied coefficients' zero crossing in the level varies over the responses",
                 worst, slack)
    return out[:1]


def tied_signs(m0: torch.Tensor, tol: float, moved: str = "") -> list[Evidence]:
    """M7 from a tied group whose coefficients ``m0 [G, P]`` do not move with the level
    and have one direction: the responses' values (its left singular vector, sign
    restored) have both signs, as zero-sum shaped advantages do. A second direction is
    read here too: a shaping beside an event term."""
    if min(m0.shape) < 1 or float(m0.abs().max()) == 0:
        return []
    u_, s, vh = torch.linalg.svd(m0)
    second = float(s[1] / s[0]) if s.numel() > 1 else 0.0
    if second > tol:
        return above("M7", moved, "the tied coefficients have two directions (a shaping beside an event term)",
                     second, tol)
    u = u_[:, 0] * s[0] * vh[0].mean()
    both = min(float(u.max()), -float(u.min()))
    return above("M7", moved, "the tied responses' values have both signs (zero-sum shaped advantages)",
                 both, tol * float(u.abs().max()))


def cancelling(K: torch.Tensor, mass: torch.Tensor, live: torch.Tensor, rtol: float, moved: str = "") -> list[Evidence]:
    """M7 when a tied group's shared events carry mass (``live``) and every one cancels
    (``|K_e| <= rtol`` of its mass): advantages that are not 0 and sum to zero at the
    group's own level, a shaping that needs a reward to act on."""
    if not bool(live.any()) or not bool((K[live].abs() <= rtol * mass[live]).all()):
        return []
    return [Evidence("M7", moved, "the tied group's shared events carry mass and cancel", 1.0, 1.0)]
