"""Train with any exchange objective inside TRL: ``ExchangeGRPOTrainer`` (trl==1.16.0).

    from exchange.libraries.trl.trainer import ExchangeGRPOTrainer
    trainer = ExchangeGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...),
                                  train_dataset=..., objective="dapo")
    trainer.train()

The trainer is TRL's ``GRPOTrainer`` (generation, rewards, reference model, logging,
optimizer) with one change: ``_compute_loss`` builds a :class:`~exchange.Rollout` from
TRL's batch (completion ids and mask, the group of each completion, its reward, the old
/ reference log-probs and the entropies TRL computed) and returns ``objective(logprobs,
rollout)``, divided by the gradient-accumulation steps as TRL divides its own losses.
The objective computes its own advantages from the rewards (TRL's are not used).

Every step it logs, through TRL's ``self._metrics`` (so they reach TRL's logs):

- ``exchange/shared_residual``: :func:`exchange.core.events.shared_residual` of the real
  batch (0 for objectives with (C), and when the batch has no shared event);
- ``exchange/shared_events``: how many shared events the batch has;
- with ``dump_batches="dir"``, every batch is also written to ``dir/`` for
  ``exchange inspect dir/train-step000010-0003.pt dapo`` (format:
  :func:`exchange.checker.inspect.load_batch`);
- ``exchange/learning_tax``: when ``learning_tax=True`` and ``exchange.paramspace`` is
  present, the share of the update norm carried by zero-credit occurrences.

Limits: one process, and every micro-batch must hold whole groups, so
``steps_per_generation`` must be 1 (TRL shuffles and splits a generation batch across
steps; a group split across micro-batches has no baseline).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from exchange.libraries.versions import LibraryError, require
from exchange.errors import InvalidArgument
from exchange.core.rollout import Rollout

require("trl")
try:
    from trl import GRPOTrainer
except ImportError as err:  # pragma: no cover - require() already checked the install
    raise LibraryError(f"library='trl' failed to import ({err}); pip install -e '.[trl]'") from err

__all__ = ["ExchangeGRPOTrainer", "resolve_objective"]

LossFn = Callable[[Tensor, Rollout], Tensor]


def resolve_objective(objective: str | LossFn, params: Mapping[str, Any] | None = None) -> LossFn:
    """A catalog name (``"dapo"``, later ``"gspo+min_replace"``), a library target
    (``"trl:grpo"``, ``"verl:vanilla/token-mean"``) or a ``loss_fn`` callable."""
    if callable(objective):
        if params:
            raise InvalidArgument(f"objective_params={dict(params)!r} given with a callable objective; bind them yourself.")
        return objective
    if not isinstance(objective, str):
        raise InvalidArgument(f"objective={objective!r} is neither a name nor a loss_fn(logprobs, rollout) callable.")
    if ":" in objective:
        from exchange.libraries import resolve

        return resolve(objective, {k: str(v) for k, v in (params or {}).items()})
    from exchange.objectives import resolve

    return resolve(objective, **dict(params or {}))


class ExchangeGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose loss is an exchange objective (see the module docstring).

    Args (in addition to GRPOTrainer's):
        objective: catalog name, library target, or ``loss_fn(logprobs, rollout)``.
        objective_params: hyperparameters for a named objective.
        learning_tax: also log ``exchange/learning_tax`` (one extra backward pass per
            zero-credit part; needs ``exchange.paramspace``).
        dump_batches: a folder: write every batch there for ``exchange inspect``.
    """

    def __init__(
        self,
        *args: Any,
        objective: str | LossFn = "dapo",
        objective_params: Mapping[str, Any] | None = None,
        learning_tax: bool = False,
        dump_batches: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.exchange_objective = resolve_objective(objective, objective_params)
        self.exchange_learning_tax = learning_tax
        self.exchange_dump_batches = dump_batches
        self._exchange_dumped = 0
        super().__init__(*args, **kwargs)
        if self.args.steps_per_generation != 1:
            raise InvalidArgument(
                f"steps_per_generation={self.args.steps_per_generation}: ExchangeGRPOTrainer needs whole groups in "
                "every micro-batch; set steps_per_generation=1 (generation_batch_size = per_device_train_batch_size)."
            )
        if self.accelerator.num_processes != 1:
            raise InvalidArgument(f"num_processes={self.accelerator.num_processes}: ExchangeGRPOTrainer runs on one process.")

    # ----------------------------------------------------------- batch -> rollout
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._exchange_rewards_per_func = rewards_per_func  # [B, n_funcs], gathered
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        per_func = self._exchange_rewards_per_func
        weights = self.reward_weights.to(per_func.device)
        rewards = (per_func * weights[None, :]).nansum(dim=1)  # TRL's "sum_then_normalize" reward
        n = output["completion_ids"].shape[0]
        mode = "train" if self.model.training else "eval"
        g = self.num_generations if mode == "train" else self.num_generations_eval
        output["exchange_rewards"] = rewards[:n]
        output["exchange_group"] = torch.arange(n, device=rewards.device) // g  # TRL lays groups out in blocks
        return output

    def _exchange_rollout(self, inputs, per_token_logps: Tensor, entropies: Tensor | None) -> Rollout:
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        old = inputs.get("old_per_token_logps")
        return Rollout(
            tokens=inputs["completion_ids"],
            mask=mask.bool(),
            rewards=inputs["exchange_rewards"].to(per_token_logps.dtype),
            group=inputs["exchange_group"],
            old_logprobs=per_token_logps.detach() if old is None else old.to(per_token_logps.dtype),
            ref_logprobs=inputs.get("ref_per_token_logps"),
            entropy=None if entropies is None else entropies.detach(),
            prompt_tokens=inputs["prompt_ids"],
            prompt_mask=inputs["prompt_mask"].bool(),
        )

    # ----------------------------------------------------------------- the loss
    def _compute_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        per_token_logps, entropies, _aux = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        rollout = self._exchange_rollout(inputs, per_token_logps, entropies)
        loss = self.exchange_objective(per_token_logps, rollout)
        mode = "train" if self.model.training else "eval"
        self._exchange_log(mode, per_token_logps, rollout, model)
        if mode == "train":
            loss = loss / self.current_gradient_accumulation_steps
        return loss

    def _exchange_log(self, mode: str, per_token_logps: Tensor, rollout: Rollout, model) -> None:
        from exchange.checker.inspect import inspect

        # the one batch inspector: the logged numbers are exactly `exchange inspect`'s
        found = inspect(self.exchange_objective, rollout, per_token_logps.detach(), top=0)
        if self.exchange_dump_batches:
            from pathlib import Path

            from exchange.checker.inspect import save_batch

            folder = Path(self.exchange_dump_batches)
            folder.mkdir(parents=True, exist_ok=True)
            save_batch(replace(rollout, logprobs=per_token_logps.detach()),
                       folder / f"{mode}-step{self.state.global_step:06d}-{self._exchange_dumped:04d}.pt")
            self._exchange_dumped += 1
        metrics = self._metrics[mode]
        metrics["exchange/shared_residual"].append(found.shared_residual)
        metrics["exchange/shared_events"].append(float(found.n_shared))
        if self.exchange_learning_tax:
            try:
                from exchange.paramspace import learning_tax
            except ImportError:
                return
            tax = learning_tax(self.accelerator.unwrap_model(model), self.exchange_objective, rollout)
            metrics["exchange/learning_tax"].append(float(tax.tax))
