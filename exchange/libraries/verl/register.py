"""Name exchange objectives in a verl config: ``register()`` (verl==0.9.1).

    from exchange.libraries.verl.register import register
    register()                      # every catalog objective, as "exchange_<name>"
    # verl config: actor_rollout_ref.actor.policy_loss.loss_mode=exchange_dapo

``register`` puts one function per objective in verl's own policy-loss registry
(``core_algos.register_policy_loss``), so ``core_algos.get_policy_loss_fn`` and verl's
``ppo_loss`` find it. It has verl's policy-loss signature ``(old_log_prob, log_prob,
advantages, response_mask, loss_agg_mode, config, rollout_is_weights) -> (loss,
metrics)``.

What verl hands a policy loss is the advantage (computed by its ``adv_estimator`` over
whole groups before ``balance_batch`` reorders the rows and the micro-batches split
them), not the rewards and group ids an exchange objective starts from. The registered
loss therefore uses verl's advantages **as given** (``Rollout.advantages``): the
objective's own estimator is skipped, so nothing is re-centred or re-scaled, and a
micro-batch may hold partial groups or a single row (:func:`rollout_from_verl`). The
objective supplies the rest: its surrogate, clip and normaliser. Group-level
transformations (a group minimum, a group-mean normaliser) see the micro-batch as one
group, since verl passes no ``uid``.

verl's settings: the actor's ``clip_ratio``/``clip_ratio_low``/``clip_ratio_high``/
``clip_ratio_c`` become the objective's ``eps_low``/``eps_high``/``clip_c`` and
``loss_agg_mode`` its ``loss_agg_mode``, where the objective has those parameters (a
warning names the ones it has not). The objective normalises over the micro-batch; with
``config.global_batch_info`` (dp size, global token and sequence counts) the loss is
multiplied by verl's weight of the micro-batch in the global batch (``agg_loss`` of a
constant loss with and without that info), as verl's own losses are. Metrics:
``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower`` (verl's formulas)
and ``actor/<name>_loss``. ``rollout_is_weights`` is refused.

Ray workers: see :mod:`exchange.libraries.verl.plugin` (a ``verl.plugins`` entry point,
or ``VERL_USE_EXTERNAL_MODULES=exchange.libraries.verl.plugin``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import Tensor

from exchange.libraries.versions import require
from exchange.errors import InvalidArgument
from exchange.core.rollout import Rollout
from exchange.libraries.verl.dump import policy_mask

__all__ = ["PREFIX", "register", "refuse_surgical", "policy_loss", "rollout_from_verl"]

PREFIX = "exchange_"


def rollout_from_verl(old_log_prob: Tensor, advantages: Tensor, response_mask: Tensor) -> Rollout:
    """The micro-batch as a :class:`Rollout` that carries verl's advantages as given
    (``Rollout.advantages``: ``[bs]`` when each response's advantage is one value over its
    tokens, as every outcome estimator gives, else ``[bs, T]``), so no objective re-centres
    or re-scales them. verl passes no group ids (``uid``) to a policy loss: the rows form
    one group, which only group-level transformations read (a group minimum, a group-mean
    normaliser: over the micro-batch). ``rewards`` hold the per-response advantage (token
    mean), for display. Any number of rows works, 1 included; every tensor is made on the
    inputs' device. A multi-turn ``response_mask`` (0 on tool-output tokens inside a
    response) keeps its holes: those tokens get no coefficient, and the objective's
    normalisers count the policy's tokens, as verl's ``agg_loss`` does; a mask that is
    not 0/1 is refused (:func:`~exchange.libraries.verl.dump.policy_mask`)."""
    mask = policy_mask(response_mask)
    lengths = mask.sum(dim=1)
    if bool((lengths == 0).any()):
        raise InvalidArgument("response_mask has an empty response; verl drops those before the loss.")
    adv = advantages.detach()
    fmask = mask.to(adv.dtype)
    per_response = (adv * fmask).sum(dim=1) / lengths.to(adv.dtype)  # [bs]
    spread = torch.where(mask, adv - per_response[:, None], torch.zeros_like(adv)).abs().amax()
    given = per_response if float(spread) == 0.0 else adv * fmask
    n = int(mask.shape[0])
    return Rollout(
        tokens=torch.zeros(mask.shape, dtype=torch.long, device=mask.device),
        mask=mask,
        rewards=per_response,
        group=torch.zeros(n, dtype=torch.long, device=mask.device),
        old_logprobs=old_log_prob.detach(),
        advantages=given,
    )


def _config_value(config, name: str, default=None):
    if config is None:
        return default
    value = getattr(config, name, None)
    if value is None and hasattr(config, "get"):
        value = config.get(name, None)
    return default if value is None else value


def actor_params(config, loss_agg_mode: str, defaults: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The objective's parameters from verl's actor ``config`` and ``loss_agg_mode``, and
    ``"name=value"`` for each setting the objective has no parameter for."""
    params: dict[str, Any] = {}
    unhonoured: list[str] = []
    if config is not None:
        clip = _config_value(config, "clip_ratio", 0.2)
        mapped = {
            "eps_low": ("clip_ratio_low", _config_value(config, "clip_ratio_low", clip)),
            "eps_high": ("clip_ratio_high", _config_value(config, "clip_ratio_high", clip)),
            "clip_c": ("clip_ratio_c", _config_value(config, "clip_ratio_c", None)),
        }
        for name, (verl_name, value) in mapped.items():
            if value is None:
                continue
            if name in defaults and (name != "eps_low" or defaults[name] is not None):
                params[name] = float(value)
            elif name != "clip_c":
                unhonoured.append(f"{verl_name}={value}")
    if "loss_agg_mode" in defaults:
        params["loss_agg_mode"] = loss_agg_mode
    return params, unhonoured


