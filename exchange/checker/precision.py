"""The precision a loss really runs in, and its round-off measured against its float64
twin (THEORY.md section 4, precision rule; the twin: :mod:`exchange.checker.twin`).

- :func:`detect_precision`: the coarsest format every coefficient of the loss is exact in
  (the precision a report names: the loss's, not the casts it requests);
- :class:`Comparison`, :class:`PairedEngine`, :func:`compare_on_layout`: the loss and its
  twin on the same rollouts; their difference is the loss's round-off on them, and one
  beyond :data:`~exchange.checker.tolerances.ROUND_OFF_MARGIN` times what the float32
  twin predicts for the loss's precision means precision changed what the loss computes;
- :func:`floored`: float64 round-off, judged against the float32 and float16 twins'
  round-off (on the example, and on it with rescaled rewards) scaled by the square root of
  the ratio of unit round-offs.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from exchange.checker import bulk
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.draw import RandomDraw
from exchange.checker.properties.base import BatchInputs, Evaluation, Property
from exchange.checker.tolerances import (FLOAT64_FLOOR_SCALE, FLOOR_REWARD_SCALES, PRECISIONS, RESOLUTION,
                                         ROUND_OFF_MARGIN)
from exchange.checker.twin import Float64Twin, float32_twin
from exchange.core.coefficients import Engine, LossFn, token_coefficients
from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument, ObjectiveError

__all__ = ["detect_precision", "resolve_precision", "Comparison", "PairedEngine", "changed_on", "compare_on_layout", "Floor",
           "floored"]

# The detector's batch: generic rewards (no coefficient is a round number by accident).
_DETECT_CASE = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1), (1, 3), (2, 2, 1)), (0.3, 0.71, 0.13, 0.97)),
        GroupConfig(((1, 2), (1, 0, 3)), (0.41, 0.09)),
    ),
    off_policy=True,
)
# Fewer non-zero coefficients than this say nothing about their format.
_DETECT_MIN_VALUES = 4


def detect_precision(loss_fn: LossFn) -> str:
    """The coarsest format in which every token coefficient of ``loss_fn`` is exactly
    representable, on a float64 group with generic rewards and ratios: a float64 loss
    gives generic float64 values."""
    rollout = build(_DETECT_CASE)
    kappa = token_coefficients(loss_fn, rollout.logprobs, rollout)
    values = kappa[(kappa != 0) & torch.isfinite(kappa)]
    if values.numel() < _DETECT_MIN_VALUES:
        return "float64"
    for name, dtype in (("bf16", torch.bfloat16), ("float32", torch.float32)):
        if bool((values.to(dtype).to(values.dtype) == values).all()):
            return name
    return "float64"


def resolve_precision(loss_fn: LossFn, precision: str | None) -> tuple[str, bool]:
    """``(precision, detected)``: the one given, else the loss's own declaration (an
    attribute ``exchange_precision``, which the library adapters set where the library
    rounds an intermediate that later float64 arithmetic hides), else detected."""
    if precision is None:
        precision = getattr(loss_fn, "exchange_precision", None)
    if precision is None:
        return detect_precision(loss_fn), True
    if precision not in PRECISIONS:
        raise InvalidArgument(f"precision={precision!r}: choose from {PRECISIONS} (or None to detect it).")
    return precision, False


# ------------------------------------------------------------ the twin and the loss
@dataclass
class Comparison:
    """What the loss's own coefficients showed next to its twin's on the same rollouts
    (THEORY.md section 4: "their difference is the round-off of that loss on that input").

    On each rollout, ``d = max|kappa_loss - kappa_twin| / max|kappa_twin|`` is the loss's
    measured round-off; the round-off its precision can commit there is predicted from the
    float32 twin, ``max(d32 eps_p / eps_float32, eps_p)`` (``d32`` the float32 twin's
    difference, the same computation's conditioning). ``worst``: the largest ``d``;
    ``changed``: some ``d`` exceeded :data:`~exchange.checker.tolerances.ROUND_OFF_MARGIN`
    times its prediction (precision changed what the loss computes), ``where`` naming the
    first such evaluation."""

    precision: str
    rollouts: int = 0
    worst: float = 0.0
    changed: bool = False
    where: str = ""

    def add(self, kappa_twin: Tensor, kappa_loss: Tensor, kappa_float32: Tensor, where: str) -> None:
        """Compare ``[K, N, T]`` (or ``[N, T]``) coefficients of the twin, the loss and the
        float32 twin."""
        kt, kl, k32 = (k.reshape(-1, *k.shape[-2:]) for k in (kappa_twin, kappa_loss, kappa_float32))
        finite = torch.isfinite(kt).flatten(1).all(1) & torch.isfinite(k32).flatten(1).all(1)
        scale = kt.abs().flatten(1).amax(1)
        unit = torch.where(scale > 0, scale, torch.ones_like(scale))
        d = torch.nan_to_num((kl - kt).abs().flatten(1).amax(1) / unit, nan=float("inf"))
        d32 = (k32 - kt).abs().flatten(1).amax(1) / unit
        eps = RESOLUTION[self.precision]
        predicted = torch.clamp(d32 * (eps / RESOLUTION["float32"]), min=eps)
        d = torch.where(finite, d, torch.zeros_like(d))
        self.rollouts += kt.shape[0]
        if d.numel():
            self.worst = max(self.worst, float(d.max()))
            if bool((d > ROUND_OFF_MARGIN * predicted).any()) and not self.changed:
                self.changed, self.where = True, where


class PairedEngine:
    """An :class:`~exchange.core.coefficients.Engine` of the twin that also evaluates the
    loss itself and its float32 twin on every rollout it is asked for, recording the
    differences in ``comparison``; it returns the twin's coefficients (the verdicts are the
    twin's)."""

    def __init__(self, twin: Engine, loss: Engine, float32: Engine, comparison: Comparison) -> None:
        self.twin, self.loss, self.float32, self.comparison = twin, loss, float32, comparison
        self.loss_fn = twin.loss_fn
        self.precision = twin.precision

    @property
    def calls(self) -> int:
        return self.twin.calls

    def __call__(self, rollouts: list[Rollout]) -> list[Tensor]:
        kt = self.twin(rollouts)
        try:
            kl, k32 = self.loss(rollouts), self.float32(rollouts)
        except ObjectiveError:  # the loss raises where its twin does not: what it computes changed
            self.comparison.changed, self.comparison.where = True, self.comparison.where or "the loss raised"
            return kt
        for t, l, f in zip(kt, kl, k32):
            self.comparison.add(t, l, f, "a probe or an example the checker evaluated")
        return kt


def changed_on(twin: Engine, float32: Engine, pairs: list[tuple[Rollout, Tensor]], precision: str) -> bool:
    """Whether the loss's coefficients on these rollouts (``(rollout, kappa [N, T])`` pairs,
    a counterexample and its variant) differ from its twin's beyond the round-off the float32
    twin predicts there (:class:`Comparison`): THEORY.md section 4, "their difference is the
    round-off of that loss on that input; a property residual within it is round-off"."""
    comparison = Comparison(precision)
    try:
        kt, k32 = twin([r for r, _ in pairs]), float32([r for r, _ in pairs])
    except ObjectiveError:  # the loss raises on it where its twin does not
        return True
    for (_, kl), t, f in zip(pairs, kt, k32):
        comparison.add(t, kl, f, "the counterexample")
    return comparison.changed


def compare_on_layout(twin_fn, loss_fn, prop: Property, regime: str, seed: int, configurations: int,
                      comparison: Comparison) -> None:
    """The loss and its twin on one layout drawn by ``prop``'s generator (``configurations``
    of it, batched): every set of coefficients ``prop``'s batched evaluation asks for is
    compared."""
    rng = random.Random(f"exchange.twin/{seed}/{prop.name}/{regime}")
    d = RandomDraw(rng)
    lay = prop.layout(d, regime)
    seeds = [rng.randint(0, 2**16) for _ in range(configurations)]
    rewards = torch.tensor([[x for rw in cfg for x in rw] for cfg in bulk.draw_rewards(d, configurations, lay)],
                           dtype=torch.float64)
    float32_fn = float32_twin(loss_fn)
    modes = (bulk.Mode(True), bulk.Mode(True), bulk.Mode(True))

    def paired(template: Rollout, fields: dict) -> tuple[Tensor, Tensor, Tensor]:
        loss_t, kt, errors = bulk.coefficients(twin_fn, template, fields, modes[0])
        _, kl, errors_l = bulk.coefficients(loss_fn, template, fields, modes[1])
        _, k32, errors_32 = bulk.coefficients(float32_fn, template, fields, modes[2])
        ok = torch.tensor([a is None and b is None and c is None for a, b, c in zip(errors, errors_l, errors_32)])
        comparison.add(kt[ok], kl[ok], k32[ok], f"{prop.name} ({regime})")
        return loss_t, kt, torch.tensor([e is not None for e in errors])

    prop.evaluate_batch(BatchInputs(lay, seeds, rewards, paired, loss_fn))


# ------------------------------------------------------------------ float64 floor
@dataclass
class Floor:
    """A float64 residual judged against the float64 floor: ``raw`` the twin's residual,
    ``floor`` what the float32 twin's round-off predicts for float64."""

    raw: float
    floor: float

    def __str__(self) -> str:
        return (f"holds up to float64 round-off (residual {self.raw:.2g} within the float64 floor {self.floor:.2g} "
                "measured on the float32 and float16 twins)")


def _scaled_rewards(case: Case, factor: float) -> Case:
    """``case`` with every reward times ``factor``: the same verdict (a property that holds,
    holds for every reward vector; ties stay ties), other low bits."""
    return replace(case, groups=tuple(replace(g, rewards=tuple(x * factor for x in g.rewards)) for g in case.groups))


def _inner(loss_fn):
    return loss_fn.loss_fn if isinstance(loss_fn, Float64Twin) else loss_fn


def floored(prop: Property, float32_engine: Engine, seen: dict) -> Property:
    """``prop`` whose plain evaluation (the oracle that confirms every failure) judges a
    residual above the float64 tolerance against the float64 floor of the same example
    (THEORY.md section 4: "the float64 tolerances sit above a measured float64 floor"). The
    float32 and float16 twins round the same computation: each one's residual and its
    coefficients' difference to the float64 twin on the example's rollout (relative to the
    largest; a run that lost every digit still shows its conditioning there, where its
    residual saturates), times :data:`~exchange.checker.tolerances.FLOAT64_FLOOR_SCALE`
    predict the float64 round-off (a square root of a cancelled one-pass variance rounds
    as ``sqrt(eps)``; smooth operations as ``eps``, which that bounds; two twins because one
    samples a rounding, it does not bound it); the floor is
    :data:`~exchange.checker.tolerances.ROUND_OFF_MARGIN` times that (two precisions do not
    round one computation in proportion). Where that does not cover the residual, the twins
    round the example again with every reward times each of
    :data:`~exchange.checker.tolerances.FLOOR_REWARD_SCALES` (the same verdict, other low
    bits: both twins can round a tie exactly where float64 does not). Within the floor, the
    residual is reported scaled to the tolerance and the raw one is recorded in
    ``seen[(name, regime)]``."""

    half_engine = Engine(Float64Twin(_inner(float32_engine.loss_fn), target=torch.float16),
                         batched=float32_engine.batched)

    def predicted(example, regime: str, k64=None, rollout=None) -> float:
        """The float64 round-off the float32 and float16 twins predict on ``example`` (each
        one's residual and, on ``rollout``, its coefficients' difference to ``k64``), times
        the margin."""
        out = 0.0
        for low_engine, name in ((float32_engine, "float32"), (half_engine, "float16")):
            try:
                values = [prop.evaluate(low_engine, example, regime).residual]
                if rollout is not None:
                    (k_low,) = low_engine([rollout])
                    scale = float(k64.abs().max())
                    values.append(float((k_low - k64).abs().max()) / scale if scale > 0 else 0.0)
            except ObjectiveError:
                continue
            out = max(out, max((v for v in values if math.isfinite(v)), default=0.0) * FLOAT64_FLOOR_SCALE[name])
        return ROUND_OFF_MARGIN * out

    def evaluate(engine, example, regime: str) -> Evaluation:
        ev = prop.evaluate(engine, example, regime)
        if not ev.residual > prop.tolerance or not math.isfinite(ev.residual) or ev.exact:
            return ev
        floor = predicted(example, regime, ev.kappa, ev.rollout)
        for factor in FLOOR_REWARD_SCALES:  # fresh roundings of the same verdict, until one covers it
            if ev.residual <= floor:
                break
            floor = max(floor, predicted(example.with_case(_scaled_rewards(example.case, factor)), regime))
        if ev.residual <= floor:
            found = Floor(ev.residual, floor)
            key = (prop.name, regime)
            if key not in seen or seen[key].raw < found.raw:
                seen[key] = found
            ev.residual = ev.residual * prop.tolerance / floor
        return ev

    return replace(prop, evaluate=evaluate)
