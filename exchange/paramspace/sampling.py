"""Rollouts built from a model: sample responses, or score given ones.

Every log-prob and entropy comes from the model itself, so a rollout built here is
event-consistent by construction: two occurrences of one event (same prompt, same
prefix, same token) are computed from the same context and get the same values. The
rollout is on-policy (``old_logprobs == logprobs``), in float64.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from exchange.errors import InvalidArgument
from exchange.models import model_logits, sequence_logits
from exchange.core.rollout import Rollout

__all__ = ["RewardFn", "rollout_from_tokens", "sample_rollout"]

RewardFn = Callable[[list[int], list[int]], float]
"""``reward_fn(prompt_ids, response_ids) -> float``."""


def rollout_from_tokens(
    model: nn.Module,
    prompt_tokens: Tensor,
    prompt_mask: Tensor,
    tokens: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group: Tensor,
) -> Rollout:
    """Score given responses with ``model``: fills ``old_logprobs``, ``logprobs``, ``entropy``.

    Shapes: ``prompt_tokens``/``prompt_mask`` ``[N, P]`` (left-padded), ``tokens``/``mask``
    ``[N, T]`` (right-padded), ``rewards``/``group`` ``[N]``. Validation is the Rollout's.
    """
    draft = Rollout(
        tokens=tokens,
        mask=mask,
        rewards=torch.as_tensor(rewards, dtype=torch.float64),
        group=group,
        old_logprobs=torch.zeros(tokens.shape, dtype=torch.float64),
        prompt_tokens=prompt_tokens,
        prompt_mask=prompt_mask,
    )
    with torch.no_grad():
        logits, _ = sequence_logits(model, draft)
        logp = torch.log_softmax(logits.double(), dim=-1)  # [N, T, V]
    lp = logp.gather(-1, draft.tokens.clamp(min=0)[..., None]).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    zero = torch.zeros((), dtype=torch.float64)
    lp = torch.where(draft.mask, lp, zero).clamp(max=0.0)
    ent = torch.where(draft.mask, ent, zero).clamp(min=0.0)
    return draft.replace(old_logprobs=lp, logprobs=lp, entropy=ent)


def sample_rollout(
    model: nn.Module,
    prompts: Sequence[Sequence[int]] | Tensor,
    *,
    G: int = 4,
    min_new_tokens: int = 2,
    max_new_tokens: int = 8,
    response_prefix: Sequence[int] = (),
    rewards: RewardFn | Tensor | None = None,
    temperature: float = 1.0,
    eos_id: int | None = None,
    pad_id: int = 0,
    seed: int = 0,
) -> Rollout:
    """Sample ``G`` responses per prompt from ``model`` and score them.

    Each response starts with the forced tokens ``response_prefix`` (a fixed answer
    template: its events are shared by the whole group), then samples. Without
    ``eos_id``, the number of sampled tokens of each response is drawn uniformly from
    ``[min_new_tokens, max_new_tokens]`` (unequal lengths, as in real groups); with it,
    a response stops after its first ``eos_id`` or at ``max_new_tokens``.

    ``rewards``: a ``reward_fn(prompt_ids, response_ids) -> float``, a ``Tensor[B*G]``, or
    None for seeded binary rewards with both values present in every group (so group
    advantages are non-zero). Response ``j`` of prompt ``b`` is row ``b*G + j``.
    """
    prompt_list = [list(map(int, p)) for p in (prompts.tolist() if isinstance(prompts, Tensor) else prompts)]
    _check_sampling_args(prompt_list, G, min_new_tokens, max_new_tokens, temperature)
    gen = torch.Generator().manual_seed(seed)
    n = len(prompt_list) * G
    width = max(len(p) for p in prompt_list)
    prompt_tokens = torch.full((n, width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, width), dtype=torch.bool)
    for b, p in enumerate(prompt_list):
        rows = slice(b * G, (b + 1) * G)
        prompt_tokens[rows, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        prompt_mask[rows, width - len(p) :] = True
    group = torch.arange(len(prompt_list)).repeat_interleave(G)

    prefix = torch.tensor(list(response_prefix), dtype=torch.long)
    responses = _generate(model, prompt_tokens, prefix, max_new_tokens, temperature, gen)  # [N, K+T']
    k = len(prefix)
    if eos_id is None:
        new = torch.randint(min_new_tokens, max_new_tokens + 1, (n,), generator=gen)
    else:
        is_eos = responses[:, k:] == eos_id
        first = torch.where(is_eos.any(1), is_eos.float().argmax(1) + 1, torch.full((n,), max_new_tokens))
        new = first.clamp(min=min_new_tokens)
    lengths = k + new
    t_max = int(lengths.max())
    mask = torch.arange(t_max)[None] < lengths[:, None]
    tokens = torch.where(mask, responses[:, :t_max], torch.full((), pad_id))

    reward_tensor = _rewards(rewards, prompt_list, tokens, lengths, G, gen)
    return rollout_from_tokens(model, prompt_tokens, prompt_mask, tokens, mask, reward_tensor, group)


def _check_sampling_args(prompts: list[list[int]], G: int, lo: int, hi: int, temperature: float) -> None:
    if not prompts or any(len(p) == 0 for p in prompts):
        raise InvalidArgument(f"prompts={prompts!r}: give at least one prompt, each with >= 1 token.")
    if G < 2:
        raise InvalidArgument(f"G={G} must be >= 2 (group-relative objectives compare responses).")
    if not 1 <= lo <= hi:
        raise InvalidArgument(
            f"min_new_tokens={lo}, max_new_tokens={hi}: need 1 <= min_new_tokens <= max_new_tokens."
        )
    if not temperature > 0:
        raise InvalidArgument(f"temperature={temperature} must be > 0.")


@torch.no_grad()
def _generate(
    model: nn.Module, prompt_tokens: Tensor, prefix: Tensor, steps: int, temperature: float, gen: torch.Generator
) -> Tensor:
    """``[N, len(prefix) + steps]``: the forced prefix, then ``steps`` sampled tokens."""
    n = prompt_tokens.shape[0]
    out = prefix[None].expand(n, -1).clone()
    for _ in range(steps):
        logits = model_logits(model, torch.cat([prompt_tokens, out], dim=1))[:, -1].double()
        probs = torch.softmax(logits / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=gen)
        out = torch.cat([out, nxt], dim=1)
    return out


def _rewards(
    rewards: RewardFn | Tensor | None,
    prompts: list[list[int]],
    tokens: Tensor,
    lengths: Tensor,
    G: int,
    gen: torch.Generator,
) -> Tensor:
    n = tokens.shape[0]
    if rewards is None:
        out = torch.empty(n, dtype=torch.float64)
        for b in range(len(prompts)):
            # a random split with at least one 1 and one 0 in the group
            n_pos = int(torch.randint(1, G, (1,), generator=gen))
            perm = torch.randperm(G, generator=gen)
            out[b * G + perm] = (torch.arange(G) < n_pos).double()
        return out
    if isinstance(rewards, Tensor):
        if tuple(rewards.shape) != (n,):
            raise InvalidArgument(f"rewards shape={list(rewards.shape)} is not [N]=[{n}] (N = prompts * G).")
        return rewards.to(torch.float64)
    if not callable(rewards):
        raise InvalidArgument(f"rewards={type(rewards).__name__}: pass a callable, a Tensor[N] or None.")
    return torch.tensor(
        [float(rewards(prompts[i // G], tokens[i, : int(lengths[i])].tolist())) for i in range(n)],
        dtype=torch.float64,
    )
