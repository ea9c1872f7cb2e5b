"""Train with any exchange objective inside TRL: ``ExchangeGRPOTrainer`` (trl==1.16.0).

    from exchange.libraries.trl.trainer import ExchangeGRPOTrainer
    trainer = ExchangeGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...),
                                  train_dataset=..., objective="dapo")
    trainer.train()

The trainer is TRL's ``GRPOTrainer`` (generation, rewards, reference model, logging,
optimizer, ``accelerate`` processes, gradient accumulation) with two changes:

- **The loss.** ``_compute_loss`` runs TRL's own ``_compute_loss`` (one forward pass;
  TRL logs ``entropy``, ``clip_ratio/*``, ``kl`` ... as always), keeps the log-probs of
  that forward pass and returns ``objective(logprobs, rollout)`` (plus its KL term and
  TRL's entropy bonus) instead of TRL's loss, normalised as TRL normalises its own under
  gradient accumulation (see below). The rollout is the
  micro-batch: completion ids and mask, each row's group and reward (TRL's weighted
  sum), old and reference log-probs. The objective computes its own advantages.
  ``objective=None`` keeps TRL's loss (then this class is GRPOTrainer plus
  :class:`~exchange.libraries.trl.callback.ExchangeCallback`).
- **Whole groups per micro-batch.** TRL shuffles the rows of a generation batch before
  splitting it into ``steps_per_generation`` micro-batches; this trainer shuffles whole
  groups instead, so every micro-batch holds whole groups. That needs
  ``per_device_train_batch_size % num_generations == 0`` (checked; the error names it).
  Several processes work (each process's slice of the generation batch is then whole
  groups too); DDP averages the processes' gradients, as for TRL's own loss.

Hyperparameters come from ``GRPOConfig`` under TRL's names (:func:`config_params`), where
the objective has the parameter: ``scale_rewards`` -> ``scale``,
``max_completion_length`` -> ``max_length`` and ``mask_truncated_completions`` ->
``mask_truncated`` always (TRL's value wins, defaults included); ``epsilon`` ->
``eps_low``, ``epsilon_high`` -> ``eps_high`` and ``beta`` -> ``beta`` when changed from
TRL's defaults (otherwise the objective keeps its own, e.g. DAPO's 0.28 or GSPO's 3e-4,
and a ``UserWarning`` names the value GRPOTrainer would use: :func:`differences`);
``objective_params`` win. Every other loss setting the objective cannot honour and that
is not at TRL's neutral value (``beta != 0`` without a KL term,
``importance_sampling_level``, ``delta``, ``top_entropy_quantile``,
``off_policy_mask_threshold``, ``multi_objective_aggregation``, ``use_vllm`` (its IS
correction), and ``loss_type`` when the user set it) is named in a
``UserWarning`` at construction.

As TRL applies them: the objective's KL regulariser (``beta``, ``use_bias_correction_kl``),
TRL's entropy bonus (``entropy_coef``, adaptive included), and for the dapo/cispo
families TRL's generation-batch token count as the normaliser under gradient
accumulation (:data:`GLOBAL_TOKEN_MEAN`); other objectives are divided by the
accumulation steps, as TRL divides grpo, bnpo and dr_grpo.

Truncated completions (``mask_truncated_completions``) stay in the rollout as data
(``Rollout.truncated``; :func:`~exchange.libraries.trl.callback.add_batch_keys`) and the
objective masks them after centring, as TRL does.

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

__all__ = ["ExchangeGRPOTrainer", "resolve_objective", "config_params", "differences", "unhonoured_settings"]

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


# TRL's name -> the exchange objective's parameter name. Clip widths and beta pass when
# the user changed them from TRL's default (a catalog objective keeps its source's own
# value otherwise, e.g. DAPO's 0.28 or GSPO's 3e-4, and a warning names the difference).
_MAPPED = {"epsilon": "eps_low", "epsilon_high": "eps_high", "beta": "beta"}
# Settings whose GRPOConfig value always wins, TRL's defaults included: they describe the
# run (the generation budget, the reward scaling, the truncation mask), not the objective.
_ALWAYS = {"scale_rewards": "scale", "max_completion_length": "max_length",
           "mask_truncated_completions": "mask_truncated", "use_bias_correction_kl": "bias_correction_kl"}
# Loss settings an exchange objective does not see, with TRL's neutral value.
_NEUTRAL = {
    "beta": 0.0,
    "importance_sampling_level": "token",
    "delta": None,
    "top_entropy_quantile": 1.0,
    "off_policy_mask_threshold": None,
    "multi_objective_aggregation": "sum_then_normalize",
    "use_vllm": False,  # vLLM generation: GRPOTrainer's IS correction (on by default there) is not applied
}


# Catalog families whose token-mean TRL takes over the whole generation batch
# (``num_items_in_batch``, loss types dapo and cispo), not over each micro-batch (bnpo).
GLOBAL_TOKEN_MEAN = ("dapo", "cispo", "cispo_verl")


def _objective_defaults(objective) -> dict[str, Any] | None:
    if not isinstance(objective, str) or ":" in objective:
        return None
    from exchange.objectives import SURGICAL, get

    # "<spec>+surgical" wraps <spec>'s loss and keeps its parameters (exchange.objectives.surgical)
    return dict(get(objective.removesuffix(f"+{SURGICAL}")).defaults)


def _trl_defaults() -> dict[str, Any]:
    import dataclasses

    from trl import GRPOConfig

    return {f.name: f.default for f in dataclasses.fields(GRPOConfig)}


def _effective(args, name: str):
    """A GRPOConfig value as TRL uses it (``epsilon_high=None`` is ``epsilon``)."""
    value = getattr(args, name)
    if name == "epsilon_high" and value is None:
        return args.epsilon
    return value


def _set_in(args) -> dict[str, Any]:
    """The clip/beta settings the user changed from TRL's defaults."""
    defaults = _trl_defaults()
    return {k: getattr(args, k) for k in _MAPPED if getattr(args, k) != defaults[k]}


