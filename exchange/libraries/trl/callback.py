"""``ExchangeCallback``: exchange's instruments on a plain TRL ``GRPOTrainer`` (trl==1.16.0).

    from trl import GRPOConfig, GRPOTrainer
    from exchange.libraries.trl.callback import ExchangeCallback
    trainer = GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...),
                          train_dataset=..., callbacks=[ExchangeCallback()])
    trainer.train()

TRL trains with its own loss, unchanged; the callback adds, through TRL's own
``self._metrics`` (so they reach every ``report_to`` backend and ``log_history`` next
to ``entropy``, ``clip_ratio/*``, ``kl``, ``reward``, ...):

- ``tax/shared_residual`` (:data:`exchange.core.metric_keys.SHARED_RESIDUAL`):
  :func:`exchange.core.events.shared_residual` of the coefficients of TRL's real loss on
  the real generation batch;
- ``tax/shared_events`` (``SHARED_EVENTS``): the number of shared events in it;
- ``tax/shared_kappa_share`` (``SHARED_KAPPA_SHARE``): the P1 share in coefficient
  space, ``sum |kappa|`` over the occurrences of shared events divided by ``sum |kappa|``
  over all tokens.

(Until issue 29 these were ``exchange/shared_residual``, ``exchange/shared_events`` and
``exchange/p1_share``; the keys are now the lab's, one per quantity.)

**The hook.** ``transformers`` hands a callback neither the trainer nor the batch. At
``on_train_begin`` the callback finds the trainer that is calling it (the caller whose
``callback_handler`` holds this callback; or call :meth:`ExchangeCallback.bind`
yourself) and wraps four of its methods *on the instance* (the class is untouched):

- ``_calculate_rewards`` / ``_generate_and_score_completions``: keep each row's reward
  (TRL's weighted sum, this process's slice), its group and its row index;
- ``_get_per_token_logps_and_entropies`` (only inside ``_compute_loss``): keep the
  log-probs of the forward pass TRL already does;
- ``_compute_loss``: after TRL's loss, ``kappa = -d loss / d logps`` by
  ``torch.autograd.grad`` on the loss arithmetic only (no second forward or backward
  through the model).

TRL shuffles a generation batch and splits it into ``steps_per_generation``
micro-batches, so a micro-batch holds pieces of groups. The metrics measure **one
optimizer step** (THEORY.md section 4), the unit ``--trl-config`` judges: each
micro-batch's ``kappa`` goes back into its row of the generation batch, and when the
step's ``gradient_accumulation_steps`` micro-batches are in, the events are found on the
whole groups of the generation batch with the step's coefficients (0 on the rows another
step trains: a schedule that splits groups over steps, M8, shows as a residual); a step
that spans several generation batches adds their sums. The sums are reduced over
processes (``accelerator.reduce``), so every process logs the global number. With
``dump_batches`` each step's rows are written as one file (TRL's advantages kept, so a
step holding part of a group is still a valid batch for ``exchange inspect``). Groups are
whole on a process when ``per_device_train_batch_size * steps_per_generation`` is a
multiple of ``num_generations`` (TRL lays each group out as consecutive rows); otherwise
a group is split between processes and the callback warns once, naming that setting, and
logs nothing.

``use_liger_kernel=True`` is measured like any run: TRL 1.16 only patches the model's
kernels (it turns ``fused_linear_cross_entropy`` off) and computes its loss from the
same per-token log-probs.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.libraries.trl.contact import (
    hook_loss,
    hook_scoring,
    log_metric,
    pad_token_id,
    require_contacts,
)
from exchange.libraries.step_metrics import STEP_KEYS, batch_sums, metrics_from_sums
from exchange.libraries.versions import require

require("trl")
from transformers import TrainerCallback  # noqa: E402

__all__ = ["ExchangeCallback", "add_batch_keys", "batch_sums", "metrics_from_sums", "rollout_of", "weighted_rewards"]

_KEYS = STEP_KEYS  # what the callback logs


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


class _Accumulator:
    """Collects each micro-batch's ``kappa`` (and log-probs) into the rows of the
    generation batch, for the optimizer step they belong to."""

    def __init__(self) -> None:
        self.reset(None)
        self.pending: Tensor | None = None  # sums of a step's earlier generation batches (GA > steps_per_generation)
        self.parts: list[Rollout] = []  # the step's rows, for the dump
        self.micro = 0  # micro-batches seen in the current optimizer step

    def reset(self, batch: dict | None) -> None:
        self.batch = batch
        self.kappa: Tensor | None = None
        self.logps: Tensor | None = None
        self.seen: Tensor | None = None

    def add(self, inputs: dict, kappa: Tensor, logps: Tensor, n_rows: int) -> None:
        rows = inputs["exchange_row"].cpu()
        if self.kappa is None:  # kept on the CPU, where the events of the whole batch are found
            self.kappa = torch.zeros(n_rows, kappa.shape[1], dtype=torch.float64, device="cpu")
            self.logps = torch.zeros(n_rows, kappa.shape[1], dtype=torch.float64, device="cpu")
            self.seen = torch.zeros(n_rows, dtype=torch.bool, device="cpu")
        self.kappa[rows] = kappa.detach().double().cpu()
        self.logps[rows] = logps.detach().double().cpu()
        self.seen[rows] = True

    def close_batch(self) -> Tensor | None:
        """The sums of the rows this step saw in the current generation batch (its events
        found on the whole batch, so a group split over steps keeps its shared events and
        the coefficients of the rows outside the step are 0, THEORY.md M8); the step's rows
        kept for the dump; the batch's coefficients cleared."""
        if self.kappa is None or not bool(self.seen.any()):
            return None
        batch = {k: (v.cpu() if isinstance(v, Tensor) else v) for k, v in self.batch.items()}
        rollout = rollout_of(batch, torch.float64, logprobs=self.logps)  # on-policy: TRL kept no old log-probs
        kappa = torch.where(self.seen[:, None], self.kappa, torch.zeros_like(self.kappa))
        sums = batch_sums(kappa, rollout)
        rows = self.seen.nonzero().flatten()
        if rollout.advantages is None and isinstance(batch.get("advantages"), Tensor):
            # TRL's own advantages, over whole groups: a step that holds part of a group (M8)
            # keeps them (a Rollout of partial groups needs them), and inspect reads them
            rollout = dataclasses.replace(rollout, advantages=batch["advantages"].to(torch.float64))
        self.parts.append(dataclasses.replace(rollout.select(rows), logprobs=self.logps[rows]))
        self.kappa.zero_(), self.logps.zero_(), self.seen.zero_()
        return sums


