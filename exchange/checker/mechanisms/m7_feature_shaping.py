"""M7, response-feature shaping (THEORY.md section 4): advantages of a reward shaped by
features of the response other than the verifiable reward (a length penalty, a format
bonus, a reward set to 0 on truncated responses). A design choice to report, not a
cancellation defect.

Evidence: equal verifiable rewards, different features, rows not proportional over
reward levels (:func:`features_probe`); on a tied group, zero crossings that differ
between the responses (:func:`tied_offsets`), values of both signs (:func:`tied_signs`) or a
second direction (:func:`~exchange.checker.mechanisms.tied.level_free`), or shared events
that carry mass and cancel (:func:`cancelling`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from exchange.checker.cases import GroupConfig, build, common_prefix
from exchange.checker.mechanisms.evidence import Evidence, above
from exchange.checker.mechanisms.m6_additive_term import crossings
from exchange.checker.properties.base import Evaluation, ProbeResult
from exchange.checker.tolerances import FLOOR_MARGIN, TINY, pattern_tol

__all__ = ["feature_rows", "features_probe", "tied_offsets", "tied_signs", "cancelling"]

# Two responses X and Y after a shared prefix (1, 2): X is short and holds token 3, Y is
# long (it reaches the probe's length limit), its tokens (so its log-prob sums) differ.
X, Y = (1, 2, 3), (1, 2, 0, 1, 1, 2, 2)
# The reward levels the features probe cycles through: two of them above the centre, so
# that one-signed (positive-only) advantages have two non-zero levels to compare; all at
# or below 0, so that a truncated response whose reward a shaping sets to 0 sits above the
# centre (a positive-only estimator would give it nothing below it).
LEVELS = (0.0, -0.75, -2.0, -2.0)
# A greedy baseline reward in the middle of the levels: a loss with no centre of its own
# then has advantages of both signs, as a centred one has (far from 0 the two rows of a
# shaping look parallel), and keeps a truncated response whose reward a shaping zeroes at
# 2, not at the 0 a mask would give.
_BASELINE = -1.0


def feature_rows(sine: float, floor: float, tol: float, moved: str = "") -> list[Evidence]:
    """M7 when the rows of two equal-reward responses with different features are not
    proportional over reward levels and events (``sine`` of their angle) beyond ``tol``
    and :data:`FLOOR_MARGIN` times ``floor`` (the angle between rows of one feature at
    other positions: proportional in exact arithmetic, so their angle is round-off)."""
    return above("M7", moved, "equal verifiable rewards, different features: the rows are not proportional",
                 sine, max(tol, FLOOR_MARGIN * floor))


def _cycled(engine, probe) -> tuple[torch.Tensor, list, list[torch.Tensor]]:
    """Every row's shared-event coefficients at every reward level, ``[rows, levels x
    shared events]``, from one group of rows X, Y, X, Y, ... whose rewards are
    :data:`LEVELS` rotated once per batch: each batch holds every (feature, level) pair
    once, so every group statistic is the same in all of them and each row keeps its weight."""
    n = len(LEVELS)
    rows = tuple(r for _ in range(n) for r in (X, Y))
    batches = []
    for k in range(n):
        rewards = tuple(LEVELS[(k + j // 2 + j % 2) % n] for j in range(len(rows)))
        batches.append(build(replace(probe.case, groups=(GroupConfig(rows, rewards, baseline=_BASELINE),))))
    kappas = engine(batches)
    shared = common_prefix((X, Y))
    table = torch.zeros(len(rows), n, shared, dtype=kappas[0].dtype, device=kappas[0].device)
    for k, kappa in enumerate(kappas):
        for j in range(len(rows)):
            table[j, (k + j // 2 + j % 2) % n] = kappa[j, :shared]  # row j holds this level in batch k
    return table.flatten(1), batches, kappas


def _sine(a: torch.Tensor, b: torch.Tensor) -> float:
    """The sine of the angle between rows ``a`` and ``b`` (each normalised, so that a
    small row counts as much as a large one; only an exact 0 has no direction: 0)."""
    na, nb = float(a.norm()), float(b.norm())
    if na <= TINY or nb <= TINY:
        return 0.0
    cos = float((a @ b) / (na * nb))
    return math.sqrt(max(0.0, 1.0 - cos * cos))


def features_probe(engine, probe) -> ProbeResult:
    """Responses with equal verifiable rewards but different features (length, a token,
    log-prob sums), on-policy. X's coefficient on shared event ``e`` at reward level ``r``
    is ``w (A(X, r) + m_e)``, Y's ``w' (A(Y, r) + m_e)`` (``w`` fixed by
    :func:`_cycled`'s rotation): without a shaping ``A(X, .) = A(Y, .)`` and the rows are
    proportional (:func:`feature_rows` on the sine between rows 0 and 1; rows of one
    feature are proportional whatever the loss, so their angle is the round-off floor).
    Run without the length limit first (a mask after centring drops Y), then with it (a
    reward set to 0 on truncated responses needs one)."""
    result = ProbeResult(probe)
    moved = f"probe {probe.name}: {probe.description}"
    for limit in (None, probe.case.length_limit):
        table, batches, kappas = _cycled(engine, replace(probe, case=replace(probe.case, length_limit=limit)))
        if not bool(torch.isfinite(table).all()):
            continue
        res = _sine(table[0], table[1])
        floor = max(_sine(table[j], table[j + 2]) for j in range(table.shape[0] - 2))
        if "exchangeable" not in result.evaluations or res > result.evaluations["exchangeable"].residual:
            result.evaluations["exchangeable"] = Evaluation(res, True, batches[0], kappas[0], note=moved)
        result.found = feature_rows(res, floor, pattern_tol(engine.precision), moved)
        if result.found:
            break
    return result


def tied_offsets(m0: torch.Tensor, change: torch.Tensor, floor: float, tol: float, moved: str = "") -> list[Evidence]:
    """M7 from a tied group whose coefficients ``m0 [G, P]`` follow the level
    (:func:`~exchange.checker.mechanisms.m6_additive_term.tied_offsets`'s crossings): the
    crossing varies over the responses (each its own shaped offset ``c_i``), or the level
    misses some responses or moves them both ways (a shaping that needs a reward to act
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


def tied_signs(values: torch.Tensor, tol: float, moved: str = "") -> list[Evidence]:
    """M7 from a tied group whose coefficients do not move with the level and have one
    direction (:func:`~exchange.checker.mechanisms.tied.level_free`): the responses'
    ``values [G]`` (its left singular vector, sign restored) have both signs, as zero-sum
    shaped advantages do."""
    both = min(float(values.max()), -float(values.min()))
    return above("M7", moved, "the tied responses' values have both signs (zero-sum shaped advantages)",
                 both, tol * float(values.abs().max()))


def cancelling(K: torch.Tensor, mass: torch.Tensor, live: torch.Tensor, rtol: float, moved: str = "") -> list[Evidence]:
    """M7 when a tied group's shared events carry mass (``live``) and every one cancels
    (``|K_e| <= rtol`` of its mass): advantages that are not 0 and sum to zero at the
    group's own level, a shaping that needs a reward to act on."""
    if not bool(live.any()) or not bool((K[live].abs() <= rtol * mass[live]).all()):
        return []
    return [Evidence("M7", moved, "the tied group's shared events carry mass and cancel", 1.0, 1.0)]
