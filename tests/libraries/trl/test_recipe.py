"""``exchange check --trl-config recipe.yaml`` audits the loss the recipe trains with: the
same verdicts as ``trl:<loss_type>`` with the recipe's parameters."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.usefixtures("trl_ready")

RECIPES = {
    # A DeepSeekMath-style GRPO recipe: sequence-mean aggregation (breaks (C)), a KL.
    "grpo.yaml": (
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: trl-lib/DeepMath-103K\n"
        "loss_type: grpo\nbeta: 0.04\nepsilon: 0.2\nlearning_rate: 1.0e-6\nnum_generations: 8\n",
        "trl:grpo", {"beta": "0.04", "epsilon": "0.2"},
    ),
    # A DAPO recipe with clip-higher and no std scaling.
    "dapo.yaml": (
        "loss_type: dapo\nepsilon: 0.2\nepsilon_high: 0.28\nscale_rewards: none\nmask_truncated_completions: true\n",
        "trl:dapo", {"epsilon": "0.2", "epsilon_high": "0.28", "scale_rewards": "none",
                     "mask_truncated_completions": "true"},
    ),
}


def _verdicts(report) -> dict:
    return {f"{name}/{regime}": r.holds for (name, regime), r in report.results.items()}


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_trl_config_gives_the_verdicts_of_the_library_target(tmp_path, recipe):
    from exchange.checker import check
    from exchange.libraries import resolve
    from exchange.libraries.trl.recipe import config_target, load_config, loss_of_config

    text, target, params = RECIPES[recipe]
    path = tmp_path / recipe
    path.write_text(text)
    assert config_target(path)[0] == target
    kw = dict(max_examples=15, seed=0)
    from_recipe = check(loss_of_config(path), name="recipe", **kw)
    from_target = check(resolve(target, params), name=target, **kw)
    assert _verdicts(from_recipe) == _verdicts(from_target)
    # A GRPOConfig object gives the same loss settings as its YAML.
    assert config_target(load_config(path)) == config_target(path)


def test_cli_trl_config(tmp_path, capsys):
    from exchange.cli import main

    path = tmp_path / "grpo.yaml"
    path.write_text(RECIPES["grpo.yaml"][0])
    code = main(["check", "--trl-config", str(path), "--max-examples", "10", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 1)
    assert out["objective"].startswith("trl:grpo")
    assert "--trl-config" in out["reproduce"]


def test_a_misspelt_key_is_exit_2_naming_it(tmp_path, capsys):
    from exchange.cli import main

    path = tmp_path / "typo.yaml"
    path.write_text("loss_type: dapo\nepsilon_hihg: 0.28\n")  # TRL's TrlParser rejects it
    assert main(["check", "--trl-config", str(path), "--max-examples", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "epsilon_hihg" in err[0], err


def test_a_file_that_is_not_yaml_is_exit_2_naming_it(tmp_path, capsys):
    from exchange.cli import main

    path = tmp_path / "broken.yaml"
    path.write_text("loss_type: [dapo\n")  # an unclosed flow sequence
    assert main(["check", "--trl-config", str(path), "--max-examples", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not valid YAML" in err[0] and "broken.yaml" in err[0], err


def test_the_vllm_correction_is_checked_and_the_entropy_bonus_reported_present(tmp_path):
    """Every setting the recipe check accepts is in its verdict: the vLLM IS correction
    reaches trl:<loss_type> (TRL's own code reads the rollout's sampler log-probs) and is
    named in the title with what it is; the entropy bonus (TRL's whole-distribution
    entropy, outside the coefficient model) is named as present."""
    from exchange.cli.cmd_check import recipe_targets
    from exchange.libraries.trl.recipe import config_target

    path = tmp_path / "vllm.yaml"
    path.write_text("loss_type: dapo\nuse_vllm: true\n")  # TRL's defaults: sequence_mask at most 3.0
    target, params = config_target(path)
    assert target == "trl:dapo" and params["use_vllm"] is True and params["vllm_importance_sampling_correction"]
    (checked,) = recipe_targets(str(path))
    assert "sequence_mask [None, 3.0]: the product of pi_old/pi_vLLM over the response" in checked.name
    path.write_text("loss_type: dapo\nuse_vllm: true\nvllm_importance_sampling_mode: token_truncate\n"
                    "vllm_importance_sampling_clip_min: 0.5\n")
    (checked,) = recipe_targets(str(path))
    assert "token_truncate [0.5, 3.0]: each token's own pi_old/pi_vLLM" in checked.name
    path.write_text("loss_type: dapo\nuse_vllm: true\nvllm_importance_sampling_correction: false\n")
    assert [t.name for t in recipe_targets(str(path))] == [f"trl:dapo (from {path})"]
    path.write_text("loss_type: dapo\nentropy_coef: 0.05\n")
    (target,) = recipe_targets(str(path))
    assert "entropy_coef=0.05" in target.name and "outside the coefficient model" in target.name
    path.write_text("loss_type: dapo\n")
    assert "entropy" not in recipe_targets(str(path))[0].name


# The settings refused by ExchangeGRPOTrainer until issue 32's third pass, as a recipe
# sets them: the checker's broken properties are the derived ones (trl.loss.expected).
# Where its probes name another mechanism than the derivation, both are listed here and
# in docs/libraries.md.
VERDICT_RECIPES = [
    ("dapo", {"top_entropy_quantile": 0.2}, None),
    ("dapo", {"top_entropy_quantile": 0.5, "steps_per_generation": 2, "gradient_accumulation_steps": 2},
     {"on_policy": [], "off_policy": ["M2"]}),  # derived: M5.micro_batch_quantile
    ("dapo", {"epsilon_high": 0.28, "delta": 1.1}, None),
    ("dapo", {"off_policy_mask_threshold": 0.05}, None),
    ("dapo", {"off_policy_mask_threshold": -0.05}, None),
    ("dapo", {"multi_objective_aggregation": "normalize_then_sum"}, None),
    ("dapo", {"use_vllm": True, "vllm_importance_sampling_mode": "token_truncate"}, None),
    ("dapo", {"use_vllm": True}, {"on_policy": ["M3"], "off_policy": ["M3"]}),  # derived: M5 (and M2 off-policy)
    ("cispo", {"epsilon_high": 5.0, "use_vllm": True, "vllm_importance_sampling_correction": False,
               "off_policy_mask_threshold": 0.0}, {"on_policy": [], "off_policy": ["M2"]}),  # derived: M2, M4
]


@pytest.mark.slow  # ~20 s: nine checks of 20 examples
@pytest.mark.parametrize("loss_type, settings, named", VERDICT_RECIPES,
                         ids=[f"{lt}-" + ",".join(f"{k}={v}" for k, v in s.items()) for lt, s, _ in VERDICT_RECIPES])
def test_a_recipes_new_settings_break_what_the_theory_derives(tmp_path, loss_type, settings, named):
    import yaml

    from exchange.checker import check
    from exchange.cli.cmd_check import recipe_targets
    from exchange.libraries import expected
    from exchange.libraries.trl.recipe import config_target

    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"loss_type": loss_type, **settings}))
    (target,) = recipe_targets(str(path))
    report = check(target.loss_fn, max_examples=20, seed=0, name=target.name).to_dict()
    derived = expected(*config_target(path))
    for regime, exp in derived.items():
        broken = {p for p, v in report["properties"].items() if not v["regimes"][regime]["holds"]}
        assert broken == set(exp.breaks), (regime, sorted(broken), sorted(exp.breaks))
        mechanisms = sorted(report["mechanisms_by_regime"].get(regime, []))
        assert mechanisms == (sorted(exp.mechanisms) if named is None else named[regime]), (regime, mechanisms)


def test_a_run_llm_recipe_with_a_refused_setting_is_an_error_naming_it(tmp_path):
    from pathlib import Path

    from exchange.cli.cmd_check import recipe_targets
    from exchange.errors import InvalidArgument

    root = Path(__file__).resolve().parents[3]
    text = (root / "experiments/llm/recipes/grpo_norm_llama25m.yaml").read_text()
    # token ratios: the lab's grpo arm cannot take TRL's sequence-level ratios
    text = text.replace("experiment: experiments/", f"experiment: {root}/experiments/") + (
        "importance_sampling_level: sequence\n")
    (tmp_path / "r.yaml").write_text(text)
    with pytest.raises(InvalidArgument, match=r"arm 'grpo'.*importance_sampling_level='sequence'"):
        recipe_targets(str(tmp_path / "r.yaml"))


def test_a_run_llm_recipe_reports_the_objectives_its_arms_train(tmp_path):
    from pathlib import Path

    from exchange.cli.cmd_check import recipe_targets

    root = Path(__file__).resolve().parents[3]
    targets = recipe_targets(str(root / "experiments/llm/recipes/grpo_norm_llama25m.yaml"))
    names = [t.name.split(" ")[0] for t in targets]
    assert names == ["grpo", "grpo+surgical", "grpo+group_constant_norm"]  # not trl:dapo, TRL's default loss_type
    # bound from the recipe's GRPOConfig as the trainer binds it (max_completion_length 9 ...)
    assert all("as ExchangeGRPOTrainer binds it" in t.name for t in targets)


def test_run_llm_keys_are_run_llms_own_options():
    import dataclasses
    import importlib.util
    import sys
    from pathlib import Path

    from exchange.libraries.trl.recipe import RUN_LLM_KEYS

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("run_llm_script", root / "experiments/llm/run_llm.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    assert set(RUN_LLM_KEYS) == {f.name for f in dataclasses.fields(module.LLMArguments)}


@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
def test_bnpo_with_gradient_accumulation_is_audited_per_micro_batch(tmp_path):
    """TRL splits a generation batch into steps_per_generation (= gradient_accumulation_steps)
    micro-batches of shuffled rows and bnpo divides each by its own token count: identical
    events in two micro-batches get different weights. The audit models the split, so bnpo
    at GA 2 no longer "holds on-policy" (the callback measures a residual in training:
    test_the_callback_measures_bnpos_micro_batch_residual); dapo's global count still holds."""
    from exchange.checker import check
    from exchange.libraries.trl.recipe import config_target, loss_of_config

    for loss_type, holds in (("bnpo", False), ("dapo", True)):
        path = tmp_path / f"{loss_type}.yaml"
        path.write_text(f"loss_type: {loss_type}\ngradient_accumulation_steps: 2\nepsilon_high: 0.28\n")
        assert config_target(path)[1]["steps_per_generation"] == 2
        report = check(loss_of_config(path), max_examples=15, seed=0, regimes=("on_policy",), name=loss_type)
        got = {name: r.holds for (name, _), r in report.results.items()}
        assert got["exchangeable"] is holds and got["shared_cancellation"] is holds, (loss_type, got)


