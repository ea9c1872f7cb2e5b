"""How ``ExchangeGRPOTrainer`` reads a ``GRPOConfig``: each TRL loss setting is applied
as GRPOTrainer applies it, or refused at construction (trl==1.16.0).

TRL's values win, its defaults included (a TRL user who writes a TRL config gets TRL's
behaviour): ``epsilon`` -> ``eps_low``, ``epsilon_high`` -> ``eps_high`` (TRL's cispo
cap is absolute: ``eps_high = epsilon_high - 1``), ``beta`` -> ``beta``,
``sapo_temperature_pos/neg`` -> ``tau_pos/neg``, ``scale_rewards`` -> ``scale``,
``max_completion_length`` -> ``max_length``, ``mask_truncated_completions`` ->
``mask_truncated``, ``use_bias_correction_kl`` -> ``bias_correction_kl``, wherever the
objective has the parameter; a TRL ``loss_type`` whose catalog objective is named fixes
what the loss type implies (:data:`LOSS_TYPE_PARAMS`: sapo's per-sequence mean);
``objective_params`` win over all of these. ``trl_defaults=False`` (the lab, whose
experiments are defined by their catalog objectives) passes the clip widths, ``beta``
and the SAPO temperatures only where they differ from TRL's defaults
(:func:`differences` names what the objective keeps).

TRL's per-token factors (:func:`factor_params`, always TRL's values) become parameters
that every factored catalog family has (``exchange.objectives._factored.token_factors``),
each reproducing trl 1.16's ``_compute_loss`` line for line:

- ``top_entropy_quantile < 1`` -> ``top_entropy_quantile``: tokens whose entropy (TRL's,
  from the loss's forward pass) is below the ``1 - q`` quantile of the micro-batch's
  loss-mask tokens, pooled over every process, leave the surrogate (not the
  normaliser); the entropy bonus is taken over the tokens kept, as TRL's;
- ``delta`` -> ``delta`` (the PPO-clip families grpo, bnpo, dr_grpo, dapo, gspo): the
  unclipped ratio capped at ``delta`` before the min with the clipped term;
- ``off_policy_mask_threshold`` -> ``off_policy_mask``: a response with ``A < 0`` whose
  mean ``log pi_sampler - log pi`` over its tokens exceeds the threshold leaves the
  surrogate; ``pi_sampler`` is vLLM's log-probs with ``use_vllm``
  (``off_policy_mask_sampler``), the old log-probs otherwise;
- ``use_vllm`` with ``vllm_importance_sampling_correction`` -> ``sampler_is`` (the mode),
  ``sampler_is_min`` / ``sampler_is_max``: each token's surrogate times TRL's truncated
  or masked ``pi_old / pi_vLLM`` (per token, or the product over the response), from
  ``Rollout.sampling_logprobs`` (vLLM's ``sampling_per_token_logps``).

Applied by the trainer itself: ``entropy_coef`` (adaptive included),
``steps_per_generation`` / ``num_iterations`` (TRL's buffering and old log-probs), the
generation batch's advantages (``scale_rewards: batch`` over the whole batch, every
process; ``multi_objective_aggregation="normalize_then_sum"``: TRL's per-function group
standardisation, then the batch's), gradient accumulation normalisers. Refused
(:func:`refused_settings`, an ``InvalidArgument`` naming each setting and its fix):
what the chosen objective cannot apply exactly: a per-token factor for an objective
without the parameter (a callable, clip_cov, kl_cov; ``delta`` for a family without
TRL's PPO clip), ``normalize_then_sum`` for an objective with its own advantage
estimator, ``importance_sampling_level='sequence'`` for a token-ratio objective, ``beta``
without a KL term, a clip width or temperature the objective does not have, TRL's cispo
cap at or below 1. A ``loss_type`` with no catalog objective (vespo, luspo) is refused
by ``ExchangeGRPOTrainer`` itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from exchange.errors import InvalidArgument

__all__ = ["FACTOR_SETTINGS", "GLOBAL_TOKEN_MEAN", "LOSS_TYPE_PARAMS", "NO_CATALOG_OBJECTIVE", "advantage_hook",
           "batching_of", "config_params", "differences", "factor_params", "pathway_base", "refused_settings"]

# GRPOConfig name -> the objective's parameter (TRL's value wins where the objective has it).
TRL_TO_PARAM = {"epsilon": "eps_low", "epsilon_high": "eps_high", "beta": "beta",
                "sapo_temperature_pos": "tau_pos", "sapo_temperature_neg": "tau_neg"}
# Settings that describe the run (the budget, the reward scaling, the truncation mask):
# GRPOConfig's value always wins, in every mode.
RUN_TO_PARAM = {"scale_rewards": "scale", "max_completion_length": "max_length",
                "mask_truncated_completions": "mask_truncated", "use_bias_correction_kl": "bias_correction_kl"}
# TRL loss_type -> what it fixes in its catalog objective (tests/libraries/trl/test_loss.py
# checks each pair per token): TRL's sapo takes the per-sequence mean, as its grpo does.
LOSS_TYPE_PARAMS: dict[str, dict[str, Any]] = {
    "grpo": {}, "bnpo": {}, "dr_grpo": {}, "dapo": {}, "cispo": {}, "sapo": {"loss_agg_mode": "seq-mean-token-mean"},
}
NO_CATALOG_OBJECTIVE = ("vespo", "luspo")  # TRL loss types with no catalog objective
# Catalog families whose token-mean TRL takes over the whole generation batch
# (``num_items_in_batch``, loss types dapo and cispo), not over each micro-batch (bnpo).
GLOBAL_TOKEN_MEAN = ("dapo", "cispo", "cispo_verl")
# TRL's per-token factors: the GRPOConfig setting, the catalog parameter it becomes
# (exchange.objectives._factored.token_factors; delta: ppo_clip) and who has it.
_FACTORED = "a factored catalog family (grpo, bnpo, dr_grpo, dapo, cispo, sapo, gspo, ...)"
FACTOR_SETTINGS: dict[str, tuple[str, str]] = {
    "top_entropy_quantile": ("top_entropy_quantile", _FACTORED),
    "delta": ("delta", "a PPO-clip family with TRL's two-sided clip (grpo, bnpo, dr_grpo, dapo, gspo)"),
    "off_policy_mask_threshold": ("off_policy_mask", _FACTORED),
    "vllm_importance_sampling_correction": ("sampler_is", _FACTORED),
}


def base_of(objective) -> str | None:
    """The catalog family of a catalog spec (``"dapo+surgical"`` -> ``"dapo"``); None otherwise."""
    if not isinstance(objective, str) or ":" in objective:
        return None
    return objective.split("+")[0]


def objective_defaults(objective) -> dict[str, Any] | None:
    """The parameters (with defaults) of a catalog spec; None for a callable or library target."""
    base = base_of(objective)
    if base is None or base in NO_CATALOG_OBJECTIVE:
        return None
    from exchange.objectives import get

    return dict(get(pathway_base(objective)).defaults)


def pathway_base(objective: str) -> str:
    """The catalog spec a pathway arm wraps (``"dapo+surgical"`` -> ``"dapo"``,
    ``"gspo+coupling_surgical"`` -> ``"gspo"``; any other spec is returned as it is): the
    arm keeps that spec's parameters and regulariser (exchange.objectives.surgical,
    exchange.objectives.coupling). ``get`` knows neither suffix, so both are stripped here."""
    from exchange.objectives import SURGICAL

    for suffix in (f"+{SURGICAL}", "+coupling_surgical"):
        if objective.endswith(suffix):
            return objective.removesuffix(suffix)
    return objective


def trl_defaults() -> dict[str, Any]:
    from trl import GRPOConfig

    return {f.name: f.default for f in dataclasses.fields(GRPOConfig)}


def _effective(args, name: str):
    """A GRPOConfig value as TRL uses it (``epsilon_high=None`` is ``epsilon``)."""
    value = getattr(args, name)
    if name == "epsilon_high" and value is None:
        return args.epsilon
    return value


def _changed(args) -> dict[str, Any]:
    """The clip / beta / temperature settings the user changed from TRL's defaults."""
    defaults = trl_defaults()
    return {k: _effective(args, k) for k in TRL_TO_PARAM if getattr(args, k) != defaults[k]}


