"""Name exchange objectives in a verl config: ``register()`` (verl==0.9.1).

    from exchange.libraries.verl.register import register
    register()                      # every catalog objective, as "exchange_<name>"
    # verl config: actor_rollout_ref.actor.policy_loss.loss_mode=exchange_dapo

``register`` puts one function per objective in verl's own policy-loss registry
(``core_algos.register_policy_loss``), so ``core_algos.get_policy_loss_fn`` and verl's
``ppo_loss`` find it. It has verl's policy-loss signature ``(old_log_prob, log_prob,
advantages, response_mask, loss_agg_mode, config, rollout_is_weights) -> (loss,
metrics)``.

What verl hands a policy loss is the advantage, not the rewards and group ids an
exchange objective starts from. The registered loss therefore builds a
:class:`~exchange.Rollout` in which each response's *reward* is verl's per-response
advantage (the token mean of ``advantages`` over the response) and the micro-batch is
one group. For verl's group-centred estimators (grpo, rloo, ...) every group sums to
zero, so the objective's own centring is then the identity and its std scaling one
batch constant: the token coefficients equal the objective's on the original groups up
to that constant (tests check it). Group-level transforms (a group minimum) act on the
whole micro-batch. ``loss_agg_mode`` and ``global_batch_info`` are ignored: the
objective aggregates itself. ``rollout_is_weights`` is refused.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import Tensor

from exchange.libraries.versions import require
from exchange.errors import InvalidArgument
from exchange.core.rollout import Rollout

__all__ = ["PREFIX", "register", "policy_loss", "rollout_from_verl"]

PREFIX = "exchange_"


def rollout_from_verl(old_log_prob: Tensor, advantages: Tensor, response_mask: Tensor) -> Rollout:
    """A one-group rollout whose rewards are verl's per-response advantages ``[bs]``."""
    mask = response_mask.bool()
    if bool((mask.sum(dim=1) == 0).any()):
        raise InvalidArgument("response_mask has an empty response; verl drops those before the loss.")
    lengths = mask.sum(dim=1).to(advantages.dtype)
    adv = (advantages.detach() * mask).sum(dim=1) / lengths  # [bs]
    n = int(mask.shape[0])
    return Rollout(
        tokens=torch.zeros(mask.shape, dtype=torch.long),
        mask=mask,
        rewards=adv,
        group=torch.zeros(n, dtype=torch.long),
        old_logprobs=old_log_prob.detach(),
    )


def policy_loss(loss_fn: Callable[[Tensor, Rollout], Tensor], name: str) -> Callable[..., tuple[Tensor, dict[str, Any]]]:
    """Wrap ``loss_fn(logprobs, rollout)`` in verl's policy-loss signature."""

    def verl_policy_loss(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config=None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        if rollout_is_weights is not None:
            raise InvalidArgument(
                f"policy loss {name!r} got rollout_is_weights; exchange objectives have no rollout-correction "
                "channel. Turn rollout correction off for this loss."
            )
        rollout = rollout_from_verl(old_log_prob, advantages, response_mask)
        loss = loss_fn(log_prob, rollout)
        return loss, {f"actor/{name}_loss": float(loss.detach())}

    verl_policy_loss.__name__ = name
    return verl_policy_loss


def register(objectives: Iterable[str] | None = None, prefix: str = PREFIX, **params: Any) -> list[str]:
    """Register catalog objectives (default: all) in verl as ``prefix + name``.

    ``params`` are passed to every objective (e.g. ``eps_high=0.28``). Returns the verl
    names registered. Calling it again replaces the earlier registrations.
    """
    require("verl")
    from verl.trainer.ppo import core_algos

    from exchange.objectives import names as catalog_names
    from exchange.objectives import resolve

    chosen = list(catalog_names() if objectives is None else objectives)
    registered = []
    for objective in chosen:
        verl_name = f"{prefix}{objective}"
        core_algos.register_policy_loss(verl_name)(policy_loss(resolve(objective, **params), verl_name))
        registered.append(verl_name)
    return registered