def _global_weight(response_mask: Tensor, loss_agg_mode: str, config) -> Tensor | float:
    """verl's normalisation of this micro-batch in the global batch relative to the
    micro-batch's own: ``agg_loss`` of a constant loss matrix with and without
    ``config.global_batch_info`` (1 without it)."""
    info = _config_value(config, "global_batch_info", None)
    if not info:
        return 1.0
    from verl.trainer.ppo.core_algos import agg_loss

    ones = response_mask.to(torch.float32)
    local = agg_loss(loss_mat=ones, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)
    globl = agg_loss(loss_mat=ones, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **dict(info))
    return (globl / local).detach()


def verl_metrics(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor, config) -> dict:
    """verl's ``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower``, with
    the formulas of ``compute_policy_loss_vanilla`` and the actor's clip settings."""
    clip = float(_config_value(config, "clip_ratio", 0.2))
    low = float(_config_value(config, "clip_ratio_low", clip))
    high = float(_config_value(config, "clip_ratio_high", clip))
    clip_c = float(_config_value(config, "clip_ratio_c", 3.0))
    mask = response_mask.to(log_prob.dtype)
    count = mask.sum().clamp(min=1)
    with torch.no_grad():
        neg_kl = (log_prob - old_log_prob).clamp(-20.0, 20.0)
        ratio = torch.exp(neg_kl)
        losses1 = -advantages * ratio
        losses2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
        clipped = torch.maximum(losses1, losses2)
        losses3 = -advantages * clip_c
        lower = (torch.gt(clipped, losses3) & (advantages < 0)).to(mask.dtype)
        return {
            "actor/pg_clipfrac": float((torch.gt(losses2, losses1).to(mask.dtype) * mask).sum() / count),
            "actor/ppo_kl": float((-neg_kl * mask).sum() / count),
            "actor/pg_clipfrac_lower": float((lower * mask).sum() / count),
        }