class ExchangeCallback(TrainerCallback):
    """Log exchange's instruments on TRL's real batches, one optimizer step at a time (see
    the module docstring); ``dump_batches``: a folder, where each optimizer step's rows are
    written as one file for ``exchange inspect``."""

    def __init__(self, dump_batches: str | Path | None = None) -> None:
        self.trainer = None
        self._acc = _Accumulator()
        self.enabled = True
        self.dump_batches = None if dump_batches is None else Path(dump_batches)
        self.dumped: list[Path] = []

    # --------------------------------------------------------------- binding
    def on_train_begin(self, args, state, control, **kwargs):
        if self.trainer is None:
            frame = inspect.currentframe()
            while frame is not None:
                obj = frame.f_locals.get("self")
                handler = getattr(obj, "callback_handler", None)
                if handler is not None and self in getattr(handler, "callbacks", ()):
                    self.bind(obj)
                    break
                frame = frame.f_back
            del frame
        if self.trainer is None:
            warnings.warn("ExchangeCallback: no GRPOTrainer found calling it; call callback.bind(trainer).", stacklevel=2)
        return control

    def bind(self, trainer) -> "ExchangeCallback":
        """Wrap ``trainer``'s methods (instance attributes) so the callback sees each batch."""
        if self.trainer is trainer:
            return self
        require_contacts()  # a TRL whose private methods moved fails here, naming them
        self.trainer = trainer
        args = trainer.args
        local_rows = args.per_device_train_batch_size * args.steps_per_generation
        if local_rows % trainer.num_generations:
            warnings.warn(
                f"ExchangeCallback: per_device_train_batch_size*steps_per_generation={local_rows} is not a multiple of "
                f"num_generations={trainer.num_generations}: a group is split between processes, so its shared events "
                f"cannot be found on one process; the callback logs nothing ({', '.join(_KEYS)}) and dumps nothing. "
                f"Set per_device_train_batch_size*steps_per_generation to a multiple of num_generations (TRL lays "
                f"each group out as consecutive rows of one process's generation batch).",
                stacklevel=2,
            )
            self.enabled = False
            return self

        holder: dict[str, Any] = {}

        def on_rewards(per_func, completion_ids):
            holder["per_func"], holder["completion_ids"] = per_func, completion_ids

        def on_output(output):
            per_func, ids = holder.pop("per_func", None), holder.pop("completion_ids", None)
            if "exchange_row" not in output:  # ExchangeGRPOTrainer adds them itself
                output = add_batch_keys(trainer, output, per_func, ids)
            if trainer.model.training:
                sums = self._acc.close_batch()  # a step that spans generation batches keeps their sums
                if sums is not None:
                    self._acc.pending = sums if self._acc.pending is None else self._acc.pending + sums
                self._acc.reset(output)
            return output

        def on_loss(model, inputs, loss, logps, entropies, entropy_coef):
            if trainer.model.training and logps is not None and logps.requires_grad and loss.requires_grad:
                self._measure(loss, logps, inputs)
            return loss

        hook_scoring(trainer, on_rewards, on_output)
        hook_loss(trainer, on_loss)
        return self

    # -------------------------------------------------------------- measuring
    def _measure(self, loss: Tensor, logps: Tensor, inputs: dict) -> None:
        (grad,) = torch.autograd.grad(loss, logps, retain_graph=True, allow_unused=True)
        kappa = torch.zeros_like(logps) if grad is None else -grad
        batch = self._acc.batch
        if batch is None or "exchange_row" not in inputs:
            return
        self._acc.add(inputs, kappa, logps, batch["completion_ids"].shape[0])
        self._acc.micro += 1
        window = getattr(self.trainer, "current_gradient_accumulation_steps", None)
        if self._acc.micro >= int(window or self.trainer.args.gradient_accumulation_steps):
            self._flush()

    def _flush(self) -> None:
        """The optimizer step is complete: log its sums (every process's), dump its rows."""
        acc = self._acc
        sums = acc.close_batch()
        if acc.pending is not None:
            sums = acc.pending if sums is None else acc.pending + sums
        parts, acc.parts, acc.pending, acc.micro = acc.parts, [], None, 0
        if sums is None:
            return
        log_sums(self.trainer, "train", sums)
        if self.dump_batches is not None and parts:
            from exchange.core.batch_io import save_batch

            self.dump_batches.mkdir(parents=True, exist_ok=True)
            path = self.dump_batches / (f"train-step{self.trainer.state.global_step + 1:06d}"
                                        f"-rank{self.trainer.accelerator.process_index}.pt")
            save_batch(_concat(parts), path)
            self.dumped.append(path)