def factor_params(args) -> dict[str, Any]:
    """The catalog parameters of TRL's per-token factors that ``args`` turns on (TRL's
    values: a setting left at its neutral value adds nothing):
    ``top_entropy_quantile < 1`` -> ``top_entropy_quantile``; ``delta`` -> ``delta``;
    ``off_policy_mask_threshold`` -> ``off_policy_mask`` (with vLLM, against its sampling
    log-probs: ``off_policy_mask_sampler``); ``use_vllm`` with
    ``vllm_importance_sampling_correction`` -> ``sampler_is`` (the mode),
    ``sampler_is_min`` / ``sampler_is_max`` (the clip bounds)."""
    out: dict[str, Any] = {}
    if args.top_entropy_quantile != 1.0:
        out["top_entropy_quantile"] = float(args.top_entropy_quantile)
    if args.delta is not None:
        out["delta"] = float(args.delta)
    if args.off_policy_mask_threshold is not None:
        out["off_policy_mask"] = float(args.off_policy_mask_threshold)
        if args.use_vllm:  # TRL: "when using vLLM, prioritize sampling_per_token_logps"
            out["off_policy_mask_sampler"] = True
    if args.use_vllm and args.vllm_importance_sampling_correction:
        out.update(sampler_is=args.vllm_importance_sampling_mode, sampler_is_min=args.vllm_importance_sampling_clip_min,
                   sampler_is_max=args.vllm_importance_sampling_clip_max)
    return out


