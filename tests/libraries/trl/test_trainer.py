"""One real TRL training step with an exchange objective, on a tiny random LM (CPU).

The model (a 1-layer Qwen2, vocab 32, hidden 16) and the tokenizer (a WordLevel
tokenizer over 'a'..'z' plus specials) are built in code: nothing is downloaded.
"""

from __future__ import annotations

import pytest
import torch

from exchange.core.metric_keys import SHARED_EVENTS, SHARED_KAPPA_SHARE, SHARED_RESIDUAL

pytestmark = pytest.mark.usefixtures("trl_ready")


def _tiny_model_and_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    specials = ["<pad>", "<eos>", "<unk>"]
    vocab = {tok: i for i, tok in enumerate(specials + [chr(c) for c in range(ord("a"), ord("z") + 1)])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, pad_token_id=0, eos_token_id=1, bos_token_id=1,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config), tokenizer


def _reward(completions, **kwargs):
    """A deterministic, varied score of the text: any signal will do."""
    return [float(sum(map(ord, c)) % 5) for c in completions]


def _trainer(tmp_path, objective, **objective_kwargs):
    from datasets import Dataset
    from trl import GRPOConfig

    from exchange.libraries.trl.trainer import ExchangeGRPOTrainer

    model, tokenizer = _tiny_model_and_tokenizer()
    args = GRPOConfig(
        output_dir=str(tmp_path), report_to="none", use_cpu=True, max_steps=1, logging_steps=1,
        per_device_train_batch_size=4, num_generations=4, max_completion_length=6, temperature=1.0,
        learning_rate=1e-3, save_strategy="no", seed=0, bf16=False,
    )
    dataset = Dataset.from_dict({"prompt": ["a b c", "d e f"]})
    return ExchangeGRPOTrainer(
        model=model, reward_funcs=_reward, args=args, train_dataset=dataset, processing_class=tokenizer,
        objective=objective, **objective_kwargs,
    )


def test_one_training_step_logs_exchange_metrics(tmp_path):
    trainer = _trainer(tmp_path, "dapo")
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    logged = [h for h in trainer.state.log_history if SHARED_EVENTS in h]
    assert logged, trainer.state.log_history
    entry = logged[0]
    assert entry[SHARED_EVENTS] >= 0
    residual = entry[SHARED_RESIDUAL]
    assert 0.0 <= residual <= 1e-6  # dapo keeps (C) on-policy
    after = list(trainer.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after))  # the step moved the model


def test_objective_resolution_and_errors():
    from exchange.errors import ExchangeError
    from exchange.libraries.trl.trainer import resolve_objective

    assert callable(resolve_objective("grpo"))
    assert callable(resolve_objective("trl:grpo"))  # a library target: TRL is there (trl_ready)
    with pytest.raises(ExchangeError, match="objective="):
        resolve_objective("no_such_objective")
    with pytest.raises(ExchangeError, match="objective_params"):
        resolve_objective(lambda lp, r: lp.sum(), {"eps": 1})


def test_objective_resolves_another_librarys_target(verl_ready):
    """A verl target trains under TRL too; without verl this skips (the ``verl`` extra
    is independent of ``trl``)."""
    from exchange.libraries.trl.trainer import resolve_objective

    assert callable(resolve_objective("verl:vanilla/token-mean"))


def test_shared_residual_separates_grpo_from_dapo():
    from exchange import token_coefficients
    from exchange.checker.cases import Case, GroupConfig, build
    from exchange.core.events import events, shared_residual
    from exchange.objectives import resolve

    # A shared two-token prefix; the correct responses are the short ones (T3).
    rollout = build(Case(groups=(GroupConfig(((1, 2, 3), (1, 2, 4, 5, 6), (1, 2, 7)), (1.0, 0.0, 1.0)),)))
    grpo = shared_residual(token_coefficients(resolve("grpo"), rollout.logprobs, rollout), rollout)
    dapo = shared_residual(token_coefficients(resolve("dapo"), rollout.logprobs, rollout), rollout)
    assert int(events(rollout).shared.sum()) == 2
    assert grpo > 1e-3
    assert dapo <= 1e-12


