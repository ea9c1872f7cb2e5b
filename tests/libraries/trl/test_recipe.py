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