def _factor_setting(args, setting: str) -> str:
    """``setting=value`` as the user wrote it in GRPOConfig (the vLLM correction with its mode)."""
    if setting == "vllm_importance_sampling_correction":
        return (f"vllm_importance_sampling_correction=True (use_vllm=True, "
                f"vllm_importance_sampling_mode={args.vllm_importance_sampling_mode!r})")
    return f"{setting}={getattr(args, setting)!r}"


def _cispo_cap(args, objective) -> bool:
    """TRL's cispo caps the ratio at ``epsilon_high`` itself; the catalog's at ``1 + eps_high``."""
    return base_of(objective) == "cispo" and args.loss_type == "cispo"


def config_params(args, objective, objective_params: Mapping[str, Any] | None = None,
                  trl_defaults: bool = True) -> dict[str, Any]:
    """The objective's parameters taken from ``GRPOConfig`` ``args`` (module docstring).
    Only parameters the objective has; ``objective_params`` win."""
    defaults = objective_defaults(objective)
    params: dict[str, Any] = {}
    if defaults is not None:
        for trl_name, name in RUN_TO_PARAM.items():
            value = getattr(args, trl_name)
            if value is None or (name in ("mask_truncated", "bias_correction_kl") and not value):
                continue  # off (or unset): the objective's own default is the same
            if name in defaults:
                params[name] = float(value) if name == "max_length" else value
        values = {k: _effective(args, k) for k in TRL_TO_PARAM} if trl_defaults else _changed(args)
        for trl_name, value in values.items():
            name = TRL_TO_PARAM[trl_name]
            if name not in defaults or (name == "eps_low" and defaults[name] is None):
                continue  # cispo has no lower bound, as TRL's cispo
            params[name] = value - 1.0 if name == "eps_high" and _cispo_cap(args, objective) else value
        for name, value in factor_params(args).items():  # TRL's per-token factors, its values
            if name in defaults:
                params[name] = value
        if base_of(objective) == args.loss_type:
            params.update(LOSS_TYPE_PARAMS.get(args.loss_type, {}))
    params.update(objective_params or {})
    return params


def differences(args, objective, objective_params: Mapping[str, Any] | None = None,
                trl_defaults: bool = True) -> list[str]:
    """``"eps_high=0.28 (GRPOConfig.epsilon_high gives 0.2)"`` for each clip width, beta or
    temperature where the objective trains with its own value (``trl_defaults=False``)."""
    defaults = objective_defaults(objective)
    if defaults is None:
        return []
    taken = config_params(args, objective, objective_params, trl_defaults)
    out = []
    for trl_name, name in TRL_TO_PARAM.items():
        if name in defaults and name not in taken and defaults[name] is not None:
            trl_value = _effective(args, trl_name)
            if defaults[name] != trl_value:
                out.append(f"{name}={defaults[name]!r} (GRPOConfig.{trl_name} gives {trl_value!r})")
    return out


def advantage_hook(objective) -> Callable | None:
    """The objective's advantage estimator when it is TRL's (group mean, optional std,
    a pure function of the rewards): the trainer then computes the advantages over the
    whole generation batch, as TRL does, and hands them over as ``Rollout.advantages``."""
    base = base_of(objective)
    if base is None or base in NO_CATALOG_OBJECTIVE:
        return None
    from exchange.objectives import get
    from exchange.objectives.grpo import centred_advantages, scaled_advantages

    factors = get(base).factors
    if factors is None or factors.advantages not in (scaled_advantages, centred_advantages):
        return None
    return factors.advantages