def test_dumped_batches_inspect_to_the_logged_residual(tmp_path):
    from exchange.checker.batch_analysis import inspect
    from exchange.core.batch_io import load_batch
    from exchange.objectives import get

    trainer = _trainer(tmp_path, "grpo", dump_batches=str(tmp_path / "batches"))
    trainer.train()
    files = sorted((tmp_path / "batches").glob("train-*.pt"))
    assert files
    logged = [h[SHARED_RESIDUAL] for h in trainer.state.log_history if SHARED_RESIDUAL in h]
    found = [inspect(get("grpo").bind(), load_batch(f)).shared_residual for f in files]
    assert logged and min(found) - 1e-9 <= logged[0] <= max(found) + 1e-9  # TRL logs the mean over micro-batches


def _config(tmp_path, **overrides):
    from trl import GRPOConfig

    kwargs = dict(
        output_dir=str(tmp_path), report_to="none", use_cpu=True, max_steps=2, logging_steps=1,
        per_device_train_batch_size=4, num_generations=4, max_completion_length=6, temperature=1.0,
        learning_rate=1e-3, save_strategy="no", seed=0, bf16=False, gradient_accumulation_steps=2,
    )
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


TRL_KEYS = ("entropy", "clip_ratio/region_mean", "reward", "loss")
EXCHANGE_KEYS = (SHARED_RESIDUAL, SHARED_EVENTS, SHARED_KAPPA_SHARE)


def _logged(trainer):
    return [h for h in trainer.state.log_history if SHARED_RESIDUAL in h]


def test_callback_on_plain_grpo_trainer_with_grad_accumulation(tmp_path):
    from datasets import Dataset
    from trl import GRPOTrainer

    from exchange.libraries.trl.callback import ExchangeCallback

    model, tokenizer = _tiny_model_and_tokenizer()
    model.save_pretrained(tmp_path / "tiny")  # a local path: TRL loads the reference model (beta > 0) from it
    callback = ExchangeCallback()
    trainer = GRPOTrainer(
        model=str(tmp_path / "tiny"), reward_funcs=_reward, args=_config(tmp_path, beta=0.04), processing_class=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": ["a b c", "d e f", "g h", "i j k"]}), callbacks=[callback],
    )
    assert trainer.args.steps_per_generation == 2  # TRL splits a generation batch in two micro-batches
    trainer.train()
    assert callback.trainer is trainer  # found without user code
    logged = _logged(trainer)
    assert len(logged) == 2, trainer.state.log_history
    for entry in logged:
        for key in TRL_KEYS + ("kl",) + EXCHANGE_KEYS:
            assert key in entry, (key, entry)
        assert 0.0 <= entry[SHARED_RESIDUAL] <= 1.0 + 1e-9
        assert 0.0 <= entry[SHARED_KAPPA_SHARE] <= 1.0 + 1e-9
        assert not any(k.startswith("exchange/") for k in entry)  # the pre-issue-29 keys are gone


def _exchange(tmp_path, objective, prompts=("a b c", "d e f", "g h", "i j k"), **settings):
    from datasets import Dataset

    from exchange.libraries.trl.trainer import ExchangeGRPOTrainer

    model, tokenizer = _tiny_model_and_tokenizer()
    kwargs = {k: settings.pop(k) for k in ("batching", "trl_defaults", "objective_params") if k in settings}
    return ExchangeGRPOTrainer(model=model, reward_funcs=_reward, args=_config(tmp_path, **settings),
                               processing_class=tokenizer, train_dataset=Dataset.from_dict({"prompt": list(prompts)}),
                               objective=objective, **kwargs)


def _spy_groups(trainer) -> list:
    seen = []
    original = trainer.exchange_objective

    def spy(logprobs, rollout):
        seen.append((torch.bincount(rollout.group_index).tolist(), rollout.advantages is not None))
        return original(logprobs, rollout)

    trainer.exchange_objective = spy
    return seen


