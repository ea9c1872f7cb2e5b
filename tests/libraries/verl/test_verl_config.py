"""``exchange check --verl-config FILE.yaml [key=value ...]`` on verl's own example scripts.

Each fixture (``verl_examples.py``: the override list with its source file, commit and
lines) has its verdict derived by hand from THEORY.md beside it, for ONE optimizer step
(THEORY.md section 4), and compared with what ``--verl-config`` reports: the recipe
model (:func:`read_recipe`) and the checker run on the loss it builds.
"""

from __future__ import annotations

import json

import pytest

from tests.libraries.verl import verl_examples as V

pytestmark = pytest.mark.usefixtures("verl_ready")

A = "actor_rollout_ref.actor."
E, C, Z, N = "exchangeable", "shared_cancellation", "zero_sum", "null_on_equal_rewards"

# Hand derivations (THEORY.md sections 2-4) of each example's LOSS, per regime: (broken
# properties, mechanisms); every one of these schedules splits groups over optimizer
# steps, which adds (Z), (C) and M8 to the step's verdict (:data:`SPLIT`).
SPLIT = ({Z, C}, {"M8"})
DERIVED = {
    # GRPO, token-mean (one normaliser per step: a group constant), grpo advantages
    # (mean/std: zero-sum), dual clip c=3. use_kl_loss with low_var_kl: k3(l, ref) on the
    # sampled tokens, its gradient 1 - exp(ref - l) added to every occurrence whatever its
    # advantage: M6, on-policy too (the policy is not the reference): (E), (C), and (N) on
    # tied groups. Off-policy the PPO clip depends on the sign of A: M2 (T4).
    # Schedule: 1024 prompts x 5 = 5120 rows, mini-batch 256 x 5 = 1280 rows: 4 optimizer
    # steps; balance_batch (default True) reorders rows by length, so groups are split
    # over steps: M8, (Z) and (C) fail per update.
    "grpo_qwen2_7b": (V.GRPO_QWEN2_7B, {
        "on_policy": ({E, C, N}, {"M6"}),
        "off_policy": ({E, C, N}, {"M2", "M6"}),
    }, 4),
    # Same loss; use_dynamic_bsz only re-cuts micro-batches inside a step (verl 0.9.1
    # normalises each by the mini-batch's global counts): no change. Same M8.
    "grpo_deepseek_seq_balance": (V.GRPO_DEEPSEEK_SEQ_BALANCE, {
        "on_policy": ({E, C, N}, {"M6"}),
        "off_policy": ({E, C, N}, {"M2", "M6"}),
    }, 4),
    # GSPO with seq-mean-token-mean: each response's loss is its token mean, 1/L_i
    # (M3), on-policy already: (E), (C). Off-policy the sequence ratio couples the
    # response's tokens (M1) and its clip depends on the sign of A (M2). No KL.
    # Schedule: 512 prompts, mini-batch 128: 4 steps, balance_batch: M8.
    "gspo_3b_math": (V.GSPO_3B_MATH, {
        "on_policy": ({E, C}, {"M3"}),
        "off_policy": ({E, C}, {"M1", "M2", "M3"}),
    }, 4),
    # DAPO: token-mean, clip-higher 0.2/0.28, dual clip 10. On-policy every ratio is 1:
    # no clip acts, the normaliser is a group constant: the loss holds. Off-policy: M2.
    # filter_groups (dynamic sampling) drops whole groups: a group selection, a group
    # constant, not a mechanism (present). Schedule: 512 prompts, mini-batch 32: 16
    # steps; balance_batch: M8.
    "dapo_qwen25_32b": (V.DAPO_QWEN25_32B, {
        "on_policy": (set(), set()),
        "off_policy": ({E, C}, {"M2"}),
    }, 16),
}


def _recipe(overrides, path=None):
    from exchange.libraries.verl.config import load_config
    from exchange.libraries.verl.recipe import read_recipe

    return read_recipe(load_config(path, overrides))