def _concat(parts: list[Rollout]) -> Rollout:
    """One rollout of the step's rows from several generation batches (group ids made
    distinct, tokens padded to the widest)."""
    if len(parts) == 1:
        return parts[0]
    width = max(p.mask.shape[1] for p in parts)
    fields, offset = {}, 0
    for part in parts:
        pad = width - part.mask.shape[1]
        for f in dataclasses.fields(part):
            value = getattr(part, f.name)
            if not f.init or value is None:
                continue
            if f.name == "group":
                value = value + offset
            elif value.ndim == 2 and f.name not in ("prompt_tokens", "prompt_mask"):
                value = torch.nn.functional.pad(value, (0, pad))
            fields.setdefault(f.name, []).append(value)
        offset += int(part.group.max()) + 1
    prompts = [fields.get("prompt_tokens"), fields.get("prompt_mask")]
    if any(p is not None and len({v.shape[1] for v in p}) > 1 for p in prompts):  # prompts of different widths
        fields.pop("prompt_tokens", None), fields.pop("prompt_mask", None)
    return Rollout(**{k: torch.cat(v) for k, v in fields.items()})


def log_sums(trainer, mode: str, sums: Tensor) -> dict[str, float]:
    """Reduce :func:`batch_sums` over processes and log the metrics."""
    sums = trainer.accelerator.reduce(sums.to(trainer.accelerator.device, torch.float32), reduction="sum")
    metrics = metrics_from_sums(sums.cpu())
    for key, value in metrics.items():
        log_metric(trainer, mode, key, value)
    return metrics


def log_metrics(trainer, mode: str, kappa: Tensor, rollout: Rollout) -> dict[str, float]:
    sums = batch_sums(kappa, rollout).to(trainer.accelerator.device, torch.float32)
    sums = trainer.accelerator.reduce(sums, reduction="sum")
    metrics = metrics_from_sums(sums.cpu())
    for key, value in metrics.items():
        log_metric(trainer, mode, key, value)
    return metrics
