"""M3, per-response normalisation (THEORY.md section 4, T3): a weight of the response
(``1/L_i``, ``1/sqrt(L_i)``), or a normaliser per micro-batch (its token or row count),
which makes the weight depend on the row order too.

Evidence: two responses with equal rewards and different lengths answer another
response's reward move in the ratio of their weights (:func:`per_response_rescaling`), or
reordering the rows rescales every response by a factor of its own
(:func:`position_rescaling`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from exchange.checker.cases import GroupConfig, build, common_prefix
from exchange.checker.mechanisms.evidence import Evidence, above
from exchange.checker.tolerances import FLOOR_MARGIN, RESOLUTION, SHAPING_LEAK, ZERO_COLUMN, pattern_tol

__all__ = ["per_response_rescaling", "weight_quotient", "position_rescaling"]

# The weight test's rewards (times the spread): the pair (0 and 3, different lengths) at
# the top, the mover (2) near the centre, so that a std-scaled estimator's cross
# derivative -(1 + z_i z_k) / (G sigma) is far from 0.
_WEIGHT_REWARDS = (1.0, 0.0, 0.5, 1.0)
_WEIGHT_PAIR, _WEIGHT_MOVER = (0, 3), 2
# Rewards within the clips libraries apply (OpenRLHF +-10); the second twice the first,
# so that a shaping's first-order leak extrapolates away (:func:`weight_quotient`).
_SPREADS = (4.0, 8.0)


def _moves(engine, probe, movers: tuple[int, int], spread: float):
    """``(d_i, d_j, round-off)``: the first shared coefficients' change of the pair when
    ``movers[0]``'s (for ``d_i``) and ``movers[1]``'s (for ``d_j``) reward rises by
    ``spread`` from :data:`_WEIGHT_REWARDS` times ``spread``; None when not finite."""
    grp = probe.case.groups[probe.mutation.group]
    base = tuple(spread * r for r in _WEIGHT_REWARDS)

    def moved(k: int) -> tuple[float, ...]:
        return tuple(r + (spread if n == k else 0.0) for n, r in enumerate(base))

    cases = [replace(probe.case, off_policy=False, groups=(GroupConfig(grp.responses, r),))
             for r in (base, moved(movers[0]), moved(movers[1]))]
    k0, ki, kj = engine([build(c) for c in cases])
    if not all(bool(torch.isfinite(k).all()) for k in (k0, ki, kj)):
        return None
    i, j = _WEIGHT_PAIR
    noise = FLOOR_MARGIN * RESOLUTION[engine.precision] * float(torch.stack([k0, ki, kj]).abs().max())
    return float(ki[i, 0] - k0[i, 0]), float(kj[j, 0] - k0[j, 0]), noise


def weight_quotient(quotients: tuple[float, float], precision: str, moved: str = "") -> list[Evidence]:
    """M3 from the weight quotients ``d_i / d_j`` at :data:`_SPREADS`, extrapolated to an
    infinite spread (first order: a shaping by length moves them through a std by
    ``O(s / spread)``); M3 when the limit differs from 1 by more than :data:`SHAPING_LEAK`,
    :func:`pattern_tol` and the two spreads' disagreement (the extrapolation's error)."""
    q_small, q_large = quotients
    r = _SPREADS[1] / _SPREADS[0]
    limit = (r * q_large - q_small) / (r - 1.0)
    return above("M3", moved, f"two equal-reward responses of different lengths weighted {limit:.4g} : 1",
                 abs(limit - 1.0), SHAPING_LEAK + pattern_tol(precision) + abs(q_large - q_small))


def per_response_rescaling(engine, probe, ev) -> list[Evidence]:
    """M3 from the probe that made one response's suffix longer: its (E) break says that
    something moved, this reading that it was a weight (a length-weighted centre or a std
    over shaped rewards also moves every advantage): whether two responses of the probe's
    group with equal rewards and different lengths (:data:`_WEIGHT_PAIR`) get different
    weights. Moving a third response's reward ``k`` changes response ``i``'s shared
    coefficient by ``w_i dA_ik``, and ``dA_ik = dA_jk`` for every estimator that treats the
    responses alike given their rewards, so ``d_i / d_j = w_i / w_j``. Where another response's reward reaches neither (a greedy
    baseline, raw rewards), each one's own reward moves its advantage alike, and its own
    move gives the quotient instead (:func:`weight_quotient`). An additive event term
    cancels in the differences."""
    grp = probe.case.groups[probe.mutation.group]
    lengths = [len(r) for r in grp.responses]
    i, j = _WEIGHT_PAIR
    moved = f"probe {probe.name}: another response's reward moved, lengths {lengths[i]} and {lengths[j]}"
    if common_prefix(grp.responses) == 0 or len(lengths) != len(_WEIGHT_REWARDS) or lengths[i] == lengths[j]:
        return []
    quotients = []
    for spread in _SPREADS:
        cross = _moves(engine, probe, (_WEIGHT_MOVER, _WEIGHT_MOVER), spread)
        if cross is None:
            return []
        di, dj, noise = cross
        if max(abs(di), abs(dj)) <= noise:  # no centre shared by the group
            own = _moves(engine, probe, _WEIGHT_PAIR, spread)
            if own is None:
                return []
            di, dj, noise = own
        if min(abs(di), abs(dj)) <= noise / FLOOR_MARGIN:
            # one weight 0 and the other resolved (a response masked by its own sampler
            # ratios) is as unequal as weights get; both 0 is not resolved at the precision
            return above("M3", moved, "one of two equal-reward responses has weight 0", max(abs(di), abs(dj)), noise)
        quotients.append(di / dj)
    return weight_quotient(tuple(quotients), engine.precision, moved)


def position_rescaling(before: torch.Tensor, after: torch.Tensor, mask: torch.Tensor, precision: str,
                       moved: str = "") -> list[Evidence]:
    """M3 from a normaliser per micro-batch: after the rows moved, every response's
    coefficients (``before``, ``after`` ``[N, T]``, rows aligned) rescale by one factor
    of its own (its new micro-batch's token count), and the factors differ; nothing when
    some response does not move by one factor."""
    tol = pattern_tol(precision)
    factors = []
    for i in range(before.shape[0]):
        a, b = before[i][mask[i]], after[i][mask[i]]
        ok = a.abs() > ZERO_COLUMN * float(before.abs().max())
        if not bool(ok.any()):
            continue
        q = b[ok] / a[ok]
        if float((q - q[0]).abs().max()) > tol * abs(float(q[0])):
            return []  # not one factor per response
        factors.append(float(q[0]))
    if not factors:
        return []
    return above("M3", moved, "reordering the rows rescales each response by a factor of its own",
                 max(factors) - min(factors), tol * max(abs(f) for f in factors))
