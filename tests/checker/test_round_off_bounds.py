"""The round-off bounds the tolerance record derives (exchange/checker/tolerances.py),
each from planted coefficients whose only departure from the exact pattern is round-off
within its stated bound: the judgement must read them as the exact pattern."""

from __future__ import annotations

import torch

from exchange.checker.mechanisms import m6_additive_term, m7_feature_shaping
from exchange.checker.tolerances import pattern_tol


def test_two_crossings_each_rounded_within_the_floor_are_one_crossing():
    """``ROUNDINGS``: a tied group of uncentred advantages (every response ``A = level - 1``,
    THEORY.md section 4: M4, no event term) crosses zero at level 1 on every event in exact
    arithmetic. Each coefficient is known to its round-off ``floor`` (the probe's bound on
    one rounded coefficient), so a crossing ``-m0 / change`` is known to ``floor / |change|``,
    and two crossings may differ by twice that. Here response 0's two events are rounded
    by ``+0.9 floor`` and ``-0.9 floor`` at both levels (``change`` exact): the crossings
    differ by ``1.8 floor``. With one rounding (``ROUNDINGS = 1``) that reads as an event
    term (M6) and a shaped offset (M7); with the two the comparison carries, as round-off."""
    tol = pattern_tol("float32")
    w = torch.tensor([1.0, 2.0, 1.0, 3.0], dtype=torch.float64)[:, None]
    k0 = (-w).expand(4, 2).clone()  # level 0: w_i (0 - 1)
    k1 = torch.zeros_like(k0)  # level 1: w_i (1 - 1)
    floor = tol * float(w.max())  # the probe's floor: pattern_tol of the largest coefficient
    for k in (k0, k1):
        k[0, 0] += 0.9 * floor
        k[0, 1] -= 0.9 * floor
    change = k1 - k0
    assert m6_additive_term.tied_offsets(k0, change, floor, tol) == []
    assert m7_feature_shaping.tied_offsets(k0, change, floor, tol) == []
    # an event term of a few floors at both levels is no round-off: named
    k0[0, 1] -= 4.0 * floor
    k1[0, 1] -= 4.0 * floor
    assert m6_additive_term.tied_offsets(k0, k1 - k0, floor, tol)[0].mechanism == "M6"