def batching_of(objective, requested: str | None) -> str:
    """``"rows"``: TRL's own row-shuffled micro-batches (a plain catalog family whose
    advantages the trainer computes over the generation batch: per-micro-batch normalisers
    are then TRL's); ``"groups"``: whole groups per micro-batch (needed by transforms,
    the surgical arm, callables and objectives with their own estimator)."""
    rows_ok = isinstance(objective, str) and "+" not in objective and advantage_hook(objective) is not None
    if requested is None:
        return "rows" if rows_ok else "groups"
    if requested not in ("rows", "groups"):
        raise InvalidArgument(f"batching={requested!r} is not one of 'rows', 'groups'.")
    if requested == "rows" and not rows_ok:
        raise InvalidArgument(
            f"batching='rows' with objective={objective!r}: row-shuffled micro-batches split groups, and this "
            "objective needs whole groups (a transform, a callable, or its own advantage estimator). "
            "Use batching='groups'.")
    return requested


def refused_settings(args, objective, objective_params: Mapping[str, Any] | None = None,
                     trl_defaults: bool = True) -> list[str]:
    """``"name=value: why; fix"`` for each GRPOConfig setting the trainer cannot apply
    exactly with ``objective`` (empty: every setting is applied)."""
    if objective is None:
        return []
    name = getattr(objective, "__name__", objective)
    defaults = objective_defaults(objective)
    taken = config_params(args, objective, objective_params, trl_defaults) if defaults is not None else {}
    has = (lambda p: p in defaults) if defaults is not None else (lambda p: False)
    out = []
    factors = factor_params(args)
    modes = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
    if "sampler_is" in factors and factors["sampler_is"] not in modes:
        out.append(f"vllm_importance_sampling_mode={factors['sampler_is']!r} is not one of {', '.join(modes)} (TRL's "
                   "four, which it checks only inside the first training step); fix the spelling")
        factors.pop("sampler_is")
    for setting, (param, who) in FACTOR_SETTINGS.items():
        if param in factors and not has(param):
            out.append(f"{_factor_setting(args, setting)}: objective {name!r} has no {param} parameter, which applies "
                       f"it as TRL does; use {who}, or objective=None to train TRL's own loss")
    if args.multi_objective_aggregation not in ("sum_then_normalize", "normalize_then_sum"):
        out.append(f"multi_objective_aggregation={args.multi_objective_aggregation!r} is not one of "
                   "'sum_then_normalize', 'normalize_then_sum' (TRL's two); fix the spelling")
    elif args.multi_objective_aggregation != "sum_then_normalize" and advantage_hook(objective) is None:
        out.append(f"multi_objective_aggregation={args.multi_objective_aggregation!r}: objective {name!r} has its own "
                   "advantage estimator (of the weighted reward sum), while TRL standardises each reward function "
                   "first; use a catalog family with TRL's estimator (grpo, dapo, ...), 'sum_then_normalize', or "
                   "objective=None")
    from exchange.objectives import get

    sequence_level = defaults is not None and getattr(get(base_of(objective)).factors, "clip_level", None) == "sequence"
    if args.importance_sampling_level == "sequence" and not sequence_level:
        out.append(f"importance_sampling_level='sequence': objective {name!r} uses token ratios; use "
                   "objective='gspo' (TRL's grpo with sequence-level ratios, equal per token), or "
                   "importance_sampling_level='token'")
    if args.beta != 0.0 and "beta" not in taken:
        out.append(f"beta={args.beta!r}: objective {name!r} has no KL term taking it; set beta=0.0, or use "
                   "objective='grpo' (its KL term is TRL's)")
    changed = _changed(args)
    for trl_name in ("epsilon", "epsilon_high", "sapo_temperature_pos", "sapo_temperature_neg"):
        if trl_name in changed and not has(TRL_TO_PARAM[trl_name]):
            out.append(f"{trl_name}={getattr(args, trl_name)!r}: objective {name!r} has no such parameter; "
                       f"leave {trl_name} at TRL's default, or choose an objective that has it")
    if _cispo_cap(args, objective) and "eps_high" not in (objective_params or {}) and _effective(args, "epsilon_high") <= 1:
        out.append(f"epsilon_high={_effective(args, 'epsilon_high')!r} with loss_type='cispo': TRL caps the ratio at "
                   "epsilon_high itself (min(r, epsilon_high)), a cap at or below 1 that the catalog cispo "
                   "(cap 1 + eps_high > 1) does not take; set epsilon_high > 1 (TRL's docs use 5.0)")
    if args.scale_rewards != "group" and not has("scale") and advantage_hook(objective) is None:
        out.append(f"scale_rewards={args.scale_rewards!r}: objective {name!r} has its own advantage estimator; "
                   "leave scale_rewards='group'")
    if args.mask_truncated_completions and not has("mask_truncated"):
        out.append(f"mask_truncated_completions=True: objective {name!r} cannot mask truncated responses after "
                   "centring; use a factored objective (grpo, dapo, ...) or set it to False")
    return out