def test_exchange_trainer_keeps_trl_metrics_and_whole_groups_when_asked(tmp_path):
    trainer = _exchange(tmp_path, "dapo", batching="groups", epsilon=0.1, epsilon_high=0.3)
    seen = _spy_groups(trainer)
    trainer.train()
    assert seen and all(sizes == [4] for sizes, _ in seen), seen  # whole groups
    logged = _logged(trainer)
    assert len(logged) == 2
    for entry in logged:
        for key in TRL_KEYS + EXCHANGE_KEYS:
            assert key in entry, (key, entry)
        assert entry[SHARED_RESIDUAL] <= 1e-6  # dapo keeps (C)


def test_rows_batching_is_trls_own_split_with_the_generation_batchs_advantages(tmp_path):
    """A plain family trains on TRL's row-shuffled micro-batches (partial groups, even a
    per-device batch smaller than a group) with advantages computed over the whole batch."""
    trainer = _exchange(tmp_path, "bnpo", per_device_train_batch_size=2, max_steps=1)
    assert trainer.exchange_batching == "rows"
    seen = _spy_groups(trainer)
    trainer.train()
    assert seen and all(given for _, given in seen)
    assert any(sizes != [4] for sizes, _ in seen), seen  # TRL's micro-batches split groups
    assert _logged(trainer)  # the callback still measures whole groups


def test_settings_it_cannot_apply_are_refused_naming_each(tmp_path):
    from exchange.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match=r"top_entropy_quantile=0.5: objective 'clip_cov' has no "
                                              r"top_entropy_quantile parameter.*objective=None.*"
                                              r"importance_sampling_level='sequence'.*objective='gspo'"):
        _exchange(tmp_path, "clip_cov", importance_sampling_level="sequence", top_entropy_quantile=0.5)
    with pytest.raises(InvalidArgument, match=r"beta=0.04: objective 'dapo' has no KL term"):
        _exchange(tmp_path, "dapo", beta=0.04)
    with pytest.raises(InvalidArgument, match=r"loss_type='vespo' has no catalog objective.*objective=None"):
        _exchange(tmp_path, "vespo", loss_type="vespo")
    with pytest.raises(InvalidArgument, match=r"epsilon_high=0.2 with loss_type='cispo'.*epsilon_high > 1"):
        _exchange(tmp_path, "cispo", loss_type="cispo")


def test_a_loss_type_the_user_set_is_named_when_the_objective_differs(tmp_path):
    import warnings

    with pytest.warns(UserWarning, match="trains objective='dapo', not GRPOConfig.loss_type='grpo'"):
        _exchange(tmp_path, "dapo", loss_type="grpo")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*GRPOConfig.loss_type.*")
        _exchange(tmp_path, "dapo")  # TRL's default loss_type: the user never set it
        _exchange(tmp_path, "grpo", loss_type="grpo")  # the objective is the loss type


def test_the_vllm_correction_is_applied_as_the_objectives_sampler_weight(tmp_path):
    from exchange.libraries.trl.settings import config_params, refused_settings

    args = _config(tmp_path, use_vllm=True)  # TRL's defaults: sequence_mask, clip_max 3.0
    assert refused_settings(args, "grpo") == []
    taken = config_params(args, "grpo")
    assert (taken["sampler_is"], taken["sampler_is_min"], taken["sampler_is_max"]) == ("sequence_mask", None, 3.0)
    args = _config(tmp_path, use_vllm=True, vllm_importance_sampling_mode="token_truncate",
                   vllm_importance_sampling_clip_min=0.5, off_policy_mask_threshold=0.1)
    taken = config_params(args, "dapo")
    assert {k: taken[k] for k in ("sampler_is", "sampler_is_min", "sampler_is_max", "off_policy_mask",
                                  "off_policy_mask_sampler")} == {
        "sampler_is": "token_truncate", "sampler_is_min": 0.5, "sampler_is_max": 3.0, "off_policy_mask": 0.1,
        "off_policy_mask_sampler": True}  # TRL's off-policy mask reads vLLM's log-probs when it has them
    assert "sampler_is" not in config_params(_config(tmp_path, use_vllm=True,
                                                     vllm_importance_sampling_correction=False), "dapo")
    (line,) = refused_settings(_config(tmp_path, use_vllm=True), "clip_cov")
    assert line.startswith("vllm_importance_sampling_correction=True (use_vllm=True, "
                           "vllm_importance_sampling_mode='sequence_mask'): objective 'clip_cov' has no sampler_is "
                           "parameter") and "objective=None" in line, line


