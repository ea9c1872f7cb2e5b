"""Train with any exchange objective inside TRL: ``ExchangeGRPOTrainer`` (trl==1.16.0).

    from exchange.libraries.trl.trainer import ExchangeGRPOTrainer
    trainer = ExchangeGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...),
                                  train_dataset=..., objective="dapo")
    trainer.train()

The trainer is TRL's ``GRPOTrainer`` (generation, rewards, reference model, logging,
optimizer, ``accelerate`` processes, gradient accumulation) with two changes:

- **The loss.** ``_compute_loss`` runs TRL's own ``_compute_loss`` (one forward pass;
  TRL logs ``entropy``, ``clip_ratio/*``, ``kl`` ... as always), keeps the log-probs of
  that forward pass and returns ``objective(logprobs, rollout)`` instead of TRL's loss,
  divided by the gradient-accumulation steps as TRL divides its own. The rollout is the
  micro-batch: completion ids and mask, each row's group and reward (TRL's weighted
  sum), old and reference log-probs. The objective computes its own advantages.
  ``objective=None`` keeps TRL's loss (then this class is GRPOTrainer plus
  :class:`~exchange.libraries.trl.callback.ExchangeCallback`).
- **Whole groups per micro-batch.** TRL shuffles the rows of a generation batch before
  splitting it into ``steps_per_generation`` micro-batches; this trainer shuffles whole
  groups instead, so every micro-batch holds whole groups. That needs
  ``per_device_train_batch_size % num_generations == 0`` (checked; the error names it).
  Several processes work (each process's slice of the generation batch is then whole
  groups too); DDP averages the processes' gradients, i.e. each process's objective is
  normalised over its own micro-batch, not over the global token count TRL uses.

Hyperparameters come from ``GRPOConfig`` under TRL's names: ``epsilon`` -> the
objective's ``eps_low``, ``epsilon_high`` -> ``eps_high``, ``beta`` -> ``beta`` and
``scale_rewards`` -> ``scale`` where the objective has that parameter and the config
changes it from TRL's default (TRL's defaults keep the objective's own, e.g. DAPO's
0.28 or GSPO's 3e-4; ``objective_params`` win). Every other loss setting that the objective
cannot honour and that is not at TRL's neutral value (``beta != 0``,
``importance_sampling_level``, ``delta``, ``top_entropy_quantile``,
``off_policy_mask_threshold``, ``mask_truncated_completions``,
``multi_objective_aggregation``, ``use_liger_kernel``, and ``loss_type`` itself) is
named in a ``UserWarning`` at construction.

With ``dump_batches="dir"`` every micro-batch is also written to ``dir/`` for
``exchange inspect dir/train-step000010-0003.pt dapo`` (format:
:mod:`exchange.core.batch_io`).

Every step it logs the metrics of :class:`ExchangeCallback` (``tax/shared_residual``,
``tax/shared_events``, ``tax/shared_kappa_share``) for the loss it trains with, and,
when ``learning_tax=True`` and ``exchange.paramspace`` is present,
``tax/learning_tax`` (the update-norm share of zero-credit occurrences; a
micro-batch whose update is zero, e.g. every group with reward std 0, is skipped rather
than logged as NaN, and counted in ``tax/learning_tax_skipped``). The keys are
:mod:`exchange.core.metric_keys`' (``exchange/*`` until issue 29).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from exchange.core.metric_keys import LEARNING_TAX, LEARNING_TAX_SKIPPED
from exchange.libraries.versions import LibraryError, require
from exchange.errors import InvalidArgument
from exchange.core.rollout import Rollout

require("trl")
try:
    from trl import GRPOTrainer
except ImportError as err:  # pragma: no cover - require() already checked the install
    raise LibraryError(f"library='trl' failed to import ({err}); pip install -e '.[trl]'") from err

__all__ = ["ExchangeGRPOTrainer", "resolve_objective", "config_params", "unhonoured_settings"]

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


# TRL's name -> the exchange objective's parameter name.
_MAPPED = {"epsilon": "eps_low", "epsilon_high": "eps_high", "beta": "beta", "scale_rewards": "scale"}
# Loss settings an exchange objective does not see, with TRL's neutral value.
_NEUTRAL = {
    "beta": 0.0,
    "importance_sampling_level": "token",
    "delta": None,
    "top_entropy_quantile": 1.0,
    "off_policy_mask_threshold": None,
    "mask_truncated_completions": False,
    "multi_objective_aggregation": "sum_then_normalize",
    "use_liger_kernel": False,
}


def _objective_defaults(objective) -> dict[str, Any] | None:
    if not isinstance(objective, str) or ":" in objective:
        return None
    from exchange.objectives import SURGICAL, get

    # "<spec>+surgical" wraps <spec>'s loss and keeps its parameters (exchange.objectives.surgical)
    return dict(get(objective.removesuffix(f"+{SURGICAL}")).defaults)


def _trl_defaults() -> dict[str, Any]:
    import dataclasses

    from trl import GRPOConfig

    return {f.name: f.default for f in dataclasses.fields(GRPOConfig) if f.name in _MAPPED}


def _set_in(args) -> dict[str, Any]:
    """The mapped GRPOConfig settings the user changed from TRL's defaults (after
    ``__post_init__``: ``scale_rewards=True`` reads "group")."""
    defaults = _trl_defaults()
    defaults["scale_rewards"] = {True: "group", False: "none"}.get(defaults["scale_rewards"], defaults["scale_rewards"])
    return {k: getattr(args, k) for k in _MAPPED if getattr(args, k) != defaults[k]}


def config_params(args, objective, objective_params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The objective's parameters taken from ``GRPOConfig`` ``args``: each of
    ``epsilon``/``epsilon_high``/``beta``/``scale_rewards`` that differs from TRL's
    default becomes the objective's ``eps_low``/``eps_high``/``beta``/``scale`` (TRL's
    defaults leave the objective's own, e.g. GSPO's 3e-4 clip); ``objective_params`` win."""
    defaults = _objective_defaults(objective)
    params: dict[str, Any] = {}
    if defaults is not None:
        for trl_name, value in _set_in(args).items():
            name = _MAPPED[trl_name]
            if name in defaults and (name != "eps_low" or defaults[name] is not None):
                params[name] = value
    params.update(objective_params or {})
    return params


