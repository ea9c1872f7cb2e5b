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
from collections.abc import Callable, Sequence
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
    times its prediction, or the loss or its float32 twin raised where the twin did not
    (precision changed what the loss computes); ``at``: the largest ``d`` per place
    compared (a property's own layout, named by :func:`layout_place`), what a property's
    result reports as its measured round-off: the largest over the whole check belongs to
    no one property. Every comparison goes through :meth:`compare`.

    The float32 twin is evaluated only where its prediction can matter
    (:meth:`needs_prediction`): the prediction is never below ``eps_p``, so a rollout with
    ``d <= ROUND_OFF_MARGIN eps_p`` is within ``ROUND_OFF_MARGIN`` times it whatever ``d32``
    is, and once ``changed`` is set nothing can unset it. ``changed`` is therefore the
    same as with the float32 twin on every rollout, at a third of the cost where the loss
    stays within its resolution (most rollouts). ``worst`` and ``at`` are the largest ``d``
    of the rollouts where the twin is finite and the loss did not raise."""

    precision: str
    rollouts: int = 0
    worst: float = 0.0
    changed: bool = False
    at: dict = field(default_factory=dict)

    def compare(self, kappa_twin: Sequence[Tensor], kappa_loss: Sequence[Tensor | None], where: str,
                float32: Callable[[list[int]], Sequence[Tensor | None]]) -> None:
        """The loss beside its twin on ``K`` rollouts (``K`` ``[N, T]`` coefficients each, or
        a ``[K, N, T]`` stack); the loss's are ``None`` where it raised and the twin did not:
        changed. ``d`` is measured on the others (:meth:`measure`, under ``where``);
        ``float32(need)`` gives the float32 twin's coefficients on the rollouts ``need``
        (indices) whose ``d`` needs a prediction (:meth:`needs_prediction`), ``None`` where
        it raised: no computation at a known precision, so the loss's difference is not
        shown to be round-off (changed), as where the loss raises. One that is not finite
        predicts unbounded round-off (:meth:`predict`)."""
        if any(k is None for k in kappa_loss):  # the loss raises where its twin does not
            self.changed = True
        kept = [i for i, k in enumerate(kappa_loss) if k is not None]
        d = self.measure([kappa_twin[i] for i in kept], [kappa_loss[i] for i in kept], where)
        need = [kept[j] for j in self.needs_prediction(d).nonzero().flatten().tolist()]
        if not need:
            return
        for i, k32 in zip(need, float32(need)):
            if k32 is None:
                self.changed = True
            else:
                self.predict(d[kept.index(i)][None], kappa_twin[i], k32)

    def measure(self, kappa_twin: Sequence[Tensor], kappa_loss: Sequence[Tensor], where: str) -> Tensor:
        """``d [K]`` of ``K`` ``[N, T]`` coefficients of the twin and the loss, recorded in
        ``worst`` and ``at[where]`` (0 where the twin is not finite)."""
        d = torch.stack([_difference(t, l) for t, l in zip(kappa_twin, kappa_loss)]) if len(kappa_twin) else \
            torch.zeros(0, dtype=torch.float64)
        self.rollouts += d.numel()
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
        """``changed`` where ``d [1]`` exceeds ``ROUND_OFF_MARGIN`` times the round-off the
        float32 twin's ``[N, T]`` coefficients predict (a float32 twin that is not finite
        there predicts nothing and changes nothing)."""
        d32 = (kappa_float32 - kappa_twin).abs().max() / _unit(kappa_twin)
        eps = RESOLUTION[self.precision]
        predicted = torch.clamp(d32 * (eps / RESOLUTION["float32"]), min=eps)
        if bool((torch.isfinite(d32) & (d > ROUND_OFF_MARGIN * predicted)).any()):
            self.changed = True


def _unit(kappa: Tensor) -> Tensor:
    """The largest |coefficient| of one rollout's ``kappa [N, T]`` (1 where all are 0), the scale of ``d``."""
    scale = kappa.abs().max()
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def _difference(kappa_twin: Tensor, kappa_loss: Tensor) -> Tensor:
    """``d`` of one rollout (``[N, T]`` each): ``max|kappa_loss - kappa_twin|`` over the
    twin's scale, NaN read as inf, 0 where the twin is not finite."""
    if not kappa_twin.numel():
        return torch.zeros((), dtype=torch.float64, device=kappa_twin.device)
    d = torch.nan_to_num((kappa_loss - kappa_twin).abs().max() / _unit(kappa_twin), nan=float("inf"))
    return torch.where(torch.isfinite(kappa_twin).all(), d, torch.zeros_like(d))


