"""Sampling groups of responses from a causal LM and packing them into a ``Rollout``.

The model is any ``nn.Module`` with ``forward(ids: LongTensor[B, S]) -> logits [B, S, V]``
(``exchange.models.TinyLM``, or a Hugging Face model wrapped by
``exchange.lab.llm.LogitsOnly``). Generation recomputes the full prefix each step (no
KV cache): the harness's sequences are a few tokens long.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from exchange.lab.tasks import EOS, PAD, STYLE, Task, verify
from exchange.models import response_logprobs
from exchange.core.rollout import Rollout

__all__ = ["generate", "sample_group_rollout", "greedy_accuracy"]


@torch.no_grad()
def generate(model: nn.Module, prompts: Tensor, max_len: int, temperature: float, gen: torch.Generator | None,
             first: int | None = None):
    """Autoregressive sampling: ``(tokens [B, T], mask [B, T], entropy [B, T])``.

    ``temperature=0`` decodes greedily (``gen`` unused). A row stops after its EOS;
    rows that never emit EOS stop at ``max_len`` (truncated). ``first``: a token the
    environment writes at the first position whatever the policy
    (:attr:`exchange.lab.tasks.Task.forced_style`).
    """
    b = prompts.shape[0]
    ids = prompts
    alive = torch.ones(b, dtype=torch.bool)
    toks, masks, ents = [], [], []
    for _ in range(max_len):
        logits = model(ids)[:, -1].double()  # [B, V]
        logp = torch.log_softmax(logits, dim=-1)
        ents.append(-(logp.exp() * logp).sum(-1))  # entropy of the sampling distribution
        if temperature == 0:
            nxt = logits.argmax(-1)
        else:
            nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=gen).squeeze(-1)
        if first is not None and not toks:
            nxt = torch.full_like(nxt, first)
        nxt = torch.where(alive, nxt, torch.full_like(nxt, PAD))
        toks.append(nxt)
        masks.append(alive.clone())
        alive = alive & (nxt != EOS)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        if not alive.any():
            break
    return torch.stack(toks, 1), torch.stack(masks, 1), torch.stack(ents, 1)


def sample_group_rollout(
    model: nn.Module,
    task: Task,
    prompts: Tensor,
    group_size: int,
    max_len: int,
    temperature: float,
    gen: torch.Generator,
) -> Rollout:
    """Sample ``group_size`` responses for each prompt of ``prompts: [B, P]``.

    Returns a float64 ``Rollout`` with ``N = B * group_size`` rows (group ``b`` = prompt
    ``b``), exact rewards from :func:`exchange.lab.tasks.verify`, sampling-time entropies,
    and ``old_logprobs`` recomputed by :func:`exchange.models.response_logprobs`, the
    function the training forward uses (first-epoch ratios are 1 up to float32 round-off).
    """
    rep = prompts.repeat_interleave(group_size, dim=0)  # [N, P]
    tokens, mask, entropy = generate(model, rep, max_len, temperature, gen, _first(task))
    rewards = verify(task, rep, tokens, mask)
    group = torch.arange(prompts.shape[0]).repeat_interleave(group_size)
    zeros = torch.zeros(tokens.shape, dtype=torch.float64)
    rollout = Rollout(
        tokens=tokens,
        mask=mask,
        rewards=rewards,
        group=group,
        old_logprobs=zeros,
        entropy=torch.where(mask, entropy, zeros),
        truncated=~(tokens == EOS).any(dim=1),
        prompt_tokens=rep,
        prompt_mask=torch.ones(rep.shape, dtype=torch.bool),
    )
    with torch.no_grad():
        old = response_logprobs(model, rollout).double()
    return rollout.replace(old_logprobs=old, logprobs=old)


def _first(task: Task) -> int | None:
    return STYLE if task.forced_style else None


@torch.no_grad()
def greedy_accuracy(model: nn.Module, task: Task, prompts: Tensor, max_len: int) -> float:
    """Fraction of ``prompts: [B, P]`` answered correctly by greedy decoding."""
    tokens, mask, _ = generate(model, prompts, max_len, 0.0, None, _first(task))
    return float(verify(task, prompts, tokens, mask).mean())
