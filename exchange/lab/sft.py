"""Supervised warm start: the policy learns the response grammar before RL.

Cross-entropy on generated reference solutions (template, a random number of filler
tokens, the correct answer, EOS). A short warm start leaves the answer accuracy
moderate, the regime RL fine-tuning of an instruct model starts in: the format is
reliable, the decisions are not.
"""

from __future__ import annotations

import torch
from torch import nn

from exchange.core.rollout import Rollout
from exchange.lab.tasks import PAD, Task, link_lifted
from exchange.models import sequence_logits

__all__ = ["sft_warm_start"]


def _as_rollout(prompts: torch.Tensor, responses: torch.Tensor) -> Rollout:
    """A reward-free rollout that carries prompts + responses for ``sequence_logits``."""
    n = responses.shape[0]
    mask = responses != PAD
    zeros = torch.zeros(responses.shape, dtype=torch.float64)
    return Rollout(
        tokens=responses, mask=mask, rewards=torch.zeros(n, dtype=torch.float64),
        group=torch.arange(n) // 2 if n % 2 == 0 else torch.zeros(n, dtype=torch.long),
        old_logprobs=zeros, prompt_tokens=prompts, prompt_mask=torch.ones(prompts.shape, dtype=torch.bool),
    )


def sft_warm_start(model: nn.Module, task: Task, steps: int, batch: int, lr: float, gen: torch.Generator) -> float:
    """Train ``model`` in place for ``steps`` Adam steps; returns the last loss.

    Each step draws ``batch`` fresh prompts and reference solutions with ``gen``.
    """
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss = torch.zeros(())
    with link_lifted(model):  # the reference data keep their filler (Task.long_wrong)
        for _ in range(steps):
            loss = _sft_step(model, task, batch, gen, opt)
    return float(loss.detach())


def _sft_step(model: nn.Module, task: Task, batch: int, gen: torch.Generator, opt) -> torch.Tensor:
    prompts = task.sample_prompts(batch, gen)
    ro = _as_rollout(prompts, task.reference(prompts, gen))
    logits, _ = sequence_logits(model, ro)  # [B, T, V]
    loss = nn.functional.cross_entropy(logits[ro.mask], ro.tokens[ro.mask])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss
