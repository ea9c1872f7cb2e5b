"""The loss a TRL recipe trains with: ``exchange check --trl-config recipe.yaml`` (trl==1.16.0).

A recipe is what ``trl grpo --config recipe.yaml`` (TRL's ``TrlParser``) reads: a YAML
mapping whose keys are ``GRPOConfig`` fields, mixed with ``ScriptArguments`` /
``ModelConfig`` keys (``model_name_or_path``, ``dataset_name``, ...). It is parsed by
``TrlParser`` itself, so a misspelt key (``epsilon_hihg``) is an error naming it. A
``run_llm.py`` recipe (it names an ``experiment``) trains each arm's exchange objective:
``exchange check --trl-config`` checks those (:func:`parse_recipe`). The GRPOConfig fields build a real ``trl.GRPOConfig`` (its ``__post_init__``
resolves ``scale_rewards=True``, ``epsilon_high=None`` ... as in training), and the loss
is the TRL adapter ``trl:<loss_type>`` with every loss setting of that config (vLLM's
importance-sampling correction included, :func:`sampler_notes`):

    from exchange.libraries.trl.recipe import config_target, loss_of_config
    target, params = config_target("recipe.yaml")     # or a GRPOConfig object
    loss_fn = loss_of_config(GRPOConfig(loss_type="grpo", beta=0.04))
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from exchange.core.vocabulary import FACETS, PROPERTY_LETTERS, PROPERTY_NAMES
from exchange.errors import InvalidArgument
from exchange.libraries.versions import require

__all__ = ["RUN_LLM_KEYS", "config_target", "load_config", "loss_of_config", "parse_recipe", "present_regularizers",
           "recipe_mechanisms", "sampler_notes", "schedule_note"]


# run_llm.py's own options (experiments/llm/run_llm.py, LLMArguments): allowed in a
# recipe next to TRL's; tests/libraries/trl/test_recipe.py keeps the two lists equal.
RUN_LLM_KEYS = ("experiment", "model", "model_config", "data", "out", "device", "sft_steps", "sft_lr",
                "sft_batch", "seeds", "arms", "time_budget_s")


def _parse_recipe(path: Path):
    """``(GRPOConfig, yaml data)`` of a recipe, parsed by TRL's own ``TrlParser`` as
    ``trl grpo --config`` does: a key that is no ``ScriptArguments``/``GRPOConfig``/
    ``ModelConfig`` field (nor run_llm.py's own option) is an error naming it."""
    import yaml
    from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:  # the user's file: one line naming it, not a bug
        raise InvalidArgument(f"--trl-config {str(path)!r}: not valid YAML ({' '.join(str(err).split())}); "
                              "fix the file (trl grpo --config reads the same YAML).") from err
    if not isinstance(data, dict):
        raise InvalidArgument(f"--trl-config {str(path)!r}: not a YAML mapping of GRPOConfig fields.")
    if "experiment" in data:  # a run_llm.py recipe: its own options are not TRL's
        import tempfile

        trl_part = {k: v for k, v in data.items() if k not in RUN_LLM_KEYS}
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump(trl_part, f)
        parse_path = Path(f.name)
    else:
        parse_path = path
    # checked on this machine's CPU: the precision and reporting settings do not change the loss
    overrides = ["--use_cpu", "true", "--bf16", "false", "--fp16", "false", "--report_to", "none"]
    if "output_dir" not in data:
        overrides += ["--output_dir", "exchange-check"]
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TrainingArguments deprecation chatter
            parsed = TrlParser((ScriptArguments, GRPOConfig, ModelConfig)).parse_args_and_config(
                args=["--config", str(parse_path), *overrides], return_remaining_strings=True)
    except (TypeError, ValueError) as err:
        raise InvalidArgument(f"--trl-config {str(path)!r}: TRL's parser rejects the recipe: {err}") from None
    except SystemExit:  # argparse's own exit on a bad value
        raise InvalidArgument(f"--trl-config {str(path)!r}: TRL's parser rejects a value (see above).") from None
    finally:
        if parse_path != path:
            parse_path.unlink()
    unknown = [a[2:] for a in parsed[-1] if isinstance(a, str) and a.startswith("--")]
    if unknown:
        raise InvalidArgument(
            f"--trl-config {str(path)!r}: unknown key(s) {', '.join(unknown)}: not a field of TRL's "
            "ScriptArguments, GRPOConfig or ModelConfig (TrlParser rejects them). Fix the spelling."
        )
    config = parsed[1]
    from exchange.libraries.trl.loss import LOSS_TYPES

    if config.loss_type not in LOSS_TYPES:  # TRL itself finds out only inside the first training step
        import difflib

        near = difflib.get_close_matches(str(config.loss_type), LOSS_TYPES, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
        raise InvalidArgument(f"--trl-config {str(path)!r}: loss_type={config.loss_type!r} is not a loss type of "
                              f"trl 1.16's GRPOTrainer; {hint}valid: {', '.join(LOSS_TYPES)}.")
    return config, data


def load_config(source: Any):
    """A ``GRPOConfig`` from a GRPOConfig, a mapping, or a YAML recipe path (parsed by
    TRL's ``TrlParser``; unknown keys are errors that name them)."""
    require("trl")
    from trl import GRPOConfig

    if isinstance(source, GRPOConfig):
        return source
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise InvalidArgument(f"--trl-config {str(path)!r}: no such file.")
        return _parse_recipe(path)[0]
    if not isinstance(source, dict):
        raise InvalidArgument(f"config={source!r} is neither a GRPOConfig, a mapping nor a YAML path.")
    fields = {f.name for f in dataclasses.fields(GRPOConfig) if f.init}
    unknown = sorted(set(source) - fields)
    if unknown:
        raise InvalidArgument(f"config: unknown GRPOConfig field(s) {', '.join(unknown)}. Fix the spelling.")
    kwargs = dict(source)
    kwargs.setdefault("output_dir", "exchange-check")
    kwargs["report_to"] = "none"
    kwargs["use_cpu"] = True
    kwargs.pop("bf16", None), kwargs.pop("fp16", None)
    try:
        return GRPOConfig(**kwargs)
    except (TypeError, ValueError) as err:
        raise InvalidArgument(f"GRPOConfig rejects the recipe: {err}") from err


def parse_recipe(path: Any) -> tuple[Any, dict[str, Any]]:
    """``(GRPOConfig, the YAML mapping)`` of a recipe file, parsed by ``TrlParser``.
    A run_llm.py recipe names an ``experiment``: its arms' objectives are what it trains
    (``exchange check --trl-config`` reads them; the lab is above this layer)."""
    require("trl")
    p = Path(path)
    if not p.is_file():
        raise InvalidArgument(f"--trl-config {str(p)!r}: no such file.")
    return _parse_recipe(p)


def sampler_notes(config) -> list[str]:
    """What the recipe's vLLM settings make the loss read, for the report's title: TRL's
    importance-sampling correction weights each token by ``pi_old / pi_vLLM`` (its own
    event's ratio in the ``token_*`` modes; the product over the response in the
    ``sequence_*`` modes, a per-response weight: M5), and the off-policy mask compares
    with vLLM's log-probs. The check draws them from its cases' sampler log-probs, one per
    event (``exchange.checker.cases.SAMPLER_RATIOS``), as vLLM's are one per context."""
    if not getattr(config, "use_vllm", False):
        return []
    out = []
    if config.vllm_importance_sampling_correction:
        mode = config.vllm_importance_sampling_mode
        what = ("each token's own pi_old/pi_vLLM, a function of its event" if mode.startswith("token")
                else "the product of pi_old/pi_vLLM over the response, a per-response weight (M5)")
        bounds = f"[{config.vllm_importance_sampling_clip_min}, {config.vllm_importance_sampling_clip_max}]"
        out.append(f"vLLM's importance-sampling correction {mode} {bounds}: {what}")
    if config.off_policy_mask_threshold is not None:
        out.append("the off-policy mask measured from vLLM's log-probs")
    if out:
        out.append("vLLM's log-probs drawn per event by the check (exchange.checker.cases.SAMPLER_RATIOS)")
    return out


def present_regularizers(config) -> list[str]:
    """The recipe's terms outside the coefficient model, reported as present (THEORY.md
    section 1): TRL's entropy bonus is the entropy of the whole next-token distribution
    (its ``entropies`` come from the logits), a whole-distribution regulariser, not a
    mechanism; the verdicts are those of the policy loss (with its KL term)."""
    out = []
    if getattr(config, "entropy_coef", 0.0) or getattr(config, "use_adaptive_entropy", False):
        what = "adaptive, " if getattr(config, "use_adaptive_entropy", False) else ""
        out.append(f"entropy_coef={config.entropy_coef!r} ({what}TRL's full-distribution entropy bonus: present, "
                   "outside the coefficient model, THEORY.md section 1)")
    return out


def config_target(source: Any) -> tuple[str, dict[str, Any]]:
    """``("trl:<loss_type>", params)``: the adapter target and the GRPOConfig loss settings
    (vLLM's importance-sampling correction and the off-policy mask included: the adapter
    hands TRL the rollout's ``sampling_logprobs`` as vLLM's)."""
    from exchange.libraries.trl.loss import PARAMS

    config = load_config(source)
    params = {name: getattr(config, name) for name in PARAMS if hasattr(config, name)}
    return f"trl:{config.loss_type}", params


def loss_of_config(source: Any) -> Callable:
    """The ``loss_fn(logprobs, rollout)`` that ``source``'s config trains with."""
    from exchange.libraries import resolve

    target, params = config_target(source)
    return resolve(target, params)


def schedule_note(config) -> str:
    """What the audit judges, for the report's title: one optimizer step of TRL's schedule
    (:func:`exchange.libraries.trl.schedule.schedule`)."""
    from exchange.libraries.trl.schedule import schedule

    plan = schedule(config)
    if plan.splits_groups:
        return (f"one optimizer step: {plan.judged} of the generation batch's {plan.micro_batches} micro-batches "
                f"of {config.per_device_train_batch_size} rows")
    if plan.micro_batches > 1:
        return (f"one optimizer step: the generation batch of {plan.rows} rows in {plan.micro_batches} "
                f"micro-batches of {config.per_device_train_batch_size}")
    return ""


def recipe_mechanisms(config) -> list[tuple[str, str, str]]:
    """``(mechanism id, regimes, line)`` for each mechanism the derivation
    (:func:`exchange.libraries.trl.loss.expected`) finds in the recipe, named by the
    setting that causes it (THEORY.md section 4's names), M8 with its fix."""
    from exchange.libraries.trl.loss import expected
    from exchange.libraries.trl.schedule import schedule

    loss_type, params = config.loss_type, config_target(config)[1]
    derived = expected(loss_type, params)
    on = set(derived["on_policy"].facets)
    facets = sorted(on | set(derived["off_policy"].facets))
    plan = schedule(config)
    split_fails = " and ".join(f"({PROPERTY_LETTERS[p]})" for p in PROPERTY_NAMES
                               if p in FACETS["M8.split_update"].breaks)
    high = config.epsilon_high if config.epsilon_high is not None else config.epsilon  # TRL's None: epsilon
    eps = f"epsilon={config.epsilon!r}, epsilon_high={high!r}"
    lines = {
        "M1.sequence_weight": "importance_sampling_level='sequence': one ratio per response, the geometric mean "
                              "of its token ratios (a per-response weight)",
        "M2.sign_clip": (f"the off-policy clip of loss_type={loss_type!r} ({eps}): its test depends on the sign of "
                         "the advantage" if loss_type != "sapo" else
                         f"SAPO's two temperatures (sapo_temperature_pos={config.sapo_temperature_pos!r}, "
                         f"sapo_temperature_neg={config.sapo_temperature_neg!r}): the gate depends on the sign of A"),
        "M3.response_norm": f"loss_type={loss_type!r}: the per-sequence mean, a weight 1/L_i per response",
        "M3.micro_batch_norm": (f"bnpo's per-micro-batch token count: each of the step's {plan.judged} micro-batches "
                                "divides by its own number of tokens, and TRL's row shuffle puts a group's responses "
                                "in different micro-batches"),
        "M4.not_zero_sum": "responses dropped after the group's advantages were centred "
                           "(mask_truncated_completions, or the off-policy mask)",
        "M5.response_statistics": (f"vLLM's sequence-level importance-sampling correction "
                                   f"(vllm_importance_sampling_mode={config.vllm_importance_sampling_mode!r}): "
                                   "a per-response weight, the detached product of the response's "
                                   "pi_old/pi_vLLM (a response-level statistic), on-policy too"),
        "M5.micro_batch_quantile": f"top_entropy_quantile={config.top_entropy_quantile!r} taken per micro-batch",
        "M6.event_term": f"the KL term from the recipe's beta={config.beta!r} (k3 to the reference policy on the "
                         "sampled tokens, an additive event term; beta: 0.0 trains without it)",
        "M7.shaping": "use_bias_correction_kl with sequence-level ratios: the response's mean KL on its tokens",
        "M8.split_update": (f"gradient_accumulation_steps={plan.accumulation} with steps_per_generation="
                            f"{plan.micro_batches}: each optimizer step holds {plan.judged} of the generation "
                            f"batch's {plan.micro_batches} micro-batches (after TRL's row shuffle), so a group's "
                            "responses fall into different steps, the later ones off-policy; this audit judges the "
                            f"first: {split_fails} fail per update (facet M8.split_update). Fix: steps_per_generation equal to gradient_accumulation_steps (or "
                            "gradient_accumulation_steps a multiple of it), or ExchangeGRPOTrainer(batching="
                            "'groups') with per_device_train_batch_size * gradient_accumulation_steps a multiple "
                            "of num_generations"),
    }
    out = []
    for key in facets:
        regimes = "both regimes" if key in on else "off-policy"
        out.append((key.split(".")[0], regimes, lines.get(key, key)))
    return out
