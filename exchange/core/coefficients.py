"""Token coefficients ``kappa = dJ/dl = -d loss / d logprobs`` (THEORY.md section 1).

One backward pass of the loss with respect to the log-prob tensor gives every
coefficient at once; the update is ``grad J = sum_{i,t} kappa[i,t] grad l[i,t]``.
Everything runs in float64 so that cancellation residuals are round-off sized.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from exchange.errors import InvalidArgument, ObjectiveError
from exchange.core.rollout import LOGPROB_SLACK, Rollout

__all__ = ["LossFn", "token_coefficients", "loss_and_coefficients", "token_coefficients_batched"]

LossFn = Callable[[Tensor, Rollout], Tensor]


def _name(loss_fn: LossFn) -> str:
    return getattr(loss_fn, "__name__", None) or type(loss_fn).__name__


def _call(loss_fn: LossFn, logprobs: Tensor, rollout: Rollout) -> Tensor:
    """Evaluate ``loss_fn`` and check that it returned a differentiable scalar."""
    try:
        loss = loss_fn(logprobs, rollout)
    except Exception as err:  # a user's loss: report what it raised, with its name
        raise ObjectiveError(
            f"loss_fn={_name(loss_fn)} raised {type(err).__name__}: {err}"
        ) from err
    if not isinstance(loss, Tensor):
        raise ObjectiveError(
            f"loss_fn={_name(loss_fn)} returned {type(loss).__name__}, not a torch.Tensor. "
            "Return the loss tensor itself (no .item(), no float())."
        )
    if loss.dim() != 0:
        raise ObjectiveError(
            f"loss_fn={_name(loss_fn)} returned shape={list(loss.shape)}, not a scalar. "
            "Reduce it to one number (e.g. .sum() or .mean()) as a training loss would."
        )
    return loss


def token_coefficients(loss_fn: LossFn, logprobs: Tensor, rollout: Rollout) -> Tensor:
    """``kappa: Tensor[N, T] = -d loss_fn(logprobs, rollout) / d logprobs`` in float64.

    Padding positions get exactly 0. Raises :class:`ObjectiveError` when the loss is not
    a scalar, raises, or has no gradient path to ``logprobs``.
    """
    return loss_and_coefficients(loss_fn, logprobs, rollout)[1]


def loss_and_coefficients(loss_fn: LossFn, logprobs: Tensor, rollout: Rollout) -> tuple[Tensor, Tensor]:
    """``(loss, kappa)``: the float64 loss value and :func:`token_coefficients`."""
    if not isinstance(rollout, Rollout):
        hint = " (build one with exchange.Rollout(**d))" if isinstance(rollout, dict) else ""
        raise InvalidArgument(
            f"rollout is a {type(rollout).__name__}, not an exchange.Rollout{hint}; "
            "pass the Rollout the loss reads its rewards, mask and old log-probs from."
        )
    if not isinstance(logprobs, Tensor) or tuple(logprobs.shape) != tuple(rollout.tokens.shape):
        shape = list(logprobs.shape) if isinstance(logprobs, Tensor) else type(logprobs).__name__
        raise InvalidArgument(
            f"logprobs shape={shape} differs from rollout.tokens {list(rollout.tokens.shape)}. "
            "Pass the current-policy log-probs of the response tokens, [N, T]."
        )
    if not torch.isfinite(logprobs).all():
        raise InvalidArgument("logprobs has non-finite values. Replace NaN/inf (padding: use 0).")
    positive = rollout.mask & (logprobs > LOGPROB_SLACK)
    if bool(positive.any()):
        i, t = positive.nonzero()[0].tolist()
        raise InvalidArgument(
            f"logprobs[{i}, {t}]={float(logprobs[i, t]):.6g} > 0: a log-probability is <= 0. "
            "Pass log-probs (log_softmax), not logits or probabilities."
        )
    # A private float64 copy: a loss that edits rollout.rewards (or any field) in place
    # must not change the caller's Rollout.
    rollout64 = rollout.with_fields(copy=True)
    lp = logprobs.detach().to(torch.float64).requires_grad_(True)
    with torch.enable_grad():
        loss = _call(loss_fn, lp, rollout64)
        if not loss.requires_grad:
            raise ObjectiveError(
                f"loss_fn={_name(loss_fn)} has no gradient path to logprobs "
                "(the returned loss does not require grad). Do not .detach() the log-probs "
                "or rebuild the loss from Python floats."
            )
        (grad,) = torch.autograd.grad(loss, lp, allow_unused=True)
    if grad is None:
        grad = torch.zeros_like(lp)
    kappa = torch.where(rollout64.mask, -grad, torch.zeros((), dtype=torch.float64, device=grad.device))
    return loss.detach().to(torch.float64), kappa


def token_coefficients_batched(
    loss_fn: LossFn, logprobs: list[Tensor], rollouts: list[Rollout]
) -> list[Tensor]:
    """Coefficients of several rollouts in one call.

    Rollouts of identical shape and group layout are stacked and differentiated with
    ``torch.func.vmap(torch.func.grad(...))``; a loss that cannot be vmapped (``.item()``,
    data-dependent Python branches) falls back to one backward pass per rollout. The
    slow path :func:`token_coefficients` is the oracle the tests compare against.
    """
    if len(logprobs) != len(rollouts):
        raise InvalidArgument(f"len(logprobs)={len(logprobs)} != len(rollouts)={len(rollouts)}.")
    if not rollouts:
        return []
    try:
        return _vmapped(loss_fn, logprobs, rollouts)
    except _CannotVmap:
        return [token_coefficients(loss_fn, lp, r) for lp, r in zip(logprobs, rollouts)]


class _CannotVmap(Exception):
    pass


_STACKED = ("tokens", "mask", "rewards", "old_logprobs", "ref_logprobs", "entropy", "baseline_rewards", "truncated",
            "sampling_logprobs")


def _vmapped(loss_fn: LossFn, logprobs: list[Tensor], rollouts: list[Rollout]) -> list[Tensor]:
    first = rollouts[0]
    for r in rollouts[1:]:
        if r.tokens.shape != first.tokens.shape or not torch.equal(r.group, first.group):
            raise _CannotVmap
        for name in _STACKED:
            if (getattr(r, name) is None) != (getattr(first, name) is None):
                raise _CannotVmap
    if first.prompt_tokens is not None:
        raise _CannotVmap
    names = [n for n in _STACKED if getattr(first, n) is not None]
    stacked = [torch.stack([_as64(getattr(r, n)) for r in rollouts]) for n in names]
    lp = torch.stack([_as64(x.detach()) for x in logprobs])

    def one(lp_i: Tensor, *fields: Tensor) -> Tensor:
        r = first.with_fields(dict(zip(names, fields)))
        loss = loss_fn(lp_i, r)
        if isinstance(loss, Tensor) and not loss.requires_grad:
            # no gradient path to the log-probs: grad would give zeros where the plain
            # path raises; the loop path raises token_coefficients' error
            raise _CannotVmap
        return -loss

    try:
        grads = torch.func.vmap(torch.func.grad(one))(lp, *stacked)
    except Exception as err:  # vmap refuses data-dependent code; the loop path handles it
        raise _CannotVmap from err
    masks = torch.stack([r.mask for r in rollouts])
    grads = torch.where(masks, grads, torch.zeros((), dtype=torch.float64, device=grads.device))
    return list(grads.unbind(0))


def _as64(t: Tensor) -> Tensor:
    return t.to(torch.float64) if t.is_floating_point() else t


class Engine:
    """Coefficients for many rollouts of one ``loss_fn``, as the checker needs them.

    Same-shape rollouts go through the vmapped path; after the first refusal (a loss
    with ``.item()`` or data-dependent branches) every call uses the autograd loop.
    ``batched=False`` forces the loop (the oracle).
    """

    def __init__(self, loss_fn: LossFn, batched: bool = True, precision: str = "float64") -> None:
        self.loss_fn = loss_fn
        self.batched = batched
        self.calls = 0
        # the precision the loss computes in ("float64", "float32", "bf16"): round-off
        # allowances that depend on the inputs' magnitudes scale with it
        self.precision = precision

    def __call__(self, rollouts: list[Rollout]) -> list[Tensor]:
        self.calls += len(rollouts)
        logprobs = [r.logprobs if r.logprobs is not None else r.old_logprobs for r in rollouts]
        if self.batched and len(rollouts) > 1:
            try:
                return _vmapped(self.loss_fn, logprobs, rollouts)
            except _CannotVmap:
                self.batched = False
        return [token_coefficients(self.loss_fn, lp, r) for lp, r in zip(logprobs, rollouts)]
