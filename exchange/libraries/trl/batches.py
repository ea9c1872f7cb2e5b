"""TRL's generation batches as exchange data (trl==1.16.0): the keys the TRL callback and
``ExchangeGRPOTrainer`` add to TRL's generation output (each row's reward, group and row
index, its real length and whether TRL truncated it), and a micro-batch or generation
batch as a :class:`~exchange.core.rollout.Rollout`. Re-exported by
:mod:`exchange.libraries.trl.callback`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.libraries.trl.contact import pad_token_id

__all__ = ["add_batch_keys", "rollout_of", "weighted_rewards"]


def weighted_rewards(trainer, per_func: Tensor) -> Tensor:
    """``[B]``: each row's reward as TRL's "sum_then_normalize" sums it (``per_func [B, n_funcs]``)."""
    weights = trainer.reward_weights.to(per_func.device)
    return (per_func * weights[None, :]).nansum(dim=1)  # TRL's "sum_then_normalize" reward


def add_batch_keys(trainer, output: dict, per_func: Tensor, completion_ids: list | None = None) -> dict:
    """Add ``exchange_rewards``/``exchange_group``/``exchange_row`` to TRL's generation
    output (this process's slice, TRL's own ``process_slice``), and, from the unpadded
    ``completion_ids`` TRL scored, ``exchange_lengths`` (real tokens per row) and
    ``exchange_truncated`` (TRL's own test: the last id is neither EOS nor pad).
    ``mask_truncated_completions`` zeroes a truncated row's ``completion_mask``; these
    keys keep the row as data (its tokens, its place in its group)."""
    n = output["completion_ids"].shape[0]
    start = trainer.accelerator.process_index * n
    rewards = weighted_rewards(trainer, per_func)[start : start + n]
    mode = "train" if trainer.model.training else "eval"
    g = trainer.num_generations if mode == "train" else trainer.num_generations_eval
    rows = torch.arange(start, start + n, device=rewards.device)
    output["exchange_rewards"] = rewards
    output["exchange_group"] = rows // g  # TRL lays groups out as consecutive rows
    output["exchange_row"] = rows - start
    if completion_ids is not None and len(completion_ids) == n:
        device = output["completion_ids"].device
        eos_and_pad = {*trainer.eos_token_ids, pad_token_id(trainer)}  # as TRL tests it
        output["exchange_lengths"] = torch.tensor([len(ids) for ids in completion_ids], device=device)
        output["exchange_truncated"] = torch.tensor([bool(ids) and ids[-1] not in eos_and_pad for ids in completion_ids],
                                                    dtype=torch.bool, device=device)
    return output


def rollout_of(inputs: dict, dtype=torch.float32, logprobs: Tensor | None = None,
               entropy: Tensor | None = None) -> Rollout:
    """The micro-batch (or generation batch) ``inputs`` as a :class:`Rollout`; the old
    log-probs are TRL's, or ``logprobs`` (detached) where TRL takes the on-policy
    shortcut, or zeros (a ratio of 1) for the events-only use. A row TRL truncated keeps
    its tokens (``exchange_lengths``) and carries ``Rollout.truncated``, even where
    ``mask_truncated_completions`` zeroed its ``completion_mask``. The advantages
    ``ExchangeGRPOTrainer`` computed over the generation batch (``exchange_advantages``)
    become ``Rollout.advantages``; ``entropy`` (TRL's token entropies of the loss's forward
    pass) becomes ``Rollout.entropy``, detached, and vLLM's ``sampling_per_token_logps``
    ``Rollout.sampling_logprobs``."""
    mask = inputs["completion_mask"]
    lengths = inputs.get("exchange_lengths")
    if lengths is not None:
        mask = torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths.to(mask.device)[:, None]
    if inputs.get("tool_mask") is not None:
        mask = mask * inputs["tool_mask"]
    old = inputs.get("old_per_token_logps")
    sampling = inputs.get("sampling_per_token_logps")
    return Rollout(
        tokens=inputs["completion_ids"],
        mask=mask.bool(),
        rewards=inputs["exchange_rewards"].to(dtype),
        group=inputs["exchange_group"],
        old_logprobs=old.to(dtype) if old is not None else (
            logprobs.detach().to(dtype) if logprobs is not None else torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        ),
        ref_logprobs=inputs.get("ref_per_token_logps"),
        truncated=inputs.get("exchange_truncated"),
        advantages=None if inputs.get("exchange_advantages") is None else inputs["exchange_advantages"].to(dtype),
        prompt_tokens=inputs.get("prompt_ids"),
        prompt_mask=None if inputs.get("prompt_mask") is None else inputs["prompt_mask"].bool(),
        entropy=None if entropy is None else entropy.detach().to(dtype),
        sampling_logprobs=None if sampling is None else sampling.to(dtype),
    )
