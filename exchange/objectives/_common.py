"""Shared pieces of the catalog: advantages, ratios, clipping, normalisers.

Each helper is one formula from ../shared/reference/objectives.md (or rl-libraries.md),
with the shapes in its docstring. Objectives combine them; nothing here knows about the
checker. Everything is written for a whole batch of groups and stays vmap-friendly
(no ``.item()``, no data-dependent Python branches) unless its docstring says otherwise.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

import torch
from torch import Tensor

from exchange.errors import InvalidArgument
from exchange.core.rollout import Rollout

SAMPLER_IS_MODES = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum")
SCALES = ("group", "batch", "none")


# ------------------------------------------------------------------ advantages
def group_advantages(rollout: Rollout, scale: str = "group", eps: float = 1e-4) -> Tensor:
    """GRPO outcome advantage ``A_i = (R_i - mean_g R) / (std_g R + eps)``, ``[N]``.

    ``scale="none"`` drops the std (Dr. GRPO); ``scale="batch"`` divides by the std of
    every reward in the batch (TRL's ``scale_rewards="batch"``; groups of any sizes). The std is Bessel-corrected, as in TRL.
    ``rollout.advantages``, when given, is returned as is (every estimator here does so).
    """
    if scale not in SCALES:
        raise InvalidArgument(f"scale={scale!r} is not one of {SCALES}.")
    if rollout.advantages is not None:
        return rollout.advantages
    centred = rollout.rewards - rollout.group_mean(rollout.rewards)
    if scale == "none":
        return centred
    if scale == "batch":  # TRL scale_rewards="batch": one std over the whole batch
        return centred / (rollout.rewards.std() + eps)
    return centred / (rollout.group_std(rollout.rewards) + eps)


def rloo_advantages(rollout: Rollout) -> Tensor:
    """Leave-one-out baseline ``A_i = R_i - mean_{j != i} R_j = G/(G-1) (R_i - mean R)``."""
    if rollout.advantages is not None:
        return rollout.advantages
    g = rollout.group_sizes.to(rollout.rewards.dtype)
    return g / (g - 1) * (rollout.rewards - rollout.group_mean(rollout.rewards))


def batch_whiten(values: Tensor, rollout: Rollout, eps: float = 1e-8) -> Tensor:
    """verl ``masked_whiten`` of a per-response value over every real token: ``[N]``.

    Mean and unbiased variance are token-weighted: response i counts L_i times.
    """
    w = rollout.lengths.to(values.dtype)  # [N]
    n_tok = w.sum()
    mean = (w * values).sum() / n_tok
    var = (w * (values - mean) ** 2).sum() / (n_tok - 1)
    return (values - mean) * torch.rsqrt(var + eps)


def per_token(adv: Tensor, rollout: Rollout) -> Tensor:
    """Broadcast a per-response advantage ``[N]`` to ``[N, T]`` (``[N, T]`` passes through)."""
    if adv.dim() == 1:
        return adv[:, None].expand(rollout.tokens.shape)
    return adv


# ---------------------------------------------------------------------- ratios
def policy_ratio(logprobs: Tensor, rollout: Rollout) -> Tensor:
    """Token importance ratio ``r[i,t] = exp(l - l_old)``, ``[N, T]``."""
    return torch.exp(logprobs - rollout.old_logprobs)


def unit_ratio(logprobs: Tensor) -> Tensor:
    """``exp(l - sg(l))``, ``[N, T]``: value 1, gradient ``d/dl = 1``.

    A REINFORCE term ``A * l`` and ``A * unit_ratio(l)`` have the same gradient; writing
    both with a ratio lets one surrogate serve the IS-free families.
    """
    return torch.exp(logprobs - logprobs.detach())


def sequence_log_ratio(logprobs: Tensor, rollout: Rollout) -> Tensor:
    """GSPO's ``log s_i = 1/L_i sum_t (l - l_old)``, ``[N]`` (gradient flows through the mean)."""
    m = rollout.fmask.to(logprobs.dtype)
    # clamp: a row the loss masks out (mask_truncated) has no token; TRL clamps alike
    return ((logprobs - rollout.old_logprobs) * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


# -------------------------------------------------------------------- clipping
def ppo_clip(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float, delta: float | None = None) -> Tensor:
    """PPO surrogate ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)``, ``[N, T]``.

    ``adv`` broadcasts against ``ratio`` (``[N, 1]`` or ``[N, T]``). The gradient vanishes
    when ``A > 0, r > 1+eps_high`` or ``A < 0, r < 1-eps_low``: sign-dependent (M2, T4).

    ``delta`` (TRL's two-sided clipping, ``GRPOConfig.delta``): the unclipped term's
    ratio is capped first, ``min(min(r, delta) A, clip(r) A)``. The gradient then also
    vanishes for ``A > 0, r > delta`` and for ``A < 0, r > max(delta, 1+eps_high)``
    (with ``delta > 1 + eps_high``, as TRL recommends: verl's dual clip for ``A < 0``).
    """
    # The value of min(r A, clip(r) A), with the clip decided on the ratio itself, as
    # T4 states it: torch.minimum would decide on the two products, which round to the
    # same float one ulp outside a bound and then split the gradient in half.
    if delta is None:
        clipped = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
        bound = torch.clamp(ratio, 1 - eps_low, 1 + eps_high).detach()
        return torch.where(clipped, bound * adv, ratio * adv)
    # A > 0: A min(r, delta, 1+eps_high) once r >= 1-eps_low; A < 0: A max(min(r, delta), clip(r))
    high_pos, high_neg = min(1 + eps_high, delta), max(1 + eps_high, delta)
    clipped = ((adv > 0) & (ratio > high_pos)) | ((adv < 0) & ((ratio < 1 - eps_low) | (ratio > high_neg)))
    bound = torch.where(adv > 0, torch.clamp(ratio, max=high_pos), torch.clamp(ratio, 1 - eps_low, high_neg)).detach()
    return torch.where(clipped, bound * adv, ratio * adv)


def ppo_dual_clip(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float, clip_c: float) -> Tensor:
    """verl ``vanilla``: PPO-clip, and for ``A < 0`` the surrogate is floored at ``c A``.

    The gradient is ``A r`` except (A>0, r>1+eps_high), (A<0, r<1-eps_low) and
    (A<0, r>c), where it is 0: every rule depends on the sign of A (M2).
    """
    clipped = ppo_clip(ratio, adv, eps_low, eps_high)
    # max(clipped, c A) for A < 0 when c >= 1 + eps_high (verl requires c > 1), decided
    # on the ratio as T4_dual_above_c states it (the coefficient is 0 only for r > c):
    # torch.maximum would split the gradient in half where the products tie.
    floor = (clip_c * adv).expand_as(clipped)
    return torch.where((adv < 0) & (ratio > clip_c), floor, clipped)


def sign_free_trust_region(ratio: Tensor, adv: Tensor, low: Tensor | float, high: Tensor | float) -> Tensor:
    """``A r`` with the gradient kept iff ``low <= r <= high``, for either sign of A.

    The clip decision depends on the ratio alone (T5): every occurrence of an event has
    the same ratio, so all its copies are kept or all are dropped, whatever the rewards.
    """
    inside = (ratio >= low) & (ratio <= high)
    return torch.where(inside, ratio * adv, ratio.detach() * adv)


# ------------------------------------------------------------ token gates (TRL)
# Per-token factors TRL's GRPOTrainer multiplies each token's loss by (trl==1.16.0
# _compute_loss): the high-entropy mask, the off-policy sequence mask and the vLLM
# importance-sampling weight. Each is detached; the normaliser is unchanged (TRL
# aggregates with the loss mask, not with these factors).

_TOKEN_POOL: ContextVar[Callable[[Tensor], Tensor] | None] = ContextVar("exchange_token_pool", default=None)


@contextmanager
def token_pool(gather: Callable[[Tensor], Tensor]) -> Iterator[None]:
    """Within the block, :func:`top_entropy_mask` takes its quantile over
    ``gather(local values)`` instead of the local values: TRL gathers the entropies of
    every process's micro-batch (``ExchangeGRPOTrainer`` passes accelerate's gather)."""
    token = _TOKEN_POOL.set(gather)
    try:
        yield
    finally:
        _TOKEN_POOL.reset(token)


def top_entropy_mask(entropy: Tensor, mask: Tensor, quantile: float) -> Tensor:
    """TRL's ``get_high_entropy_mask`` for ``top_entropy_quantile=quantile``: ``[N, T]``
    bool, True on real tokens whose entropy is at least the ``1 - quantile`` quantile of
    the real tokens' entropies (in float32, as TRL takes it; over every process inside
    :func:`token_pool`). No real token: all False."""
    values = entropy[mask].float()
    gather = _TOKEN_POOL.get()
    if gather is not None:
        values = gather(values)
    if values.numel() == 0:
        return torch.zeros_like(mask)
    threshold = torch.quantile(values, 1 - quantile)
    return (entropy * mask.float() >= threshold) & mask  # TRL's promotion: bf16 entropies compare in float32


def off_policy_keep(adv: Tensor, logprobs: Tensor, sampling: Tensor, mask: Tensor, threshold: float) -> Tensor:
    """TRL's off-policy sequence mask (``off_policy_mask_threshold``, DeepSeek-V3.2):
    ``[N, 1]`` (``[N, T]`` for per-token advantages) 1.0 where ``A >= 0`` or the
    response's mean ``sampling - sg(l)`` over its real tokens is at most ``threshold``,
    else 0.0. A token the sampler could not score (NaN) counts 0, as in TRL."""
    kl = torch.nan_to_num(sampling - logprobs.detach(), nan=0.0)
    m = mask.to(kl.dtype)
    mean_kl = (kl * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0)
    adv = adv[:, None] if adv.dim() == 1 else adv
    return ((adv >= 0) | (mean_kl <= threshold)).to(logprobs.dtype)


def sampler_is_weight(old: Tensor, sampling: Tensor, mask: Tensor, mode: str,
                      low: float | None, high: float | None) -> Tensor:
    """TRL's vLLM importance-sampling weight (``vllm_importance_sampling_mode``): the
    ratio ``pi_old / pi_sampler`` per token (``token_*``, ``[N, T]``) or per response
    (``sequence_*``: the product over its real tokens, ``[N, 1]``), clamped to
    ``[low, high]`` (``*_truncate``) or set to 0 outside it (``*_mask``). A token the
    sampler could not score (NaN) has ratio 1, as in TRL. Detached."""
    if mode not in SAMPLER_IS_MODES[1:]:
        raise InvalidArgument(f"sampler_is={mode!r} is not one of {', '.join(SAMPLER_IS_MODES)}.")
    if mode.endswith("truncate") and low is None and high is None:
        raise InvalidArgument(f"sampler_is={mode!r} clamps the weight: set sampler_is_min or sampler_is_max.")
    diff = torch.nan_to_num((old - sampling) * mask.to(old.dtype), nan=0.0).detach()
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=low, max=high)
    lo = -float("inf") if low is None else low
    hi = float("inf") if high is None else high
    return ratio.masked_fill((ratio < lo) | (ratio > hi), 0.0)


# ----------------------------------------------------------------- normalisers
def aggregation_weight(rollout: Rollout, mode: str, max_length: float | None = None) -> Tensor:
    """Per-response weight ``[N]`` of each real token under verl's ``agg_loss`` modes.

    ``loss = -sum_{i,t} mask * weight_i * surrogate[i, t]``; with ``B`` responses:

    - ``token-mean``: ``1 / n_tokens`` (DAPO; one constant for the batch);
    - ``seq-mean-token-mean``: ``1 / (B L_i)`` (GRPO; breaks (E): M3, T3);
    - ``seq-mean-token-sum``: ``1 / B``;
    - ``seq-mean-token-sum-norm``: ``1 / (B * max_length)`` (Dr. GRPO; default
      ``max_length`` = padded width ``T``);
    - ``token-sum``: ``1``.

    Counts are clamped at 1, as TRL and verl clamp them: they only matter for a rollout
    whose loss mask drops whole rows (``mask_truncated``), where a dropped row's weight
    multiplies no token.
    """
    dtype = rollout.old_logprobs.dtype
    lengths = rollout.lengths.to(dtype).clamp(min=1.0)
    n = float(rollout.n)
    if mode == "token-mean":
        return torch.ones_like(lengths) / rollout.lengths.to(dtype).sum().clamp(min=1.0)
    if mode == "seq-mean-token-mean":
        return 1.0 / (n * lengths)
    if mode == "seq-mean-token-sum":
        return torch.full_like(lengths, 1.0 / n)
    if mode == "seq-mean-token-sum-norm":
        norm = float(rollout.tokens.shape[1]) if max_length is None else float(max_length)
        return torch.full_like(lengths, 1.0 / (n * norm))
    if mode == "token-sum":
        return torch.ones_like(lengths)
    raise InvalidArgument(f"loss_agg_mode={mode!r} is not one of {AGG_MODES}.")


def aggregate(per_token: Tensor, rollout: Rollout, mode: str, max_length: float | None = None) -> Tensor:
    """Reduce ``per_token: [N, T]`` to a scalar as verl's ``agg_loss`` does (see
    :func:`aggregation_weight`)."""
    weight = aggregation_weight(rollout, mode, max_length).to(per_token.dtype)  # [N]
    return (per_token * rollout.fmask.to(per_token.dtype) * weight[:, None]).sum()


# ---------------------------------------------------------------- regularisers
def k3_kl(logprobs: Tensor, rollout: Rollout, who: str) -> Tensor:
    """Schulman's k3 estimator ``exp(ref - l) - (ref - l) - 1 >= 0``, ``[N, T]``.

    Raises :class:`InvalidArgument` when ``rollout.ref_logprobs`` is missing.
    """
    if rollout.ref_logprobs is None:
        raise InvalidArgument(
            f"objective {who!r}: beta>0 adds a k3 KL term, which needs rollout.ref_logprobs=None "
            "to be set. Pass ref_logprobs [N, T] from the reference model, or set beta=0."
        )
    delta = rollout.ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1
