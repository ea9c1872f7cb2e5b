"""The precision a loss really runs in, and its round-off measured against its float64
twin (THEORY.md section 4, precision rule; the twin: :mod:`exchange.checker.twin`).

- :func:`detect_precision`: the coarsest format every coefficient of the loss is exact in
  (the precision a report names: the loss's, not the casts it requests);
- :class:`Comparison`, :class:`PairedEngine`, :func:`compare_on_layout`: the loss and its
  twin on the same rollouts; their difference is the loss's round-off on them, and one
  beyond :data:`~exchange.checker.tolerances.ROUND_OFF_MARGIN` times what the float32
  twin predicts for the loss's precision means precision changed what the loss computes
  (the float32 twin evaluated only where that can happen);

The float64 floor (float64's own round-off) is :mod:`exchange.checker.float64_floor`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
from torch import Tensor

from exchange.checker import bulk
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.draw import RandomDraw
from exchange.checker.properties.base import BatchInputs, Property
from exchange.checker.tolerances import PRECISIONS, RESOLUTION, ROUND_OFF_MARGIN
from exchange.checker.twin import float32_twin
from exchange.core.coefficients import Engine, LossFn, token_coefficients
from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument, ObjectiveError

__all__ = ["detect_precision", "resolve_precision", "Comparison", "PairedEngine", "changed_on", "compare_on_layout",
           "layout_place"]

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
def layout_place(prop_name: str, regime: str) -> str:
    """The name :func:`compare_on_layout` records a property's layout under
    (:attr:`Comparison.at`'s key), the one a result reads its own round-off back by."""
    return f"{prop_name} ({regime})"


@dataclass
class Comparison:
    """What the loss's own coefficients showed next to its twin's on the same rollouts
    (THEORY.md section 4: "their difference is the round-off of that loss on that input").

    On each rollout, ``d = max|kappa_loss - kappa_twin| / max|kappa_twin|`` is the loss's
    measured round-off; the round-off its precision can commit there is predicted from the
    float32 twin, ``max(d32 eps_p / eps_float32, eps_p)`` (``d32`` the float32 twin's
    difference, the same computation's conditioning). ``worst``: the largest ``d``;
    ``changed``: some ``d`` exceeded :data:`~exchange.checker.tolerances.ROUND_OFF_MARGIN`
    times its prediction (precision changed what the loss computes); ``at``: the largest
    ``d`` per place compared (a property's own layout, named by :func:`layout_place`), what
    a property's result reports as its measured round-off: the largest over the whole check
    belongs to no one property.

    The float32 twin is evaluated only where its prediction can matter
    (:meth:`needs_prediction`): the prediction is never below ``eps_p``, so a rollout with
    ``d <= ROUND_OFF_MARGIN eps_p`` is within ``ROUND_OFF_MARGIN`` times it whatever ``d32``
    is, and once ``changed`` is set nothing can unset it. ``changed`` is therefore the
    same as with the float32 twin on every rollout, at a third of the cost where the loss
    stays within its resolution (most rollouts). ``worst`` and ``at`` are the largest ``d``
    of the rollouts where the twin is finite, whatever the float32 twin does (before, a
    rollout where the float32 twin alone was non-finite or raised was left out of them)."""

    precision: str
    rollouts: int = 0
    worst: float = 0.0
    changed: bool = False
    at: dict = field(default_factory=dict)

    def measure(self, kappa_twin: Tensor, kappa_loss: Tensor, where: str) -> Tensor:
        """``d [K]`` of ``[K, N, T]`` (or ``[N, T]``) coefficients of the twin and the loss,
        recorded in ``worst`` and ``at[where]`` (0 where the twin is not finite)."""
        kt, kl = (k.reshape(-1, *k.shape[-2:]) for k in (kappa_twin, kappa_loss))
        d = torch.nan_to_num((kl - kt).abs().flatten(1).amax(1) / _unit(kt), nan=float("inf"))
        d = torch.where(torch.isfinite(kt).flatten(1).all(1), d, torch.zeros_like(d))
        self.rollouts += kt.shape[0]
        if d.numel():
            self.worst = max(self.worst, float(d.max()))
            self.at[where] = max(self.at.get(where, 0.0), float(d.max()))
        return d

    def needs_prediction(self, d: Tensor) -> Tensor:
        """``[K]``: the rollouts whose ``d`` (:meth:`measure`) can set ``changed``, those
        beyond ``ROUND_OFF_MARGIN`` times the smallest prediction, ``eps_p`` (none once
        ``changed`` is set): the only ones the float32 twin is evaluated on."""
        if self.changed:
            return torch.zeros_like(d, dtype=torch.bool)
        return d > ROUND_OFF_MARGIN * RESOLUTION[self.precision]

    def predict(self, d: Tensor, kappa_twin: Tensor, kappa_float32: Tensor) -> None:
        """``changed`` where ``d [K]`` exceeds ``ROUND_OFF_MARGIN`` times the round-off the
        float32 twin's ``[K, N, T]`` coefficients predict (a float32 twin that is not
        finite there predicts nothing and changes nothing)."""
        kt, k32 = (k.reshape(-1, *k.shape[-2:]) for k in (kappa_twin, kappa_float32))
        d32 = (k32 - kt).abs().flatten(1).amax(1) / _unit(kt)
        eps = RESOLUTION[self.precision]
        predicted = torch.clamp(d32 * (eps / RESOLUTION["float32"]), min=eps)
        if bool((torch.isfinite(d32) & (d.reshape(-1) > ROUND_OFF_MARGIN * predicted)).any()):
            self.changed = True

    def add(self, kappa_twin: Tensor, kappa_loss: Tensor, kappa_float32: Tensor, where: str) -> None:
        """Compare ``[K, N, T]`` (or ``[N, T]``) coefficients of the twin, the loss and the
        float32 twin (:meth:`measure`, then :meth:`predict` where it is needed)."""
        d = self.measure(kappa_twin, kappa_loss, where)
        need = self.needs_prediction(d)
        if bool(need.any()):
            kt, k32 = (k.reshape(-1, *k.shape[-2:]) for k in (kappa_twin, kappa_float32))
            self.predict(d[need], kt[need], k32[need])


def _unit(kappa: Tensor) -> Tensor:
    """``[K]``: each rollout's largest |coefficient| (1 where all are 0), the scale of ``d``."""
    scale = kappa.abs().flatten(1).amax(1)
    return torch.where(scale > 0, scale, torch.ones_like(scale))


class PairedEngine:
    """An :class:`~exchange.core.coefficients.Engine` of the twin that also evaluates the
    loss itself on every rollout it is asked for, and the float32 twin on those where its
    prediction can matter (:meth:`Comparison.needs_prediction`), recording the differences
    in ``comparison``; it returns the twin's coefficients (the verdicts are the twin's). A
    loss that raises where its twin does not changed what it computes; so does a float32
    twin that raises where it is needed (it did so on any rollout before)."""

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
            kl = self.loss(rollouts)
        except ObjectiveError:  # the loss raises where its twin does not: what it computes changed
            self.comparison.changed = True
            return kt
        _predict_where_needed(self.comparison, self.float32, rollouts, kt,
                              [self.comparison.measure(t, l, "a probe or an example the checker evaluated")
                               for t, l in zip(kt, kl)])
        return kt


def _predict_where_needed(comparison: Comparison, float32: Engine, rollouts: list[Rollout], kt: list[Tensor],
                          ds: list[Tensor]) -> bool:
    """The float32 twin on the rollouts whose ``d`` (``ds``, one ``[1]`` per rollout) needs a
    prediction, in one call; ``False`` when it raised there (nothing was predicted)."""
    need = [i for i, d in enumerate(ds) if bool(comparison.needs_prediction(d).any())]
    if not need:
        return True
    try:
        k32 = float32([rollouts[i] for i in need])
    except ObjectiveError:
        comparison.changed = True
        return False
    for i, f in zip(need, k32):
        comparison.predict(ds[i], kt[i], f)
    return True


def changed_on(twin: Engine, float32: Engine, pairs: list[tuple[Rollout, Tensor]], precision: str,
               comparison: Comparison | None = None) -> bool:
    """Whether the loss's coefficients on these rollouts (``(rollout, kappa [N, T])`` pairs,
    a counterexample and its variant) differ from its twin's beyond the round-off the float32
    twin predicts there (:class:`Comparison`, recorded in ``comparison`` when given; the
    float32 twin evaluated only where needed): THEORY.md section 4, "their difference is the
    round-off of that loss on that input; a property residual within it is round-off"."""
    comparison = Comparison(precision) if comparison is None else comparison
    rollouts = [r for r, _ in pairs]
    try:
        kt = twin(rollouts)
    except ObjectiveError:  # the loss raises on it where its twin does not
        return True
    ds = [comparison.measure(t, kl, "the counterexample") for (_, kl), t in zip(pairs, kt)]
    if not _predict_where_needed(comparison, float32, rollouts, kt, ds):
        return True
    return comparison.changed


def compare_on_layout(twin_fn, loss_fn, prop: Property, regime: str, seed: int, configurations: int,
                      comparison: Comparison) -> None:
    """The loss and its twin on one layout drawn by ``prop``'s generator (``configurations``
    of it, batched): every set of coefficients ``prop``'s batched evaluation asks for is
    compared, on the configurations where neither raised; the float32 twin runs on those
    of them whose difference needs its prediction (:meth:`Comparison.needs_prediction`), and
    one where it raises predicts nothing (before, such a configuration was also left out
    of ``worst`` and ``at``)."""
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
        ok = torch.tensor([a is None and b is None for a, b in zip(errors, errors_l)], dtype=torch.bool)
        diff = comparison.measure(kt[ok], kl[ok], layout_place(prop.name, regime))
        need = comparison.needs_prediction(diff)
        if bool(need.any()):
            idx = ok.nonzero().flatten()[need]  # the configurations [K'] the float32 twin runs on
            _, k32, errors_32 = bulk.coefficients(float32_fn, template, {n: v[idx] for n, v in fields.items()},
                                                  modes[2])
            fine = torch.tensor([e is None for e in errors_32], dtype=torch.bool)
            comparison.predict(diff[need][fine], kt[idx][fine], k32[fine])
        return loss_t, kt, torch.tensor([e is not None for e in errors])

    prop.evaluate_batch(BatchInputs(lay, seeds, rewards, paired, loss_fn))
