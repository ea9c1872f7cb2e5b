"""The factored form that restoring transformations act on.

Most catalog families are one formula::

    loss = - sum_{i,t} mask[i,t] * norm_i * S(rho[i,t], A[i,t])

with four named hooks, each a small pure function of the rollout and the parameters:

- ``advantages(rollout, p) -> A``: ``[N]`` (or ``[N, T]`` for per-token advantages),
  computed from the rewards, never differentiated;
- ``ratio(logprobs, rollout, p) -> rho [N, T]``: the differentiable ratio: the token
  ratio ``exp(l - l_old)``, GSPO's sequence ratio ``s_i`` broadcast over the response,
  or the unit ratio ``exp(l - sg l)`` of IS-free REINFORCE;
- ``surrogate(rho, A, rollout, p) -> S [N, T]``: every clip rule or gate lives here;
- ``norm(logprobs, rollout, p) -> norm [N]``: the per-response normaliser
  (``1/(B L_i)``, ``1/n_tokens``, ...).

Two optional hooks say how the family's coefficient factors into
``kappa[i,t] = A_i * w_i * f(i,t)``:

- ``response_ratio(logprobs, rollout, p) -> s [N]``: the per-response ratio factor of
  sequence-level families (GSPO). The per-response weight is then ``w_i = norm_i * s_i``
  and the per-token factor comes from the unit ratio; without it ``w_i = norm_i``.
- ``sign_free(rho, A, rollout, p) -> S``: the same surrogate with every clip decision or
  gate made a function of the ratio alone (``sign_free_clip``, T5).

``gate(logprobs, rollout, p) -> [N, T]``, optional: a detached 0/1 factor on every
token's surrogate, a function of that token's own ratio only (``token_trust_region``).

Every factored family also takes TRL's per-token factors as parameters (off by default;
:func:`token_factors`): ``top_entropy_quantile`` (the high-entropy mask),
``off_policy_mask`` (the off-policy sequence mask's threshold; ``off_policy_mask_sampler``:
against the sampler's log-probs) and ``sampler_is`` / ``sampler_is_min`` /
``sampler_is_max`` (the vLLM importance-sampling weight), each a detached factor on the
token's surrogate that leaves the normaliser as it is, as TRL applies them.

``clip_level`` records where the family's clip acts (``"token"``, ``"sequence"`` or
``"none"``): Min-Replace and Adv-Orthogonal replace the whole per-response weight, so a
sequence-level clip (part of that weight) goes with it, while a token-level clip stays.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from torch import Tensor

from exchange.errors import RolloutError
from exchange.objectives._common import (
    aggregation_weight, off_policy_keep, per_token, policy_ratio, ppo_clip, sampler_is_weight,
    sign_free_trust_region, top_entropy_mask, unit_ratio,
)
from exchange.core.rollout import Rollout
from exchange.objectives.objective import Objective

Params = Mapping[str, Any]
CLIP_LEVELS = ("token", "sequence", "none")


def token_ratio(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: the token ratio ``exp(l - l_old)``, ``[N, T]``."""
    return policy_ratio(logprobs, rollout)


