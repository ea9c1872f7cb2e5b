"""Dump a verl batch for ``exchange inspect`` (no verl import needed).

Inside a verl trainer, after the old log-probs and rewards are computed (for example at
the end of ``RayPPOTrainer.fit``'s per-step block, next to ``compute_advantage``)::

    from exchange.libraries.verl.dump import dump_batch
    dump_batch(batch, f"batches/step-{self.global_steps}.pt")

then ``exchange inspect batches/step-10.pt verl:grpo``. The batch is read from verl's
``DataProto`` keys: ``responses`` and ``response_mask`` (else the response part of
``attention_mask``), ``token_level_rewards`` (else ``token_level_scores``) summed over
each response's real tokens, ``old_log_probs``, optionally ``ref_log_prob`` and ``entropys``, and the group
of each response from ``non_tensor_batch["uid"]``. Two more are kept when the batch has
them (dump after ``compute_advantage`` to have both):

- ``advantages`` (verl's, ``[bs, T]``): as ``Rollout.advantages``, one value per response
  (``[N]``) when it is constant over the response's tokens, as every outcome estimator
  gives, else per token (``[N, T]``, zero on padding). ``exchange inspect`` then judges
  the update verl computed, whatever its estimator;
- the prompt: ``prompts`` (``[bs, P]``, left-padded) with its mask, the first ``P``
  columns of ``attention_mask``, as ``prompt_tokens`` / ``prompt_mask``.

Multi-turn batches (verl's agent loop): ``response_mask`` is 0 on the tool-output tokens
inside a response, which ``attention_mask`` keeps as real. They become context tokens
of the :class:`Rollout` (mask False, ids kept, the prefix of every later token; no
event, no coefficient). A ``response_mask`` that is not 0/1, or is 1 where
``attention_mask`` says padding, is refused naming the row.
"""

from __future__ import annotations

from pathlib import Path

import torch

from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument

__all__ = ["rollout_from_dataproto", "dump_batch", "policy_mask"]


def _get(batch, *names):
    for name in names:
        try:
            value = batch[name]
        except (KeyError, TypeError):
            continue
        if value is not None:
            return value
    return None


def policy_mask(response_mask: torch.Tensor, real: torch.Tensor | None = None,
                field: str = "response_mask") -> torch.Tensor:
    """verl's ``response_mask [bs, T]`` (int, float or bool) as a bool mask, on its own
    device. ``real [bs, T]`` (the response part of ``attention_mask``), when given, marks
    the real tokens: a policy token must be one. Raises :class:`InvalidArgument` naming
    ``field`` and the first bad row; a 0 inside a response is a context (tool) token,
    not an error."""
    if not response_mask.dtype == torch.bool:
        bad = (response_mask != 0) & (response_mask != 1)
        if bool(bad.any()):
            row, col = (int(v) for v in bad.nonzero()[0])
            raise InvalidArgument(
                f"{field}[{row}, {col}]={response_mask[row, col].item()} is neither 0 nor 1: pass verl's 0/1 mask "
                "(1 on the policy's tokens, 0 on padding and tool-output tokens)."
            )
    mask = response_mask.bool()
    if real is not None:
        outside = mask & ~real.bool()
        if bool(outside.any()):
            row = int(outside.any(dim=1).nonzero()[0])
            raise InvalidArgument(
                f"{field} row {row} is 1 where attention_mask marks padding (columns "
                f"{outside[row].nonzero().flatten().tolist()}): a policy token must be a real token; "
                "pass the response_mask and attention_mask of the same batch."
            )
    return mask


def _advantages(adv, mask: torch.Tensor) -> torch.Tensor:
    """verl's ``advantages [bs, T]`` as ``[N]`` when constant over each response's real
    tokens, else ``[N, T]`` zeroed on padding (float64, CPU)."""
    adv = torch.where(mask, adv.detach().to(torch.float64).cpu(), 0.0)
    lengths = mask.sum(dim=1).clamp(min=1).to(torch.float64)
    per_response = adv.sum(dim=1) / lengths
    spread = torch.where(mask, adv - per_response[:, None], torch.zeros_like(adv)).abs().amax() if adv.numel() else 0.0
    return per_response if float(spread) == 0.0 else adv


def _prompt(batch) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(prompt_tokens [N, P], prompt_mask [N, P])`` from verl's ``prompts`` and the first
    ``P`` columns of ``attention_mask`` (all ones when that is absent)."""
    prompts = _get(batch, "prompts")
    if prompts is None:
        return None, None
    attention = _get(batch, "attention_mask")
    width = prompts.shape[1]
    mask = torch.ones_like(prompts, dtype=torch.bool) if attention is None else attention[:, :width].bool()
    return torch.where(mask, prompts.long(), 0).cpu(), mask.cpu()


def rollout_from_dataproto(data) -> Rollout:
    """The :class:`Rollout` of a verl ``DataProto`` (anything with ``.batch`` and
    ``.non_tensor_batch`` mappings)."""
    batch, extra = data.batch, data.non_tensor_batch
    tokens = _get(batch, "responses")
    old = _get(batch, "old_log_probs")
    if tokens is None or old is None:
        raise InvalidArgument("dump_batch: the batch needs 'responses' and 'old_log_probs' (dump after compute_log_prob).")
    attention = _get(batch, "attention_mask")
    real = None if attention is None else policy_mask(attention[:, -tokens.shape[1]:], field="attention_mask")
    mask = _get(batch, "response_mask")
    mask = policy_mask(real if mask is None else mask, real)
    # a row's real tokens: attention's, else up to its last policy token (tool tokens are context)
    if real is None:
        real = torch.arange(1, mask.shape[1] + 1, device=mask.device)[None, :] <= torch.where(
            mask, torch.arange(1, mask.shape[1] + 1, device=mask.device), 0).amax(dim=1, keepdim=True)
    scores = _get(batch, "token_level_rewards", "token_level_scores")
    if scores is None:
        raise InvalidArgument("dump_batch: the batch needs 'token_level_rewards' or 'token_level_scores' (dump after the reward).")
    uid = extra["uid"]
    _, group = torch.unique(torch.tensor([hash(str(u)) for u in uid]), return_inverse=True)
    f64 = torch.float64
    ref = _get(batch, "ref_log_prob")
    ent = _get(batch, "entropys")
    adv = _get(batch, "advantages")
    prompt_tokens, prompt_mask = _prompt(batch)
    return Rollout(
        tokens=torch.where(real, tokens.long(), 0).cpu(),  # tool tokens kept: context of later ones
        mask=mask.cpu(),
        rewards=(scores.to(f64) * real).sum(dim=1).cpu(),
        group=group,
        old_logprobs=torch.where(mask, old.to(f64), 0.0).detach().cpu(),
        ref_logprobs=None if ref is None else torch.where(mask, ref.to(f64), 0.0).detach().cpu(),
        entropy=None if ent is None else torch.where(mask, ent.to(f64), 0.0).detach().cpu(),
        advantages=None if adv is None else _advantages(adv, mask.cpu()),
        prompt_tokens=prompt_tokens,
        prompt_mask=prompt_mask,
    )


def dump_batch(data, path: str | Path) -> Path:
    """Write the verl batch ``data`` to ``path`` in ``exchange inspect``'s format."""
    from exchange.core.batch_io import save_batch

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return save_batch(rollout_from_dataproto(data), path)