def config_params(args, objective, objective_params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The objective's parameters taken from ``GRPOConfig`` ``args``.

    ``scale_rewards`` -> ``scale``, ``max_completion_length`` -> ``max_length``,
    ``mask_truncated_completions`` -> ``mask_truncated`` and ``use_bias_correction_kl`` ->
    ``bias_correction_kl`` always (TRL's value wins, its defaults included); ``epsilon``/``epsilon_high``/``beta`` -> ``eps_low``/``eps_high``/
    ``beta`` where they differ from TRL's defaults (the objective keeps its own otherwise:
    :func:`differences` names it). Only parameters the objective has; ``objective_params``
    win."""
    defaults = _objective_defaults(objective)
    params: dict[str, Any] = {}
    if defaults is not None:
        for trl_name, name in _ALWAYS.items():
            value = getattr(args, trl_name)
            if value is None or (name in ("mask_truncated", "bias_correction_kl") and not value):
                continue  # off (or unset): the objective's own default is the same
            if name in defaults:
                params[name] = float(value) if name == "max_length" else value
        for trl_name, value in _set_in(args).items():
            name = _MAPPED[trl_name]
            if name in defaults and (name != "eps_low" or defaults[name] is not None):
                params[name] = _effective(args, trl_name)
    params.update(objective_params or {})
    return params


def differences(args, objective, objective_params: Mapping[str, Any] | None = None) -> list[str]:
    """``"eps_high=0.28 (GRPOConfig.epsilon_high gives 0.2)"`` for each clip width or beta
    where the objective trains with its own value, not the one GRPOTrainer would use."""
    defaults = _objective_defaults(objective)
    if defaults is None:
        return []
    taken = config_params(args, objective, objective_params)
    out = []
    for trl_name, name in _MAPPED.items():
        if name in defaults and name not in taken and defaults[name] is not None:
            trl_value = _effective(args, trl_name)
            if defaults[name] != trl_value:
                out.append(f"{name}={defaults[name]!r} (GRPOConfig.{trl_name} gives {trl_value!r})")
    return out


def unhonoured_settings(args, objective, objective_params: Mapping[str, Any] | None = None) -> list[str]:
    """``"name=value"`` for each GRPOConfig loss setting the objective does not honour."""
    if objective is None:
        return []
    defaults = _objective_defaults(objective)
    taken = set(config_params(args, objective, objective_params)) if defaults is not None else set()
    out = []
    if args.loss_type != _trl_defaults()["loss_type"]:  # set by the user: say it is not the loss
        out.append(f"loss_type={args.loss_type!r} (the loss is objective={getattr(objective, '__name__', objective)!r})")
    changed = _set_in(args)
    for trl_name in ("epsilon", "epsilon_high"):
        if trl_name in changed and _MAPPED[trl_name] not in taken:
            out.append(f"{trl_name}={changed[trl_name]!r}")
    for trl_name, name in _ALWAYS.items():
        neutral = {"scale_rewards": "group", "max_completion_length": None, "mask_truncated_completions": False,
                   "use_bias_correction_kl": None}[trl_name]
        value = getattr(args, trl_name)
        if name not in taken and neutral is not None and value != neutral:
            out.append(f"{trl_name}={value!r}")
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
    # on the CPU, as TRL's own shuffle draws it: the same generator stream on every device
    perm = (torch.randperm(n // group_size, device="cpu")[:, None] * group_size
            + torch.arange(group_size, device="cpu")[None, :]).flatten()

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
        from exchange.libraries.trl.contact import require_contacts

        require_contacts()  # a TRL whose private methods moved fails here, naming them
        self._exchange_spec = objective
        self._exchange_params = objective_params
        self.exchange_learning_tax = learning_tax
        self.exchange_dump_batches = dump_batches
        self._exchange_dumped = 0
        super().__init__(*args, **kwargs)
        self.exchange_regularizer = None
        if objective is None:
            self.exchange_objective = None
        else:
            params = config_params(self.args, objective, objective_params)
            self.exchange_objective = resolve_objective(objective, params)
            if _objective_defaults(objective) is not None:
                from exchange.objectives import SURGICAL, get

                # the surgical arm keeps its objective's regulariser (the transform touches
                # only the shared-event coefficients of the reward-driven loss)
                self.exchange_regularizer = get(objective.removesuffix(f"+{SURGICAL}")).bind_regularizer(**params)
        # objectives whose normaliser TRL takes over the generation batch (loss_type dapo, cispo)
        self._exchange_global_tokens = (isinstance(objective, str) and ":" not in objective
                                        and objective.split("+")[0] in GLOBAL_TOKEN_MEAN)
        for setting in unhonoured_settings(self.args, objective, objective_params):
            warnings.warn(f"ExchangeGRPOTrainer does not honour GRPOConfig.{setting}.", UserWarning, stacklevel=2)
        for setting in differences(self.args, objective, objective_params):
            warnings.warn(f"ExchangeGRPOTrainer trains objective={objective!r} with {setting}: the objective's own "
                          "value; set it in GRPOConfig or objective_params to match GRPOTrainer.", UserWarning, stacklevel=2)
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
        self._exchange_completion_ids = completion_ids_list  # this process's, unpadded
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        from exchange.libraries.trl.callback import add_batch_keys

        output = super()._generate_and_score_completions(inputs)
        return add_batch_keys(self, output, self._exchange_rewards_per_func, self._exchange_completion_ids)

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
        mode = "train" if self.model.training else "eval"
        entropy_coef = self._exchange_entropy_coef()  # read before TRL's adaptive controller moves it
        captured: list[tuple] = []
        original = self._get_per_token_logps_and_entropies

        def capture(*a, **k):
            out = original(*a, **k)
            captured.append(out)
            return out

        self._get_per_token_logps_and_entropies = capture
        try:
            super()._compute_loss(model, inputs)  # TRL's metrics; its loss is dropped
        finally:
            self._get_per_token_logps_and_entropies = original
        per_token_logps, entropies = captured[-1][0], captured[-1][1]
        rollout = self._exchange_rollout(inputs, per_token_logps)
        loss = self.exchange_objective(per_token_logps, rollout)
        if self.exchange_regularizer is not None:  # the objective's KL (beta), as TRL adds its own
            loss = loss + self.exchange_regularizer(per_token_logps, rollout)
        if self.exchange_dump_batches:
            self._exchange_dump(mode, rollout, per_token_logps)
        mask = inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self._exchange_global_tokens:
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
            entropy = (entropies * mask).sum() / mask.sum().clamp(min=1.0) / accumulation
            loss = loss - entropy_coef * entropy
        if mode == "train" and self.exchange_learning_tax:
            self._exchange_learning_tax(model, rollout)
        return loss

    def _exchange_entropy_coef(self) -> float:
        """The entropy coefficient TRL applies to this micro-batch (0 when its bonus is off)."""
        if not self._entropy_bonus_enabled:
            return 0.0
        if self.use_adaptive_entropy and self._last_world_entropy > self.args.entropy_target:
            return 0.0
        return float(self.entropy_coef)

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
