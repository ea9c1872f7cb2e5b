"""The float64 floor (THEORY.md section 4: "float64 itself rounds ..., so the float64
tolerances sit above a measured float64 floor"): a float64 residual above its property's
tolerance is judged against what float64's own rounding, directed up and down
(:mod:`exchange.checker.rounding`), does to the same example's coefficients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from exchange.checker.properties.base import Evaluation, Property
from exchange.checker.rounding import DIRECTIONS, ROUNDINGS_STEP, directed_twin
from exchange.checker.tolerances import ROUND_OFF_MARGIN
from exchange.checker.twin import Float64Twin
from exchange.core.coefficients import Engine
from exchange.errors import ObjectiveError

__all__ = ["Floor", "float64_rounding", "floored"]


@dataclass
class Floor:
    """A float64 residual judged against the float64 floor: ``raw`` the twin's residual,
    ``floor`` what float64's own rounding, directed up and down, does on the same example."""

    raw: float
    floor: float

    def __str__(self) -> str:
        return (f"holds up to float64 round-off (residual {self.raw:.2g} within the float64 floor {self.floor:.2g} "
                "measured on the float64 twin with its rounding directed up and down)")


def _inner(loss_fn):
    return loss_fn.loss_fn if isinstance(loss_fn, Float64Twin) else loss_fn


def float64_rounding(loss_fn, ev: Evaluation) -> float:
    """How far float64's own rounding can move the coefficients ``ev`` compared (its
    rollout and, where it has one, its variant), relative to their largest: on each, what
    one more rounding moves them by, the float64 twin with every operation's rounding
    directed (:func:`~exchange.checker.rounding.directed_twin`) by two roundings against
    the same by one, up and down, the larger; summed over the two, because the residual
    compares two computations that each round. A round-off grows with the rounding
    (linearly, or as a square root after a cancellation), so the step from one rounding to
    two is of its size; a decision a rounding flips (a mask, a clip, a selection decided
    otherwise: a coefficient jumps by its own size) is the same at one rounding and at two
    and cancels from the step (measured against the plain twin instead, ``exchange audit``
    read clip_cov's real (P) break, 0.88, as float64 round-off under a floor of 32).
    Measured at float64 itself: a round-off that a square root amplifies (``sqrt(eps) |x|``
    from a cancelled one-pass variance) is measured as it is. The floor before sampled the
    same computation at float32 and float16 and scaled it to float64 by an assumed law (the
    square root of the ratio of unit round-offs, with rescaled rewards for more samples):
    where both round a tie exactly that float64 rounds, it predicts 0 (benchmark seed 2026
    #269: a leave-one-out std of four tied shaped rewards, ``2^-26`` in some row orders and
    0 in others, float32 and float16 exact at every reward scale;
    tests/checker/test_float64_floor.py)."""
    pairs = [(r, k) for r, k in ((ev.rollout, ev.kappa), (ev.variant, ev.variant_kappa)) if r is not None and k is not None]
    rollouts = [r for r, _ in pairs]
    moved = [0.0] * len(pairs)
    for direction in DIRECTIONS:
        try:
            one, two = (Engine(directed_twin(_inner(loss_fn), direction * n), batched=False)(rollouts)
                        for n in ROUNDINGS_STEP)
        except ObjectiveError:
            continue
        for i, ((_, k), k1, k2) in enumerate(zip(pairs, one, two)):
            scale = float(k.abs().max())
            d = float((k2 - k1).abs().max()) / scale if scale > 0 else 0.0
            moved[i] = max(moved[i], d if math.isfinite(d) else 0.0)
    return sum(moved)


def floored(prop: Property, seen: dict) -> Property:
    """``prop`` whose plain evaluation (the oracle that confirms every failure) judges a
    residual above the float64 tolerance against the float64 floor of the same example
    (THEORY.md section 4: "the float64 tolerances sit above a measured float64 floor"):
    :data:`~exchange.checker.tolerances.ROUND_OFF_MARGIN` times :func:`float64_rounding`
    (one direction for every rounding at once is one combination of them, not the worst).
    Within the floor, the residual is reported scaled to the tolerance and the raw one is
    recorded in ``seen[(name, regime)]``."""

    def evaluate(engine, example, regime: str) -> Evaluation:
        ev = prop.evaluate(engine, example, regime)
        if not ev.residual > prop.tolerance or not math.isfinite(ev.residual) or ev.exact:
            return ev
        floor = ROUND_OFF_MARGIN * float64_rounding(engine.loss_fn, ev)
        if ev.residual <= floor:
            found = Floor(ev.residual, floor)
            key = (prop.name, regime)
            if key not in seen or seen[key].raw < found.raw:
                seen[key] = found
            ev.residual = ev.residual * prop.tolerance / floor
        return ev

    return replace(prop, evaluate=evaluate)