class PairedEngine:
    """An :class:`~exchange.core.coefficients.Engine` of the twin that also evaluates the
    loss itself on every rollout it is asked for, and the float32 twin on those where its
    prediction can matter, recording the differences in ``comparison``
    (:meth:`Comparison.compare`); it returns the twin's coefficients (the verdicts are the
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
            kl = self.loss(rollouts)
        except ObjectiveError:  # raised on one of them at least: the engine tells not which
            kl = [None] * len(rollouts)
        self.comparison.compare(kt, kl, "a probe or an example the checker evaluated", _on(self.float32, rollouts))
        return kt


def _on(float32: Engine, rollouts: list[Rollout]) -> Callable[[list[int]], list[Tensor | None]]:
    """:meth:`Comparison.compare`'s ``float32``: the float32 twin's engine on the rollouts
    asked for, in one call (``None`` on each where it raised: the engine tells not which)."""
    def run(need: list[int]) -> list[Tensor | None]:
        try:
            return float32([rollouts[i] for i in need])
        except ObjectiveError:
            return [None] * len(need)
    return run


def changed_on(twin: Engine, float32: Engine, pairs: list[tuple[Rollout, Tensor]], precision: str,
               comparison: Comparison | None = None) -> bool:
    """Whether the loss's coefficients on these rollouts (``(rollout, kappa [N, T])`` pairs,
    a counterexample and its variant) differ from its twin's beyond the round-off the float32
    twin predicts there (:meth:`Comparison.compare`, recorded in ``comparison`` when given):
    THEORY.md section 4, "their difference is the round-off of that loss on that input; a
    property residual within it is round-off"."""
    comparison = Comparison(precision) if comparison is None else comparison
    rollouts = [r for r, _ in pairs]
    try:
        kt = twin(rollouts)
    except ObjectiveError:  # the loss raises on it where its twin does not
        return True
    comparison.compare(kt, [kl for _, kl in pairs], "the counterexample", _on(float32, rollouts))
    return comparison.changed


def compare_on_layout(twin_fn, loss_fn, prop: Property, regime: str, seed: int, configurations: int,
                      comparison: Comparison) -> None:
    """The loss and its twin on one layout drawn by ``prop``'s generator (``configurations``
    of it, batched): every set of coefficients ``prop``'s batched evaluation asks for is
    compared (:meth:`Comparison.compare`) on the configurations the twin computes."""
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
        rows = [j for j, e in enumerate(errors) if e is None]  # the configurations the twin computes

        def float32(need: list[int]) -> list[Tensor | None]:
            idx = torch.tensor([rows[i] for i in need], dtype=torch.long, device=kt.device)
            _, k32, errors_32 = bulk.coefficients(float32_fn, template, {n: v[idx] for n, v in fields.items()},
                                                  modes[2])
            return [None if e is not None else k for k, e in zip(k32, errors_32)]

        comparison.compare([kt[j] for j in rows], [None if errors_l[j] is not None else kl[j] for j in rows],
                           layout_place(prop.name, regime), float32)
        return loss_t, kt, torch.tensor([e is not None for e in errors])

    prop.evaluate_batch(BatchInputs(lay, seeds, rewards, paired, loss_fn))
