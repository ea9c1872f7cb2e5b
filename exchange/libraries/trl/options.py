"""The ``trl:`` adapter's options (trl==1.16.0): TRL's loss types, the ``GRPOConfig``
fields an adapter user may set, TRL's own defaults for them, and their validation by a
real ``GRPOConfig`` (its ``__post_init__`` resolves ``scale_rewards=True/False`` and
``epsilon_high=None`` exactly as in training). Used by the adapter
(:mod:`exchange.libraries.trl.loss`, which re-exports the public names) and by its
derivation (:mod:`exchange.libraries.trl.derivation`).
"""

from __future__ import annotations

from typing import Any, Mapping

from exchange.errors import InvalidArgument
from exchange.libraries.versions import parse_params

__all__ = ["LOSS_TYPES", "PARAMS", "defaults", "grpo_config"]

# Every branch of GRPOTrainer._compute_loss in trl 1.16.0 (tests check this list
# against the installed source).
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "luspo")

# The GRPOConfig fields an adapter user may set with --param key=value.
PARAMS = (
    "epsilon",
    "epsilon_high",
    "delta",
    "importance_sampling_level",
    "scale_rewards",
    "top_entropy_quantile",
    "mask_truncated_completions",
    "multi_objective_aggregation",
    "max_completion_length",
    "beta",
    "use_bias_correction_kl",
    "sapo_temperature_pos",
    "sapo_temperature_neg",
    "vespo_k_pos",
    "vespo_lambda_pos",
    "vespo_k_neg",
    "vespo_lambda_neg",
    "off_policy_mask_threshold",
    "steps_per_generation",
    "gradient_accumulation_steps",
    "per_device_train_batch_size",
    "num_generations",
    "num_iterations",
    "use_vllm",
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_clip_max",
)

# String options TRL checks only deep inside training (or not at all).
_CHOICES = {
    "importance_sampling_level": ("token", "sequence"),
    "scale_rewards": ("group", "batch", "none", "True", "False"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "vllm_importance_sampling_mode": ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
}


def defaults() -> dict[str, Any]:
    """TRL's own defaults (``GRPOConfig`` dataclass fields) for :data:`PARAMS`."""
    from trl import GRPOConfig

    fields = GRPOConfig.__dataclass_fields__
    return {name: fields[name].default for name in PARAMS}


def grpo_config(target: str, loss_type: str, params: Mapping[str, Any] | None) -> tuple[dict[str, Any], Any]:
    """``(options, config)``: ``params`` parsed over TRL's :func:`defaults` (strings are
    parsed, e.g. ``{"epsilon": "0.3"}``), the string choices TRL checks only deep inside
    training checked here, and the validated ``GRPOConfig``; any refusal is
    :class:`~exchange.errors.InvalidArgument` naming the target."""
    if loss_type not in LOSS_TYPES:
        raise InvalidArgument(f"target={target!r}: loss_type={loss_type!r} is not one of {', '.join(LOSS_TYPES)}.")
    options = parse_params(target, params, defaults())
    for key, allowed in _CHOICES.items():
        if str(options[key]) not in allowed:
            raise InvalidArgument(f"target={target!r}: {key}={options[key]!r} is not one of {', '.join(allowed)}.")
    return options, _config(target, loss_type, options)


def _config(target: str, loss_type: str, options: Mapping[str, Any]):
    """A validated ``GRPOConfig``; TRL's ValueError becomes InvalidArgument."""
    import warnings

    from trl import GRPOConfig

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TrainingArguments deprecation chatter
            return GRPOConfig(
                output_dir="exchange-trl-adapter",
                report_to="none",
                use_cpu=True,
                loss_type=loss_type,
                **options,
            )
    except (ValueError, TypeError) as err:
        raise InvalidArgument(f"target={target!r}: GRPOConfig rejected the parameters: {err}") from None