def reinforce_ratio(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: the unit ratio ``exp(l - sg l)`` (REINFORCE on the log-prob, no IS)."""
    return unit_ratio(logprobs)


def logprob_ratio(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: the log-prob itself, so ``linear_surrogate`` gives REINFORCE's ``A l``.

    Gradient 1 like :func:`reinforce_ratio`, but the loss value is the true REINFORCE
    value (finite differences of the loss agree with its gradient).
    """
    return logprobs


def linear_surrogate(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: ``S = rho A`` (no clip; gradient ``A d rho/dl`` for any sign)."""
    return rho * adv


@dataclass(frozen=True)
class Factors:
    """The hooks of one factored family (see the module docstring)."""

    advantages: Callable[[Rollout, Params], Tensor]
    surrogate: Callable[[Tensor, Tensor, Rollout, Params], Tensor]
    norm: Callable[[Tensor, Rollout, Params], Tensor]
    ratio: Callable[[Tensor, Rollout, Params], Tensor] = token_ratio
    response_ratio: Callable[[Tensor, Rollout, Params], Tensor] | None = None
    sign_free: Callable[[Tensor, Tensor, Rollout, Params], Tensor] | None = None
    clip_level: str = "token"
    gate: Callable[[Tensor, Rollout, Params], Tensor] | None = None

    def __post_init__(self) -> None:
        if self.clip_level not in CLIP_LEVELS:
            raise ValueError(f"clip_level={self.clip_level!r} is not one of {CLIP_LEVELS}")

    def replace(self, **changes: Any) -> "Factors":
        return dataclasses.replace(self, **changes)

    def response_weight(self, logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
        """``w_i = norm_i * s_i`` (``s_i = 1`` without a response ratio), ``[N]``, detached.

        The clip is not part of ``w``: the Min-Replace paper's estimator is clip-free in
        the per-response weight (arXiv 2604.13088, section "DFPO").
        """
        w = self.norm(logprobs, rollout, p)
        if self.response_ratio is not None:
            w = w * self.response_ratio(logprobs, rollout, p)
        return w.detach()

    def token_part_ratio(self) -> Callable[[Tensor, Rollout, Params], Tensor]:
        """The ratio left per token once the per-response weight is factored out."""
        return reinforce_ratio if self.response_ratio is not None else self.ratio


# TRL's per-token factors, off: every factored family's defaults (factored_objective)
TOKEN_FACTOR_DEFAULTS: dict[str, Any] = {
    "top_entropy_quantile": 1.0, "off_policy_mask": None, "off_policy_mask_sampler": False, "sampler_is": "none",
    "sampler_is_min": None, "sampler_is_max": 3.0,
}


def token_factors(logprobs: Tensor, rollout: Rollout, adv: Tensor, p: Params) -> Tensor | None:
    """The product of TRL's detached per-token factors that ``p`` turns on (``None``: none
    is on), ``[N, T]`` or ``[N, 1]``, on the loss mask of ``rollout`` (truncated rows
    already dropped, as TRL's ``completion_mask``):

    - ``top_entropy_quantile < 1``: :func:`~exchange.objectives._common.top_entropy_mask`
      of ``rollout.entropy`` (TRL computes it per micro-batch: the rollout the loss sees);
    - ``off_policy_mask`` (a threshold): :func:`~exchange.objectives._common.off_policy_keep`
      against ``old_logprobs`` (TRL without vLLM), or, with ``off_policy_mask_sampler``,
      against ``rollout.sampling_logprobs`` (TRL with vLLM: the sampler's log-probs);
    - ``sampler_is`` (a mode of TRL's ``vllm_importance_sampling_mode``):
      :func:`~exchange.objectives._common.sampler_is_weight` of ``old_logprobs`` against
      ``rollout.sampling_logprobs`` with ``sampler_is_min`` / ``sampler_is_max``.
    """
    out = None
    quantile = p.get("top_entropy_quantile", 1.0)
    if quantile < 1.0:
        if rollout.entropy is None:
            raise RolloutError(f"rollout.entropy=None but top_entropy_quantile={quantile!r} masks tokens by entropy: "
                               "build the rollout with entropy [N, T], or set top_entropy_quantile=1.0.")
        out = top_entropy_mask(rollout.entropy, rollout.mask, quantile).to(logprobs.dtype)
    if p.get("off_policy_mask") is not None:
        sampling = _sampling(rollout, "off_policy_mask_sampler=True") if p.get("off_policy_mask_sampler") else (
            rollout.old_logprobs)
        keep = off_policy_keep(adv, logprobs, sampling.to(logprobs.dtype), rollout.mask, p["off_policy_mask"])
        out = keep if out is None else out * keep
    mode = p.get("sampler_is", "none")
    if mode != "none":
        sampling = _sampling(rollout, f"sampler_is={mode!r}")
        weight = sampler_is_weight(rollout.old_logprobs.to(logprobs.dtype), sampling.to(logprobs.dtype), rollout.mask,
                                   mode, p.get("sampler_is_min"), p.get("sampler_is_max"))
        out = weight if out is None else out * weight
    return out


def _sampling(rollout: Rollout, setting: str) -> Tensor:
    if rollout.sampling_logprobs is None:
        raise RolloutError(f"rollout.sampling_logprobs=None but {setting} reads the sampler's log-probs: pass the "
                           "sampler's (vLLM's) log-probs as sampling_logprobs [N, T], or turn the setting off.")
    return rollout.sampling_logprobs


def factored_loss(factors: Factors, logprobs: Tensor, rollout: Rollout, **p: Any) -> Tensor:
    """``-sum mask * norm_i * S(rho, A)``: the loss of a factored family, a scalar.

    ``mask_truncated=True`` (TRL's ``mask_truncated_completions``): the advantages are
    computed over every response, then the truncated ones (``rollout.truncated``) leave
    the loss mask, and the normaliser counts the tokens kept (:meth:`Rollout.dropping`).
    TRL's per-token factors (:func:`token_factors`) then multiply each token's surrogate.
    """
    adv = factors.advantages(rollout, p).detach()  # [N] or [N, T], centred over all responses
    if p.get("mask_truncated") and rollout.truncated is not None:
        rollout = rollout.dropping(rollout.truncated, advantages=adv)
    factor = token_factors(logprobs, rollout, adv, p)
    adv = per_token(adv, rollout)  # [N, T]
    rho = factors.ratio(logprobs, rollout, p)  # [N, T]
    surrogate = factors.surrogate(rho, adv, rollout, p)  # [N, T]
    norm = factors.norm(logprobs, rollout, p)  # [N]
    mask = rollout.fmask.to(surrogate.dtype)
    if factors.gate is not None:
        mask = mask * factors.gate(logprobs, rollout, p).detach().to(surrogate.dtype)
    if factor is not None:
        mask = mask * factor.to(surrogate.dtype)
    return -(mask * norm[:, None] * surrogate).sum()


def factored_objective(name: str, factors: Factors, **fields: Any):
    """An :class:`~exchange.objectives.Objective` whose loss is ``factored_loss(factors, ...)``."""
    import functools

    # every factored family can mask truncated responses after centring and take TRL's
    # per-token factors (factored_loss)
    fields["defaults"] = {**fields.get("defaults", {}), "mask_truncated": False, **TOKEN_FACTOR_DEFAULTS}
    return Objective(name=name, loss=functools.partial(factored_loss, factors), factors=factors, **fields)


# ------------------------------------------------------------ shared hooks
def agg_norm(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: the aggregation weight of ``p["loss_agg_mode"]`` (``max_length`` if given)."""
    return aggregation_weight(rollout, p["loss_agg_mode"], p.get("max_length"))


def fixed_norm(mode: str) -> Callable[[Tensor, Rollout, Params], Tensor]:
    """Hook factory: the aggregation weight of one fixed mode (``max_length`` if given)."""
    def norm(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
        return aggregation_weight(rollout, mode, p.get("max_length"))

    norm.__name__ = f"norm[{mode}]"
    return norm


def ppo_surrogate(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: PPO-clip with ``p["eps_low"]``, ``p["eps_high"]`` (sign-dependent, M2), and
    TRL's two-sided ``delta`` where the family has it."""
    return ppo_clip(rho, adv, p["eps_low"], p["eps_high"], p.get("delta"))


def ppo_sign_free(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: keep the gradient iff ``1-eps_low <= rho <= 1+eps_high`` (and ``<= delta``
    when set), for both signs of A."""
    high = 1 + p["eps_high"] if p.get("delta") is None else min(1 + p["eps_high"], p["delta"])
    return sign_free_trust_region(rho, adv, 1 - p["eps_low"], high)