def policy_loss(
    loss_fn: Callable[[Tensor, Rollout], Tensor], name: str, objective: str | None = None, **fixed: Any
) -> Callable[..., tuple[Tensor, dict[str, Any]]]:
    """Wrap an objective in verl's policy-loss signature.

    ``objective`` (a catalog name): the objective is re-bound per call with the actor's
    clip settings (``clip_ratio_low``/``clip_ratio_high``/``clip_ratio`` -> ``eps_low``/
    ``eps_high``, ``clip_ratio_c`` -> ``clip_c``) and ``loss_agg_mode`` where it has those
    parameters (``fixed`` register-time parameters win); settings it has no parameter
    for are named in one warning. ``loss_fn`` alone: used as is.
    """
    import warnings

    bound: dict[tuple, Callable] = {}
    warned: set[str] = set()

    def objective_for(loss_agg_mode: str, config) -> Callable:
        if objective is None:
            return loss_fn
        from exchange.objectives import get

        obj = get(objective)
        params, unhonoured = actor_params(config, loss_agg_mode, dict(obj.defaults))
        params.update(fixed)
        if "loss_agg_mode" not in obj.defaults and loss_agg_mode != "token-mean":
            unhonoured.append(f"loss_agg_mode={loss_agg_mode} (the objective aggregates itself; verl's mode "
                              "only sets the micro-batch's global weight)")
        for setting in unhonoured:
            if setting not in warned:
                warned.add(setting)
                warnings.warn(f"verl policy loss {name!r} does not honour {setting}.", UserWarning, stacklevel=3)
        key = tuple(sorted((k, repr(v)) for k, v in params.items()))
        if key not in bound:
            bound[key] = obj.bind(**params)
        return bound[key]

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
        loss = objective_for(loss_agg_mode, config)(log_prob, rollout)
        loss = loss * _global_weight(response_mask, loss_agg_mode, config)
        metrics = verl_metrics(old_log_prob, log_prob, advantages, response_mask, config)
        metrics[f"actor/{name}_loss"] = float(loss.detach())
        return loss, metrics

    verl_policy_loss.__name__ = name
    return verl_policy_loss


def refuse_surgical(objective: str) -> None:
    """Raise :class:`InvalidArgument` for ``"<spec>+surgical"`` (see :func:`register`)."""
    from exchange.objectives import SURGICAL

    if objective.rsplit("+", 1)[-1] == SURGICAL:
        raise InvalidArgument(
            f"objective={objective!r} cannot be registered in verl: the surgical transform needs each response's "
            "tokens and group (uid) to find shared events, and verl 0.9.1 passes a policy loss only log-probs, "
            "advantages and the mask of one micro-batch, whose backward runs before the rest of the step is seen. "
            f"Register {objective.rsplit('+', 1)[0]!r}, or train the surgical arm with TRL (ExchangeGRPOTrainer)."
        )


def register(objectives: Iterable[str] | None = None, prefix: str = PREFIX, **params: Any) -> list[str]:
    """Register catalog objectives (default: all) in verl as ``prefix + name``.

    ``params`` are passed to every objective (e.g. ``eps_high=0.28``). Returns the verl
    names registered. Calling it again replaces the earlier registrations.

    ``<objective>+surgical`` is refused here (:class:`InvalidArgument`), not at its
    first call: the surgical transform finds shared events from the response tokens and
    the group ids, and verl 0.9.1 hands a policy loss neither (only log-probs,
    advantages and the mask of one micro-batch, whose backward runs before the next
    micro-batch is seen), so there is no gather of a whole mini-batch to build it on.
    """
    require("verl")
    from verl.trainer.ppo import core_algos

    from exchange.objectives import names as catalog_names
    from exchange.objectives import resolve

    chosen = list(catalog_names() if objectives is None else objectives)
    for objective in chosen:
        refuse_surgical(objective)
    registered = []
    for objective in chosen:
        verl_name = f"{prefix}{objective}"
        fn = policy_loss(resolve(objective, **params), verl_name, objective=objective, **params)
        core_algos.register_policy_loss(verl_name)(fn)
        registered.append(verl_name)
    return registered
