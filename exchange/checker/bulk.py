"""Bulk fuzzing (docs/properties.md, "Fuzzing"): Hypothesis spends most of its time on
per-example machinery, so here a seeded ``random.Random`` draws *layouts* through the
property's own generator (:class:`~exchange.checker.draw.RandomDraw`) and ``K``
configurations per layout that differ in their rewards and value seed (each *is* an
:class:`~exchange.checker.examples.Example`: :meth:`Layout.complete`). Their coefficients
come from one ``vmap`` of the forward and one backward, their residuals from the
property's batched evaluation; a failure counts once the plain path (the oracle) confirms it.
"""

from __future__ import annotations

import math
import random
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from exchange.checker.cases import build
from exchange.checker.draw import RandomDraw
from exchange.checker.examples import Example, Layout
from exchange.checker.properties.base import BatchInputs, Evaluation, Property
from exchange.core.coefficients import loss_and_coefficients
from exchange.core.rollout import Rollout
from exchange.errors import ObjectiveError

__all__ = ["Tally", "BulkResult", "evaluate_or_error", "run", "plan", "draw_rewards", "evaluate", "coefficients", "Mode",
           "BATCH", "MIN_LAYOUTS"]

BATCH = 16  # configurations per layout (at most)
MIN_LAYOUTS = 8  # layouts per property and regime (at least): structure matters most
_F64 = torch.float64


def draw_rewards(d: RandomDraw, k: int, lay: Layout) -> list[list[tuple[float, ...]]]:
    """``k`` configurations' rewards (:meth:`Layout.rewards`, as Hypothesis draws them)."""
    return [lay.rewards(d) for _ in range(k)]


# ------------------------------------------------------------ coefficients
class _NoVmap(Exception):
    pass


class Mode:
    """Whether to try ``vmap``: cleared after the first refusal, so a loss that cannot
    be vmapped pays for the attempt once per property and regime."""

    def __init__(self, vmap: bool) -> None:
        self.vmap = vmap


def coefficients(loss_fn, template: Rollout, fields: dict[str, Tensor], use_vmap: "Mode") -> tuple[Tensor, Tensor, list]:
    """``(loss [K], kappa [K, N, T], errors)`` for the configurations ``fields``
    (``[K, ...]`` each, on ``template``'s layout): one ``vmap`` of the forward and one
    backward, or one autograd call per configuration for a loss vmap refuses.
    ``errors[k]`` is the :class:`ObjectiveError` of configuration ``k`` (loop path), else
    ``None``."""
    k = fields["logprobs"].shape[0]
    mask = template.mask
    if use_vmap.vmap:
        try:
            return (*_vmapped(loss_fn, template, fields), [None] * k)
        except _NoVmap:
            use_vmap.vmap = False
    losses = torch.zeros(k, dtype=_F64)
    kappa = torch.zeros(k, *mask.shape, dtype=_F64)
    errors: list = [None] * k
    for j in range(k):
        r = template.with_fields({name: value[j] for name, value in fields.items()})
        try:
            loss, kap = loss_and_coefficients(loss_fn, r.logprobs, r)
        except ObjectiveError as err:
            errors[j] = err
            losses[j] = float("nan")
            continue
        losses[j], kappa[j] = loss, kap
    return losses, kappa, errors