def unhonoured_settings(args, objective, objective_params: Mapping[str, Any] | None = None) -> list[str]:
    """``"name=value"`` for each GRPOConfig loss setting the objective does not honour."""
    if objective is None:
        return []
    defaults = _objective_defaults(objective)
    taken = set(config_params(args, objective, objective_params)) if defaults is not None else set()
    out = [f"loss_type={args.loss_type!r} (the loss is objective={getattr(objective, '__name__', objective)!r})"]
    changed = _set_in(args)
    for trl_name in ("epsilon", "epsilon_high", "scale_rewards"):
        if trl_name in changed and _MAPPED[trl_name] not in taken:
            out.append(f"{trl_name}={changed[trl_name]!r}")
    for name, neutral in _NEUTRAL.items():
        value = getattr(args, name, neutral)
        if name == "beta" and "beta" in taken:
            continue
        if value != neutral:
            out.append(f"{name}={value!r}")
    return out


def _group_shuffle(batch: dict, group_size: int) -> dict:
    """TRL's ``shuffle_sequence_dict`` over whole groups (consecutive ``group_size`` rows)."""
    n = len(next(v for v in batch.values() if v is not None))
    perm = (torch.randperm(n // group_size)[:, None] * group_size + torch.arange(group_size)[None, :]).flatten()

    def permute(v):
        if v is None or (isinstance(v, Tensor) and v.ndim == 0):
            return v
        if isinstance(v, Tensor):
            return v[perm.to(v.device)]
        return [v[i] for i in perm.tolist()]

    return {k: permute(v) for k, v in batch.items()}


class ExchangeGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose loss is an exchange objective (see the module docstring).

    Args (in addition to GRPOTrainer's):
        objective: catalog name, library target, ``loss_fn(logprobs, rollout)``, or
            ``None`` for TRL's own loss (``GRPOConfig.loss_type``).
        objective_params: hyperparameters for a named objective (override GRPOConfig's).
        learning_tax: also log ``tax/learning_tax`` (one extra backward pass per
            zero-credit part; needs ``exchange.paramspace``).
        dump_batches: a folder: write every batch there for ``exchange inspect``.
    """

    def __init__(
        self,
        *args: Any,
        objective: str | LossFn | None = "dapo",
        objective_params: Mapping[str, Any] | None = None,
        learning_tax: bool = False,
        dump_batches: str | None = None,
        **kwargs: Any,
    ) -> None:
        self._exchange_spec = objective
        self._exchange_params = objective_params
        self.exchange_learning_tax = learning_tax
        self.exchange_dump_batches = dump_batches
        self._exchange_dumped = 0
        super().__init__(*args, **kwargs)
        if objective is None:
            self.exchange_objective = None
        else:
            self.exchange_objective = resolve_objective(objective, config_params(self.args, objective, objective_params))
        for setting in unhonoured_settings(self.args, objective, objective_params):
            warnings.warn(f"ExchangeGRPOTrainer does not honour GRPOConfig.{setting}.", UserWarning, stacklevel=2)
        if objective is not None and self.args.per_device_train_batch_size % self.num_generations:
            raise InvalidArgument(
                f"per_device_train_batch_size={self.args.per_device_train_batch_size} is not a multiple of "
                f"num_generations={self.num_generations}: a micro-batch would hold part of a group, which has no "
                "baseline. Use a multiple (gradient accumulation and several processes are fine)."
            )
        from exchange.libraries.trl.callback import ExchangeCallback

        self.exchange_callback = ExchangeCallback().bind(self)
        self.add_callback(self.exchange_callback)

    # ----------------------------------------------------------- batch -> rollout
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._exchange_rewards_per_func = rewards_per_func  # [B, n_funcs], gathered
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        from exchange.libraries.trl.callback import add_batch_keys

        output = super()._generate_and_score_completions(inputs)
        return add_batch_keys(self, output, self._exchange_rewards_per_func)

    def _prepare_inputs(self, generation_batch):
        if self.exchange_objective is None or not self.model.training:
            return super()._prepare_inputs(generation_batch)
        from trl.trainer import grpo_trainer as G

        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            batch = G.split_pixel_values_by_grid(batch)
            batch = _group_shuffle(batch, self.num_generations)  # TRL: shuffle_sequence_dict (rows)
            batches = G.split_tensor_dict(batch, self.args.steps_per_generation)
            self._buffered_inputs = [G.unsplit_pixel_values_by_grid(b) for b in batches]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _exchange_rollout(self, inputs, per_token_logps: Tensor) -> Rollout:
        from exchange.libraries.trl.callback import rollout_of

        return rollout_of(inputs, per_token_logps.dtype, per_token_logps)

    # ----------------------------------------------------------------- the loss
    def _compute_loss(self, model, inputs):
        if self.exchange_objective is None:
            return super()._compute_loss(model, inputs)
        captured: list[Tensor] = []
        original = self._get_per_token_logps_and_entropies

        def capture(*a, **k):
            out = original(*a, **k)
            captured.append(out[0])
            return out

        self._get_per_token_logps_and_entropies = capture
        try:
            super()._compute_loss(model, inputs)  # TRL's metrics; its loss is dropped
        finally:
            self._get_per_token_logps_and_entropies = original
        per_token_logps = captured[-1]
        rollout = self._exchange_rollout(inputs, per_token_logps)
        loss = self.exchange_objective(per_token_logps, rollout)
        mode = "train" if self.model.training else "eval"
        if self.exchange_dump_batches:
            self._exchange_dump(mode, rollout, per_token_logps)
        if mode == "train":
            if self.exchange_learning_tax:
                self._exchange_learning_tax(model, rollout)
            loss = loss / self.current_gradient_accumulation_steps
        return loss

    def _exchange_dump(self, mode: str, rollout: Rollout, per_token_logps: Tensor) -> None:
        from pathlib import Path

        from exchange.core.batch_io import save_batch

        folder = Path(self.exchange_dump_batches)
        folder.mkdir(parents=True, exist_ok=True)
        save_batch(replace(rollout, logprobs=per_token_logps.detach()),
                   folder / f"{mode}-step{self.state.global_step:06d}-{self._exchange_dumped:04d}.pt")
        self._exchange_dumped += 1

    def _exchange_learning_tax(self, model, rollout: Rollout) -> None:
        try:
            from exchange.paramspace import learning_tax
        except ImportError:
            return
        tax = float(learning_tax(self.accelerator.unwrap_model(model), self.exchange_objective, rollout).tax)
        metrics = self._metrics["train"]
        if math.isfinite(tax):
            metrics[LEARNING_TAX].append(tax)
        else:  # a zero update (every group's reward std is 0): the share is 0/0
            metrics[LEARNING_TAX_SKIPPED].append(1.0)