# Each setting refused until issue 32's third pass: GRPOConfig's value -> the catalog
# parameter; objectives that take it, objectives that cannot (refused, naming it).
_APPLIED = [
    ("delta", 2.0, {"delta": 2.0}, ("dapo", "grpo+surgical", "gspo", "bnpo", "dr_grpo"),
     ("cispo", "sapo", "clip_cov")),
    ("off_policy_mask_threshold", 0.5, {"off_policy_mask": 0.5}, ("dapo", "grpo+surgical", "cispo", "sapo", "rloo"),
     ("clip_cov",)),
    ("top_entropy_quantile", 0.2, {"top_entropy_quantile": 0.2}, ("dapo", "grpo+surgical", "cispo", "sapo", "rloo"),
     ("clip_cov",)),
    ("multi_objective_aggregation", "normalize_then_sum", {}, ("dapo", "grpo+surgical", "cispo", "sapo", "gspo"),
     ("rloo", "remax", "clip_cov")),
]


@pytest.mark.parametrize("setting, value, params, applied, refused", _APPLIED, ids=[a[0] for a in _APPLIED])
def test_each_loss_setting_is_applied_or_refused_by_name(tmp_path, setting, value, params, applied, refused):
    from exchange.libraries.trl.settings import config_params, refused_settings

    args = _config(tmp_path, **{setting: value})
    for objective in applied:
        assert refused_settings(args, objective) == [], objective
        taken = config_params(args, objective)
        assert {k: taken[k] for k in params} == params, (objective, taken)
    for objective in (*refused, lambda lp, r: lp.sum()):
        (line,) = refused_settings(args, objective)
        assert line.startswith(f"{setting}={value!r}: ") and "objective=None" in line, line
    assert refused_settings(_config(tmp_path), "dapo") == []


def test_a_misspelt_aggregation_or_vllm_mode_is_refused_naming_trls_values(tmp_path):
    from exchange.libraries.trl.settings import refused_settings

    # GRPOConfig takes any string; TRL itself fails only inside the first training step
    (line,) = refused_settings(_config(tmp_path, multi_objective_aggregation="normalise_then_sum"), "dapo")
    assert line.startswith("multi_objective_aggregation='normalise_then_sum' is not one of 'sum_then_normalize', "
                           "'normalize_then_sum'"), line
    (line,) = refused_settings(_config(tmp_path, use_vllm=True, vllm_importance_sampling_mode="token"), "dapo")
    assert line.startswith("vllm_importance_sampling_mode='token' is not one of token_truncate, token_mask, "
                           "sequence_truncate, sequence_mask"), line


def test_hyperparameters_come_from_grpo_config(tmp_path):
    from exchange.libraries.trl.settings import (
        config_params,
        differences,
        refused_settings,
    )

    args = _config(tmp_path, epsilon=0.1, epsilon_high=0.3, beta=0.04, scale_rewards="batch")
    assert config_params(args, "grpo") == {"eps_low": 0.1, "eps_high": 0.3, "beta": 0.04, "scale": "batch",
                                           "bias_correction_kl": True}  # TRL's default: the KL times the ratio
    assert config_params(args, "dapo", {"eps_high": 0.5}) == {"eps_low": 0.1, "eps_high": 0.5, "scale": "batch"}
    assert refused_settings(args, "grpo") == []
    assert [r.split(":")[0] for r in refused_settings(args, "dapo")] == ["beta=0.04"]
    assert refused_settings(args, None) == []
    plain = _config(tmp_path)
    # TRL's values win, its defaults included: the budget, the scaling, the clip widths
    assert config_params(plain, "dr_grpo") == {"scale": "group", "max_length": 6.0, "eps_low": 0.2, "eps_high": 0.2}
    assert config_params(plain, "dapo") == {"scale": "group", "eps_low": 0.2, "eps_high": 0.2}  # not DAPO's 0.28
    assert config_params(plain, "gspo") == {"eps_low": 0.2, "eps_high": 0.2}  # not GSPO's 3e-4
    assert config_params(_config(tmp_path, mask_truncated_completions=True), "dapo")["mask_truncated"] is True
    # the lab keeps its catalog objectives' own clip widths, loudly
    assert config_params(plain, "gspo", trl_defaults=False) == {}
    assert differences(plain, "dapo", trl_defaults=False) == ["eps_high=0.28 (GRPOConfig.epsilon_high gives 0.2)"]
    # what a loss type fixes: TRL's cispo cap is absolute, its sapo takes the per-sequence mean
    assert config_params(_config(tmp_path, loss_type="cispo", epsilon_high=5.0), "cispo") == {"eps_high": 4.0}
    assert config_params(_config(tmp_path, loss_type="sapo"), "sapo") == {
        "tau_pos": 1.0, "tau_neg": 1.05, "loss_agg_mode": "seq-mean-token-mean"}
    assert refused_settings(plain, "rloo") == []
    assert refused_settings(_config(tmp_path, entropy_coef=0.01), "dapo") == []  # applied as TRL does
    assert refused_settings(_config(tmp_path, steps_per_generation=4, num_iterations=2), "dapo") == []  # applied
    assert "epsilon_high=0.3: objective 'rloo' has no such parameter" in refused_settings(
        _config(tmp_path, epsilon_high=0.3), "rloo")[0]
    assert "scale_rewards='none'" in refused_settings(_config(tmp_path, scale_rewards="none"), "rloo")[0]
    assert "scale_rewards" not in " ".join(refused_settings(_config(tmp_path, scale_rewards="none"), "gspo"))