def _vmapped(loss_fn, template: Rollout, fields: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    names = list(fields)
    # private copies: a loss that edits a field in place must not change the batch
    stacked = [fields[n].clone() for n in names]

    def one(lp: Tensor, *vals: Tensor) -> Tensor:
        loss = loss_fn(lp, template.with_fields(dict(zip(names, vals))))
        if not isinstance(loss, Tensor) or loss.dim() != 0:
            raise _NoVmap
        return loss.to(_F64)

    # vmap the forward only; one ordinary backward of the summed losses gives every
    # configuration's gradient (they are independent). torch.func.grad would import
    # torch._dynamo (~2 s per process) for nothing here.
    lp = fields["logprobs"].detach().clone().requires_grad_(True)
    try:
        with torch.enable_grad(), warnings.catch_warnings():
            # vmap's fallback for ops without a batching rule (a loop inside torch) warns
            # about speed on every call: not the user's concern
            warnings.filterwarnings("ignore", message="There is a performance drop")
            losses = torch.func.vmap(one)(lp, *stacked)
            if not losses.requires_grad:  # no gradient path to the log-probs: the loop reports each
                raise _NoVmap             # configuration's error, as the plain path does
            grads = torch.autograd.grad(losses.sum(), lp, allow_unused=True)[0]
    except Exception as err:  # vmap refuses data-dependent code; the loop handles it
        raise _NoVmap from err
    if grads is None:  # the losses require grad through something else (a parameter), not the log-probs
        grads = torch.zeros_like(lp)
    mask = fields["mask"] if "mask" in fields else template.mask[None]
    kappa = torch.where(mask, -grads.to(_F64), torch.zeros((), dtype=_F64))
    return losses.detach(), kappa.detach()


def evaluate(loss_fn, prop: Property, lay: Layout, seeds: list[int], rewards: list, mode: Mode | bool = True):
    """``prop``'s batched residuals of the configurations ``(seeds[k], rewards[k])`` of
    ``lay`` (``rewards[k][g]``: group ``g``'s rewards): a
    :class:`~exchange.checker.properties.base.BatchResult`."""
    mode = Mode(mode) if isinstance(mode, bool) else mode

    def batch_coefficients(template: Rollout, fields: dict) -> tuple[Tensor, Tensor, Tensor]:
        loss, kappa, errors = coefficients(loss_fn, template, fields, mode)
        return loss, kappa, torch.tensor([e is not None for e in errors])

    flat = torch.tensor([[x for rw in cfg for x in rw] for cfg in rewards], dtype=_F64)
    inputs = BatchInputs(lay, seeds, flat, batch_coefficients, loss_fn)
    result = prop.evaluate_batch(inputs)
    if inputs.raised is not None:  # the loss raised in a call on some configurations: as its error
        result.residual = torch.where(inputs.raised, torch.full_like(result.residual, float("inf")), result.residual)
    return result


# --------------------------------------------------------------------- run
@dataclass
class Tally:
    """Every configuration evaluated for one property and regime, the failing one included."""

    examples: int = 0
    informative: int = 0
    max_residual: float = 0.0

    def add(self, examples: int, informative: int, max_residual: float = 0.0) -> None:
        self.examples += examples
        self.informative += informative
        self.max_residual = max(self.max_residual, max_residual)


@dataclass
class BulkResult(Tally):
    failure: Example | None = None  # the first confirmed failure
    evaluation: Evaluation | None = None  # the oracle's evaluation of it
    layouts: int = 0


def evaluate_or_error(engine, prop: Property, example: Example, regime: str) -> Evaluation:
    """The plain property code on one example (the oracle); a loss that raises is an
    infinite residual."""
    try:
        return prop.evaluate(engine, example, regime)
    except ObjectiveError as err:
        rollout = build(example.case)
        return Evaluation(float("inf"), True, rollout, rollout.old_logprobs * 0, [str(err)])


def plan(max_examples: int) -> tuple[int, int]:
    """``(layouts, configurations per layout)`` for ``max_examples``: at least
    ``MIN_LAYOUTS`` layouts, at most ``BATCH`` configurations each, and at least
    ``max_examples`` configurations in all."""
    layouts = max(MIN_LAYOUTS, math.ceil(max_examples / BATCH))
    return layouts, max(1, math.ceil(max_examples / layouts))


def run(engine, prop: Property, regime: str, max_examples: int, seed: int, tolerance: float,
        use_vmap: bool = True) -> BulkResult:
    """Bulk-fuzz ``prop`` in ``regime``; deterministic for ``seed``."""
    rng = random.Random(f"exchange.bulk/{seed}/{prop.name}/{regime}")
    d = RandomDraw(rng)
    layouts, per = plan(max_examples)
    mode = Mode(use_vmap)
    out = BulkResult()
    for _ in range(layouts):
        lay = prop.layout(d, regime)
        seeds = [rng.randint(0, 2**16) for _ in range(per)]
        rewards = draw_rewards(d, per, lay)
        batch = evaluate(engine.loss_fn, prop, lay, seeds, rewards, mode)
        out.layouts += 1
        for j in (~(batch.residual <= tolerance)).nonzero().flatten().tolist():
            ex = lay.complete(rewards[j], seeds[j])
            ev = evaluate_or_error(engine, prop, ex, regime)  # the oracle confirms it
            if not ev.residual <= tolerance:
                out.add(j + 1, int(batch.informative[: j + 1].sum()), max(batch.residual[:j].tolist(), default=0.0))
                out.failure, out.evaluation = ex, ev
                return out
            batch.residual[j] = 0.0  # round-off disagreement at the tolerance: the oracle decides
        out.add(per, int(batch.informative.sum()), float(batch.residual.max()))
    return out