def _as_sets(expected):
    """``{regime: (breaks, mechanisms)}`` from Expected objects or pairs, keyed by the regime's name."""
    out = {}
    for regime, exp in expected.items():
        breaks, mechanisms = (exp.breaks, exp.mechanisms) if hasattr(exp, "breaks") else exp
        out[str(getattr(regime, "value", regime))] = (set(breaks), set(mechanisms))
    return out


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_each_example_reads_as_derived_by_hand(name):
    fixture, loss, steps = DERIVED[name]
    recipe = _recipe(V.overrides(fixture))
    assert _as_sets(recipe.loss_expected()) == loss, fixture[0]
    step = {r: (b | SPLIT[0], m | SPLIT[1]) for r, (b, m) in loss.items()}
    assert _as_sets(recipe.step_expected()) == step, fixture[0]
    assert recipe.schedule.steps == steps
    assert recipe.schedule.split and any("balance_batch" in s for s in recipe.schedule.split_by)
    assert any("ppo_mini_batch_size" in s for s in recipe.schedule.split_by)


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_verl_config_reports_the_derived_verdict_of_each_example(name, capsys):
    """What ``exchange check --verl-config - <the script's overrides> --json`` reports: the
    checker's verdict on the step's loss equals the loss's derivation, the schedule names
    M8 with the keys, and the exit status is 1 (every example here splits groups)."""
    from exchange.cli import main

    fixture, loss, steps = DERIVED[name]
    code = main(["check", "--verl-config", "-", *V.overrides(fixture), "--json", "--no-shrink", "--max-examples", "20"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    for regime, (breaks, mechanisms) in loss.items():
        broken = {p for p in (E, C, Z, N) if not out["properties"][p]["regimes"][regime]["holds"]}
        assert broken == breaks, (regime, broken)
        assert set(out["mechanisms_by_regime"][regime]) == mechanisms, (regime, out["mechanisms_by_regime"][regime])
    schedule = out["verl_config"]["schedule"]
    assert schedule["M8"] and schedule["steps"] == steps
    assert any("balance_batch=True" in s for s in schedule["split_by"])


def test_a_split_step_breaks_what_the_facet_defines():
    """One definition of what M8 breaks (vocabulary's ``M8.split_update``, THEORY.md
    section 4 read on one optimizer step): verl's recipe audit adds exactly that set to
    the loss's own, and its schedule line names it; dapo's loss holds on-policy, so the
    step's on-policy verdict is M8's alone. TRL's schedule audit states the same set:
    tests/libraries/trl/test_schedule.py."""
    from exchange.core.vocabulary import FACETS

    assert set(FACETS["M8.split_update"].breaks) == {Z, C} == SPLIT[0]
    recipe = _recipe(V.overrides(V.DAPO_QWEN25_32B))
    assert recipe.schedule.split
    assert _as_sets(recipe.step_expected())["on_policy"] == ({Z, C}, {"M8"})
    assert "(Z) and (C) fail per update" in recipe.schedule.describe()


def test_groups_stay_whole_with_one_mini_batch_or_without_reordering():
    """Derived: ppo_mini_batch_size = train_batch_size: one step holds the whole batch (no
    M8, one on-policy step). balance_batch and shuffle off, 1280 rows per step over 8
    ranks = 160 rows each, a multiple of n=5: the rows stay in verl's order (each group
    contiguous), so every step holds whole groups: no M8, but 4 steps, the later ones
    off-policy."""
    base = V.overrides(V.GRPO_QWEN2_7B)
    one = _recipe(base + [A + "ppo_mini_batch_size=1024"])
    assert not one.schedule.split and one.schedule.steps == 1
    assert "M8" not in one.step_expected()["on_policy"][1]
    kept = _recipe(base + ["trainer.balance_batch=False"])
    assert not kept.schedule.split and kept.schedule.steps == 4
    assert "off-policy" in kept.schedule.describe()
    shuffled = _recipe(base + ["trainer.balance_batch=False", A + "shuffle=True"])
    assert shuffled.schedule.split and any("shuffle" in s for s in shuffled.schedule.split_by)
    # 8 ranks, 3 prompts of 5 per step: 15 rows cannot split evenly (verl asserts it)
    from exchange.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="data-parallel"):
        _recipe(base + ["trainer.balance_batch=False", A + "ppo_mini_batch_size=3", "data.train_batch_size=3"])
    # 2 ranks, 2 prompts of 5 per step: 5 rows (one group) a rank; 8 prompts: 20 rows a rank: kept whole
    two = _recipe(base + ["trainer.balance_batch=False", "trainer.n_gpus_per_node=2", A + "ppo_mini_batch_size=2",
                         "data.train_batch_size=8"])
    assert not two.schedule.split and two.schedule.steps == 4
    # A rank's share not a multiple of n: 2 ranks, 3 prompts of 2 per step (3 rows a rank): split
    odd = _recipe(base + ["trainer.balance_batch=False", "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.n=2",
                          A + "ppo_mini_batch_size=3", "data.train_batch_size=6"])
    assert odd.schedule.split and any("multiple of rollout.n" in s for s in odd.schedule.split_by)
    epochs = _recipe(base + [A + "ppo_mini_batch_size=1024", A + "ppo_epochs=2"])
    assert not epochs.schedule.split and epochs.schedule.steps == 2


def test_the_kl_keys_reach_the_verl_target():
    """The verl: target takes the same keys, short or full: use_kl_loss adds verl's own
    k3 term (M6 in both regimes in the expectation); kl_loss_coef scales it."""
    import torch

    from exchange.core.rollout import Rollout
    from exchange.libraries.verl.loss import expected, loss_fn

    mask = torch.ones(2, 3, dtype=torch.bool)
    r = Rollout(tokens=torch.ones(2, 3, dtype=torch.long), mask=mask, rewards=torch.tensor([1.0, 0.0]),
                group=torch.zeros(2, dtype=torch.long), old_logprobs=torch.full((2, 3), -1.0, dtype=torch.float64),
                ref_logprobs=torch.full((2, 3), -2.0, dtype=torch.float64))
    lp = torch.full((2, 3), -1.0, dtype=torch.float64)
    plain = loss_fn("vanilla/token-mean")(lp, r)
    full = loss_fn("vanilla/token-mean", {A + "use_kl_loss": "true", A + "kl_loss_coef": "0.5"})(lp, r)
    k3 = torch.exp(torch.tensor(-1.0, dtype=torch.float64)) + 1 - 1  # exp(ref - l) - (ref - l) - 1 at ref - l = -1
    assert float(full - plain) == pytest.approx(0.5 * float(k3), rel=1e-12)
    assert "M6" in expected("vanilla", "token-mean", {"use_kl_loss": True})["on_policy"].mechanisms
    assert "M6" not in expected("vanilla", "token-mean", {"use_kl_loss": True, "kl_loss_coef": 0.0})[
        "on_policy"].mechanisms


@pytest.mark.parametrize("items, needle", [
    ([A + "clip_ratio_hihg=0.3"], "clip_ratio_high"),  # the nearest key is named
    (["+" + A + "clip_ratio=0.3"], "already"),
    (["algorithm.adv_estimator=grpo", A + "ppo_mini_batch_size=2048", "data.train_batch_size=1024"],
     "ppo_mini_batch_size=2048"),
    (["algorithm.adv_estimator=gae"], "algorithm.adv_estimator=gae"),  # verl's default: needs a critic
    (["algorithm.adv_estimator=grpo", A + "policy_loss.loss_mode=exchange_dapo"], "exchange check dapo"),
    (["algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=True"], "algorithm.use_kl_in_reward"),
    (["algorithm.adv_estimator=grpo", "algorithm.rollout_correction.rollout_is=token"], "rollout_is"),
    (["algorithm.adv_estimator=grpo", A + "loss_agg_mode=token-avg"], "loss_agg_mode"),
    (["nonsense"], "key=value"),
    (["algorithm.adv_estimator=grpo"], "ppo_micro_batch_size_per_gpu"),  # verl's own default config lacks it
])
def test_bad_keys_exit_2_with_one_line(items, needle, capsys):
    from exchange.cli import main

    assert main(["check", "--verl-config", "-", *items, "--max-examples", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_a_hydra_defaults_list_is_refused_with_the_fix(tmp_path, capsys):
    from exchange.cli import main

    path = tmp_path / "hydra.yaml"
    path.write_text("defaults:\n  - ppo_trainer\n  - _self_\nalgorithm:\n  adv_estimator: grpo\n")
    assert main(["check", "--verl-config", str(path), "--max-examples", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "defaults" in err[0] and "--cfg job" in err[0], err


def test_a_yaml_key_verl_lacks_is_named(tmp_path, capsys):
    from exchange.cli import main

    path = tmp_path / "typo.yaml"
    path.write_text("algorithm:\n  adv_estimator: grpo\n  norm_adv_by_std_in_grp: false\n")
    assert main(["check", "--verl-config", str(path), "--max-examples", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "norm_adv_by_std_in_grp" in err[0] and "norm_adv_by_std_in_grpo" in err[0], err


def test_the_cli_reports_m8_and_the_yaml_merges_under_the_overrides(tmp_path, capsys):
    """YAML then overrides, as verl's command line: the override wins. M8 makes the exit
    status 1 and is in the JSON with the keys that cause it."""
    from exchange.cli import main

    path = tmp_path / "grpo.yaml"
    path.write_text("algorithm:\n  adv_estimator: rloo\ndata:\n  train_batch_size: 64\n"
                    "actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 64\n    ppo_micro_batch_size_per_gpu: 2\n"
                    "  rollout:\n    n: 4\n")
    code = main(["check", "--verl-config", str(path), "algorithm.adv_estimator=grpo",
                 A + "ppo_mini_batch_size=16", "+trainer.extra_note=1", "--max-examples", "5", "--json",
                 "--no-shrink"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    step = out["verl_config"]
    assert step["target"] == "verl:vanilla/token-mean" and step["schedule"]["M8"] and step["schedule"]["steps"] == 4
    assert any("ppo_mini_batch_size=16" in s for s in step["schedule"]["split_by"])
    assert "--verl-config" in out["reproduce"] and "algorithm.adv_estimator=grpo" in out["reproduce"]
    assert "M8 split updates" in step["step"] and step["kl"] == ""


def test_the_kl_of_the_recipe_is_named_as_the_recipe_s():
    recipe = _recipe(V.overrides(V.GRPO_QWEN2_7B))
    assert "use_kl_loss=True" in recipe.kl_note and "low_var_kl" in recipe.kl_note and "M6" in recipe.kl_note


def test_loading_a_config_is_quick():
    """The config alone (no check): verl is not imported to compose it."""
    import time

    start = time.process_time()
    _recipe(V.overrides(V.DAPO_QWEN25_32B))
    assert time.process_time() - start < 10.0


@pytest.mark.parametrize("kind, mode", [
    ("kl", "token-mean"), ("low_var_kl+", "token-mean"),
    pytest.param("mse", "token-mean", marks=pytest.mark.slow),
    pytest.param("abs", "seq-mean-token-mean", marks=pytest.mark.slow),
])
def test_every_kl_type_is_the_derived_m6(kind, mode):
    """Each verl kl_penalty type is a function of the sampled token's own l and ref,
    added to every occurrence whatever its advantage: M6 in both regimes, beside the
    loss's own mechanisms (M3 for a per-sequence mean, M2 off-policy); the checker agrees."""
    from exchange.checker import check
    from exchange.libraries.verl.loss import expected, loss_fn

    params = {"use_kl_loss": "true", "kl_loss_type": kind}
    report = check(loss_fn(f"vanilla/{mode}", params), max_examples=20, seed=0, shrink=False)
    for regime, exp in _as_sets(expected("vanilla", mode, params)).items():
        assert "M6" in exp[1]
        broken = {p for p in (E, C, Z, N) if not report.holds(p, regime)}
        assert (broken, set(report.mechanisms_in(regime))) == exp, regime


def test_a_yaml_may_fill_verl_s_free_form_mappings(tmp_path):
    """engine_kwargs.vllm is {} in verl's config: a YAML may put keys under it (as verl's
    own examples do), while a misspelt key elsewhere is still refused."""
    from exchange.errors import InvalidArgument
    from exchange.libraries.verl.config import load_config

    path = tmp_path / "run.yaml"
    path.write_text("algorithm:\n  adv_estimator: grpo\nactor_rollout_ref:\n  rollout:\n    engine_kwargs:\n"
                    "      vllm:\n        swap_space: 4\n")
    assert load_config(path).actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space == 4
    path.write_text("actor_rollout_ref:\n  actor:\n    clip_ratio_hgh: 0.3\n")
    with pytest.raises(InvalidArgument, match="clip_ratio_hgh.*nearest: actor_rollout_ref.actor.clip_ratio_high"):
        load_config(path)
