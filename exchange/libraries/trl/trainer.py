"""Train with any exchange objective inside TRL: ``ExchangeGRPOTrainer`` (trl==1.16.0).

    from exchange.libraries.trl.trainer import ExchangeGRPOTrainer
    trainer = ExchangeGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...),
                                  train_dataset=..., objective="dapo")
    trainer.train()

The trainer is TRL's ``GRPOTrainer`` (generation, rewards, reference model, logging,
optimizer, ``accelerate`` processes, gradient accumulation, ``steps_per_generation`` and
``num_iterations`` buffering) with its loss replaced:

- **The loss.** TRL's ``_compute_loss`` still runs (one forward pass; TRL logs
  ``entropy``, ``clip_ratio/*``, ``kl`` ... as always); the log-probs of that forward pass
  feed ``objective(logprobs, rollout)`` (plus its KL term and TRL's entropy bonus), whose
  value is returned instead of TRL's loss, normalised as TRL normalises its own under
  gradient accumulation. The rollout is the micro-batch: completion ids and mask, each
  row's group and reward (TRL's weighted sum), old and reference log-probs, and, for
  objectives whose estimator is TRL's (group mean, optional std), the advantages the
  trainer computed over the whole generation batch of every process, as TRL does
  (``Rollout.advantages``; so ``scale_rewards: batch`` is the batch's std at any
  gradient accumulation). ``objective=None`` keeps TRL's loss (then this class is
  GRPOTrainer plus :class:`~exchange.libraries.trl.callback.ExchangeCallback`).
- **Micro-batches** (``batching``, :func:`~exchange.libraries.trl.settings.batching_of`):
  ``"rows"``, the default for a plain catalog family with TRL's estimator, keeps TRL's own
  row-shuffled split, so per-micro-batch normalisers (bnpo's token count) are TRL's;
  ``"groups"``, the default otherwise (transforms, the surgical arm, callables, own
  estimators), shuffles whole groups instead (needs ``per_device_train_batch_size %
  num_generations == 0``; checked).

Every GRPOConfig loss setting is applied as GRPOTrainer applies it (TRL's values win,
its defaults included), or refused at construction with an ``InvalidArgument`` naming
the setting and the fix: :mod:`exchange.libraries.trl.settings`. A ``loss_type`` the user
set that differs from the objective is named in a ``UserWarning`` (the objective is the
loss). Truncated completions (``mask_truncated_completions``) stay in the rollout as data
(``Rollout.truncated``) and the objective masks them after centring, as TRL does. TRL's
per-token factors (``top_entropy_quantile``, ``delta``, ``off_policy_mask_threshold``,
vLLM's importance-sampling correction) are parameters of the objective: the rollout
carries TRL's token entropies (when the quantile is on) and vLLM's sampling log-probs
(``Rollout.sampling_logprobs``), and the entropy quantile pools every process's tokens,
as TRL's ``get_high_entropy_mask`` does. ``multi_objective_aggregation=
"normalize_then_sum"``: the trainer computes TRL's advantages from every reward function
(:func:`normalize_then_sum`).

With ``dump_batches="dir"`` every optimizer step is written to ``dir/`` as one file, its
micro-batches together (``dir/train-step000010-rank0.pt``; written by the
:class:`ExchangeCallback`, so ``objective=None`` dumps TRL's own batches too), for
``exchange inspect dir/train-step000010-rank0.pt dapo`` (format: :mod:`exchange.core.batch_io`).

Every step it logs the metrics of :class:`ExchangeCallback` (``tax/shared_residual``,
``tax/shared_events``, ``tax/shared_kappa_share``) for the loss it trains with, and,
when ``learning_tax=True`` and ``exchange.paramspace`` is present,
``tax/learning_tax`` (the update-norm share of zero-credit occurrences; a
micro-batch whose update is zero, e.g. every group with reward std 0, is skipped rather
than logged as NaN, and counted in ``tax/learning_tax_skipped``). TRL's private methods
are reached only through :mod:`exchange.libraries.trl.contact`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from exchange.core.metric_keys import LEARNING_TAX, LEARNING_TAX_SKIPPED
from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.libraries.trl.objective import (  # noqa: F401 (re-exported)
    LossFn,
    group_shuffle,
    normalize_then_sum,
    refuse_settings,
    resolve_objective,
)
from exchange.libraries.trl.settings import (
    GLOBAL_TOKEN_MEAN,
    advantage_hook,
    base_of,
    batching_of,
    config_params,
    differences,
    objective_defaults,
    refused_settings,
)
from exchange.libraries.trl.settings import (
    trl_defaults as _trl_default_values,
)
from exchange.libraries.versions import LibraryError, require

require("trl")
try:
    from trl import GRPOTrainer
except ImportError as err:  # pragma: no cover - require() already checked the install
    raise LibraryError(f"library='trl' failed to import ({err}); pip install -e '.[trl]'") from err

__all__ = ["ExchangeGRPOTrainer", "config_params", "differences", "normalize_then_sum", "refused_settings",
           "resolve_objective"]


class ExchangeGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose loss is an exchange objective (see the module docstring).

    Args (in addition to GRPOTrainer's):
        objective: catalog name, library target, ``loss_fn(logprobs, rollout)``, or
            ``None`` for TRL's own loss (``GRPOConfig.loss_type``).
        objective_params: hyperparameters for a named objective (override GRPOConfig's).
        learning_tax: also log ``tax/learning_tax`` (one extra backward pass per
            zero-credit part; needs ``exchange.paramspace``).
        dump_batches: a folder: write each optimizer step's rows there, one file per step
            and process, for ``exchange inspect`` (TRL's own loss too, ``objective=None``).
        batching: ``"rows"`` (TRL's micro-batches), ``"groups"`` (whole groups per
            micro-batch) or ``None`` (rows where the objective allows them).
        trl_defaults: ``False`` (the default): GRPOConfig's clip widths, beta and SAPO
            temperatures win where the config sets them (differs from TRL's default); the
            objective keeps its own otherwise, the values ``exchange check <objective>``
            audits (GSPO's 3e-4/4e-4, DAPO's 0.28; a ``UserWarning`` names each). ``True``:
            TRL's values win, its defaults included (``GRPOTrainer``'s own loss, exactly).
    """

    def __init__(
        self,
        *args: Any,
        objective: str | LossFn | None = "dapo",
        objective_params: Mapping[str, Any] | None = None,
        learning_tax: bool = False,
        dump_batches: str | None = None,
        batching: str | None = None,
        trl_defaults: bool = False,
        **kwargs: Any,
    ) -> None:
        from exchange.libraries.trl.contact import require_contacts

        require_contacts()  # a TRL whose private methods moved fails here, naming them
        self.exchange_learning_tax = learning_tax
        self.exchange_dump_batches = dump_batches
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if objective is not None and config is not None:  # refuse before TRL loads models
            refuse_settings(config, objective, objective_params, trl_defaults)
        super().__init__(*args, **kwargs)
        self.exchange_regularizer = None
        self.exchange_objective = None
        self.exchange_advantages = None
        self.exchange_batching = "rows"
        if objective is not None:
            self._exchange_bind(objective, objective_params, batching, trl_defaults)
        from exchange.libraries.trl.callback import ExchangeCallback

        self.exchange_callback = ExchangeCallback(dump_batches=dump_batches).bind(self)
        self.add_callback(self.exchange_callback)

    def _exchange_bind(self, objective, objective_params, batching, trl_defaults: bool) -> None:
        from exchange.libraries.trl.contact import (
            group_batching,
            hook_loss,
            hook_scoring,
        )

        refuse_settings(self.args, objective, objective_params, trl_defaults)
        params = config_params(self.args, objective, objective_params, trl_defaults)
        self.exchange_params = params
        self.exchange_objective = resolve_objective(objective, params)
        if objective_defaults(objective) is not None:
            from exchange.libraries.trl.settings import pathway_base
            from exchange.objectives import get

            # the surgical arm keeps its objective's regulariser (the transform touches
            # only the shared-event coefficients of the reward-driven loss)
            self.exchange_regularizer = get(pathway_base(objective)).bind_regularizer(**params)
        # objectives whose normaliser TRL takes over the generation batch (loss_type dapo, cispo)
        self.exchange_global_tokens = base_of(objective) in GLOBAL_TOKEN_MEAN
        self.exchange_advantages = advantage_hook(objective)
        self.exchange_batching = batching_of(objective, batching)
        self._exchange_clip_metrics(objective, params)
        if self.args.loss_type != _trl_default_values()["loss_type"] and self.args.loss_type != base_of(objective):
            warnings.warn(f"ExchangeGRPOTrainer trains objective={getattr(objective, '__name__', objective)!r}, not "
                          f"GRPOConfig.loss_type={self.args.loss_type!r}.", UserWarning, stacklevel=3)
        for setting in differences(self.args, objective, objective_params, trl_defaults):
            warnings.warn(f"ExchangeGRPOTrainer trains objective={objective!r} with {setting}: the objective's own "
                          "value (trl_defaults=False).", UserWarning, stacklevel=3)
        if self.exchange_batching == "groups" and self.args.per_device_train_batch_size % self.num_generations:
            raise InvalidArgument(
                f"per_device_train_batch_size={self.args.per_device_train_batch_size} is not a multiple of "
                f"num_generations={self.num_generations}: a micro-batch would hold part of a group, which "
                f"objective={objective!r} cannot train on (batching='groups'). Use a multiple (gradient "
                "accumulation and several processes are fine).")
        holder: dict[str, Any] = {}

        def on_rewards(per_func, completion_ids):
            holder["per_func"], holder["completion_ids"] = per_func, completion_ids

        hook_scoring(self, on_rewards, lambda output: self._exchange_output(output, holder))
        hook_loss(self, self._exchange_loss)
        if self.exchange_batching == "groups":
            group_batching(self, lambda batch: group_shuffle(batch, self.num_generations))

    def _exchange_clip_metrics(self, objective, params: Mapping[str, Any]) -> None:
        """TRL's ``_compute_loss`` still runs and logs ``clip_ratio/*`` from its own
        ``epsilon_low``/``epsilon_high``: set them to the widths the objective trains with,
        so the logged clip ratios describe the loss being trained (PPO-clip families on
        TRL's PPO-clip loss types; cispo's TRL cap is absolute, ``1 + eps_high``)."""
        family = base_of(objective)
        if family not in ("grpo", "bnpo", "dr_grpo", "dapo", "gspo", "cispo"):
            return
        from exchange.objectives import get

        widths = {**get(family).defaults, **params}  # what the objective trains with
        cispo = self.args.loss_type == "cispo"
        if widths.get("eps_low") is not None and not cispo:
            self.epsilon_low = float(widths["eps_low"])
        if widths.get("eps_high") is not None:
            self.epsilon_high = float(widths["eps_high"]) + (1.0 if cispo else 0.0)

    # ----------------------------------------------------------- batch -> rollout
    def _exchange_output(self, output: dict, holder: dict) -> dict:
        from exchange.libraries.trl.callback import add_batch_keys, weighted_rewards

        per_func, ids = holder.pop("per_func"), holder.pop("completion_ids")
        output = add_batch_keys(self, output, per_func, ids)
        if self.exchange_advantages is not None:
            # TRL's advantages: over the whole generation batch of every process (rewards
            # are gathered), then this process's slice; the objective's own estimator
            # in float64 (rollout_of casts them to the loss's dtype): a float64 measurement
            # of the same batch (the lab's instruments) then sees advantages that sum to 0
            g = self.num_generations if self.model.training else self.num_generations_eval
            if self.args.multi_objective_aggregation == "normalize_then_sum":
                adv = normalize_then_sum(per_func.to(torch.float64), self.reward_weights, g)
            else:
                rewards = weighted_rewards(self, per_func).to(torch.float64)
                n, device = rewards.shape[0], rewards.device
                whole = Rollout(tokens=torch.zeros(n, 1, dtype=torch.long, device=device),
                                mask=torch.ones(n, 1, dtype=torch.bool, device=device), rewards=rewards,
                                group=torch.arange(n, device=device) // g,
                                old_logprobs=torch.zeros(n, 1, dtype=rewards.dtype, device=device))
                params = {**self.exchange_params, "scale": self.exchange_params.get("scale", self.args.scale_rewards)}
                adv = self.exchange_advantages(whole, params).detach()
            start = self.accelerator.process_index * output["completion_ids"].shape[0]
            output["exchange_advantages"] = adv[start: start + output["completion_ids"].shape[0]].to(
                output["completion_ids"].device)
        return output

    def _exchange_rollout(self, inputs, per_token_logps: Tensor) -> Rollout:
        from exchange.libraries.trl.callback import rollout_of

        return rollout_of(inputs, per_token_logps.dtype, per_token_logps)

    # ----------------------------------------------------------------- the loss
    def _exchange_loss(self, model, inputs, trl_loss: Tensor, per_token_logps: Tensor, entropies: Tensor,
                       entropy_coef: float) -> Tensor:
        """The objective's loss on the micro-batch ``inputs`` (TRL's ``trl_loss`` dropped),
        normalised as TRL normalises its own; ``entropy_coef`` is the coefficient TRL
        applied to this micro-batch (read before its adaptive controller moved it)."""
        mode = "train" if self.model.training else "eval"
        rollout = self._exchange_rollout(inputs, per_token_logps)
        quantile = self.exchange_params.get("top_entropy_quantile", 1.0)
        if quantile < 1.0:  # TRL's quantile is over the micro-batches of every process
            from exchange.objectives import token_pool

            # TRL's entropies, as its high-entropy mask reads them (only where the objective
            # masks by entropy: a round-off entropy below 0 would fail the rollout otherwise)
            rollout = replace(rollout, entropy=entropies.detach().to(per_token_logps.dtype))
            with token_pool(self._exchange_gather_tokens):
                loss = self.exchange_objective(per_token_logps, rollout)
        else:
            loss = self.exchange_objective(per_token_logps, rollout)
        if self.exchange_regularizer is not None:  # the objective's KL (beta), as TRL adds its own
            loss = loss + self.exchange_regularizer(per_token_logps, rollout)
        mask = inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self.exchange_global_tokens:
            # TRL's dapo/cispo: sum over the micro-batch / the generation batch's token count
            # (num_items_in_batch) per accumulation window; the objective divided by this
            # micro-batch's count, and is linear in that constant.
            normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                normalizer = normalizer * accumulation / self.args.steps_per_generation
            loss = loss * mask.sum().clamp(min=1.0) / normalizer
        else:
            loss = loss / accumulation
        if entropy_coef:  # TRL's entropy bonus, exactly: the mean token entropy over the loss mask
            if quantile < 1.0:  # ... on the tokens TRL's high-entropy mask keeps
                mask = mask * self.get_high_entropy_mask(entropies, mask, 1 - quantile)
            entropy = (entropies * mask).sum() / mask.sum().clamp(min=1.0) / accumulation
            loss = loss - entropy_coef * entropy
        if mode == "train" and self.exchange_learning_tax:
            self._exchange_learning_tax(model, rollout)
        return loss

    def _exchange_gather_tokens(self, values: Tensor) -> Tensor:
        """``values [n]`` of every process, as TRL's ``get_high_entropy_mask`` gathers them
        (padded with a sentinel below any entropy, gathered, the sentinel dropped)."""
        pad = -1e9
        gathered = self.accelerator.gather(self.accelerator.pad_across_processes(values, dim=0, pad_index=pad))
        return gathered[gathered != pad]

    def _exchange_learning_tax(self, model, rollout: Rollout) -> None:
        try:
            from exchange.paramspace import learning_tax
        except ImportError:
            return
        from exchange.libraries.trl.contact import log_metric

        tax = float(learning_tax(self.accelerator.unwrap_model(model), self.exchange_objective, rollout).tax)
        if math.isfinite(tax):
            log_metric(self, "train", LEARNING_TAX, tax)
        else:  # a zero update (every group's reward std is 0): the share is 0/0
            log_metric(self, "train", LEARNING_TAX_SKIPPED, 1.0)
