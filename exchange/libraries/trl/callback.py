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

The pieces: :mod:`exchange.libraries.trl.batches` (the keys added to TRL's batches, a
batch as a ``Rollout``), :mod:`exchange.libraries.trl.step` (one optimizer step's rows,
its sums, the dump's rows, logging), :mod:`exchange.libraries.step_metrics` (the metric
definitions, shared with the verl monitor); this module binds them to the trainer.

``use_liger_kernel=True`` is measured like any run: TRL 1.16 only patches the model's
kernels (it turns ``fused_linear_cross_entropy`` off) and computes its loss from the
same per-token log-probs.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from exchange.libraries.trl.contact import hook_loss, hook_scoring, require_contacts
from exchange.libraries.versions import require

require("trl")
from transformers import TrainerCallback  # noqa: E402

# re-exported: the callback's public names (tests and the lab import them from here)
from exchange.libraries.step_metrics import STEP_KEYS, batch_sums, metrics_from_sums  # noqa: E402,F401
from exchange.libraries.trl.batches import add_batch_keys, rollout_of, weighted_rewards  # noqa: E402,F401
from exchange.libraries.trl.step import StepAccumulator, concat_steps, log_sums  # noqa: E402

__all__ = ["ExchangeCallback", "add_batch_keys", "batch_sums", "metrics_from_sums", "rollout_of", "weighted_rewards"]

_KEYS = STEP_KEYS  # what the callback logs


class ExchangeCallback(TrainerCallback):
    """Log exchange's instruments on TRL's real batches, one optimizer step at a time (see
    the module docstring); ``dump_batches``: a folder, where each optimizer step's rows are
    written as one file for ``exchange inspect``."""

    def __init__(self, dump_batches: str | Path | None = None) -> None:
        self.trainer = None
        self._acc = StepAccumulator()
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
            save_batch(concat_steps(parts), path)
            self.dumped.append(path)