# ~15 s: a real GRPOTrainer run (the slow tier)
@pytest.mark.slow
def test_the_callback_measures_bnpos_micro_batch_residual(tmp_path):
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer

    from exchange.core.metric_keys import SHARED_EVENTS, SHARED_RESIDUAL
    from exchange.libraries.trl.callback import ExchangeCallback
    from tests.libraries.trl.test_trainer import (
        _config,
        _reward,
        _tiny_model_and_tokenizer,
    )

    residuals = {}
    for ga in (1, 2):
        model, tokenizer = _tiny_model_and_tokenizer()
        with torch.no_grad():  # peaked logits: responses share prefixes (shared events)...
            model.model.embed_tokens.weight.mul_(25.0)
        trainer = GRPOTrainer(
            model=model, reward_funcs=_reward, processing_class=tokenizer, callbacks=[ExchangeCallback()],
            # ...and a likely EOS: their lengths differ, so micro-batches differ in token count
            args=_config(tmp_path / f"ga{ga}", loss_type="bnpo", gradient_accumulation_steps=ga,
                         per_device_train_batch_size=8 // ga, max_steps=1,
                         generation_kwargs={"sequence_bias": {(1,): 4.0}}),
            train_dataset=Dataset.from_dict({"prompt": ["a b c", "d e f"]}),
        )
        trainer.train()
        logged = [h for h in trainer.state.log_history if SHARED_RESIDUAL in h][0]
        assert logged[SHARED_EVENTS] > 0, logged  # else the row tests nothing
        residuals[ga] = logged[SHARED_RESIDUAL]
    assert residuals[1] <= 1e-6 < residuals[2], residuals  # one micro-batch holds; two do not
    # ExchangeGRPOTrainer(objective="bnpo") trains on TRL's own micro-batches: the same
    # residual (before issue 32's rows batching it measured 0 on whole groups)
    from exchange.libraries.trl.trainer import ExchangeGRPOTrainer

    model, tokenizer = _tiny_model_and_tokenizer()
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(25.0)
    trainer = ExchangeGRPOTrainer(
        model=model, reward_funcs=_reward, processing_class=tokenizer, objective="bnpo",
        args=_config(tmp_path / "x2", loss_type="bnpo", gradient_accumulation_steps=2, per_device_train_batch_size=4,
                     max_steps=1, generation_kwargs={"sequence_bias": {(1,): 4.0}}),
        train_dataset=Dataset.from_dict({"prompt": ["a b c", "d e f"]}),
    )
    trainer.train()
    ours = next(h for h in trainer.state.log_history if SHARED_RESIDUAL in h)[SHARED_RESIDUAL]
    assert abs(ours - residuals[2]) <= 1e-4 * residuals[2], (ours, residuals)