def test_partial_groups_are_refused_naming_the_setting(tmp_path):
    from exchange.errors import ExchangeError

    # a transform needs whole groups in every micro-batch (batching='groups')
    with pytest.raises(ExchangeError, match="per_device_train_batch_size=2.*batching='groups'"):
        _exchange(tmp_path, "dapo+sign_free_clip", prompts=("a b c", "d e f"), per_device_train_batch_size=2)
    with pytest.raises(ExchangeError, match="batching='rows' with objective='dapo\\+sign_free_clip'"):
        _exchange(tmp_path, "dapo+sign_free_clip", batching="rows")


def test_learning_tax_is_never_nan_when_reward_std_is_zero(tmp_path):
    import math

    from datasets import Dataset

    from exchange.libraries.trl.trainer import ExchangeGRPOTrainer

    pytest.importorskip("exchange.paramspace")
    model, tokenizer = _tiny_model_and_tokenizer()
    trainer = ExchangeGRPOTrainer(
        model=model, reward_funcs=lambda completions, **kw: [1.0] * len(completions),
        args=_config(tmp_path, gradient_accumulation_steps=1), processing_class=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": ["a b c", "d e f"]}), objective="grpo", learning_tax=True,
    )
    trainer.train()
    for entry in trainer.state.log_history:
        for key, value in entry.items():
            if key.startswith("exchange/") and isinstance(value, float):
                assert math.isfinite(value), (key, entry)


def test_trls_token_factors_train_as_grpo_trainer_in_the_fast_tier(tmp_path):
    """One row of the slow equality table that carries four settings at once, so the fast
    tier sees them applied: the high-entropy mask per micro-batch, the off-policy mask
    (a negative threshold acts on-policy), vLLM's token_mask IS weight (vLLM's log-probs
    injected) and normalize_then_sum over two reward functions, GA 2. Leaving any one of
    them out of the exchange trainer moves the step by 1.9-37% in norm."""
    from tests.libraries.trl.test_equality import _first_step_gradient

    settings = dict(top_entropy_quantile=0.5, off_policy_mask_threshold=-0.01, use_vllm=True,
                    vllm_importance_sampling_mode="token_mask", vllm_importance_sampling_clip_min=0.5,
                    multi_objective_aggregation="normalize_then_sum", reward_funcs="two")
    trl, _ = _first_step_gradient(tmp_path, False, "dapo", 2, **settings)
    ours, _ = _first_step_gradient(tmp_path, True, "dapo", 2, **settings)
    assert float(trl.norm()) > 0
    ratio, cosine = float(ours.norm() / trl.norm()), float(ours @ trl / (ours.norm() * trl.norm()))
    assert abs(ratio - 1) < 1e-4 and cosine > 0.9999, (ratio, cosine)
