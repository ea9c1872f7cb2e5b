"""One real TRL training step with an exchange objective, on a tiny random LM (CPU).

The model (a 1-layer Qwen2, vocab 32, hidden 16) and the tokenizer (a WordLevel
tokenizer over 'a'..'z' plus specials) are built in code: nothing is downloaded.
"""

from __future__ import annotations

import pytest
import torch

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
    logged = [h for h in trainer.state.log_history if "exchange/shared_events" in h]
    assert logged, trainer.state.log_history
    entry = logged[0]
    assert entry["exchange/shared_events"] >= 0
    residual = entry["exchange/shared_residual"]
    assert 0.0 <= residual <= 1e-6  # dapo keeps (C) on-policy
    after = list(trainer.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after))  # the step moved the model


def test_objective_resolution_and_errors():
    from exchange.errors import ExchangeError
    from exchange.libraries.trl.trainer import resolve_objective

    assert callable(resolve_objective("grpo"))
    assert callable(resolve_objective("verl:vanilla/token-mean"))
    with pytest.raises(ExchangeError, match="objective="):
        resolve_objective("no_such_objective")
    with pytest.raises(ExchangeError, match="objective_params"):
        resolve_objective(lambda lp, r: lp.sum(), {"eps": 1})


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
    from exchange.checker.inspect import inspect, load_batch
    from exchange.objectives import get

    trainer = _trainer(tmp_path, "grpo", dump_batches=str(tmp_path / "batches"))
    trainer.train()
    files = sorted((tmp_path / "batches").glob("train-*.pt"))
    assert files
    logged = [h["exchange/shared_residual"] for h in trainer.state.log_history if "exchange/shared_residual" in h]
    found = [inspect(get("grpo").bind(), load_batch(f)).shared_residual for f in files]
    assert logged and min(found) - 1e-9 <= logged[0] <= max(found) + 1e-9  # TRL logs the mean over micro-batches
