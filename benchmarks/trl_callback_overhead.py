"""Overhead of ExchangeCallback on TRL's plain GRPOTrainer: same model, same batch, interleaved.

Both sides build the same tiny Qwen2 from a config in code (same seed, nothing
downloaded), the same prompts, the same GRPOConfig (G completions of at most --max-new
tokens, gradient accumulation --ga), and train --steps optimizer steps; the only
difference is ``callbacks=[ExchangeCallback()]``. Rounds alternate which side runs
first; each round times ``trainer.train()`` after a warm-up step. Prints the median
seconds per step of each side and their ratio (goal: <= 1.05).

    python benchmarks/trl_callback_overhead.py [--rounds 5] [--steps 6] [--hidden 64] [--max-new 16] [--write-docs]

``--write-docs`` also writes the results into the section ``trl_callback_overhead:overhead``
of docs/performance.md (benchmarks/_page.py), with the date, commit, machine and this
command line; without it the run only prints.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _page import Provenance, add_flag, table, write_section  # noqa: E402

warnings.filterwarnings("ignore")


def _model_and_tokenizer(hidden: int, layers: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    specials = ["<pad>", "<eos>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + [chr(c) for c in range(ord("a"), ord("z") + 1)])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=32, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0,
                      eos_token_id=1, bos_token_id=1, tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg), tok


def _reward(completions, **kwargs):
    return [float(sum(map(ord, c)) % 5) for c in completions]


def run(with_callback: bool, a) -> float:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from exchange.core.metric_keys import SHARED_RESIDUAL
    from exchange.libraries.trl.callback import ExchangeCallback

    model, tok = _model_and_tokenizer(a.hidden, a.layers)
    args = GRPOConfig(
        output_dir="/tmp/exchange-bench-trl", report_to="none", use_cpu=True, max_steps=a.steps + 1,
        logging_steps=1, per_device_train_batch_size=a.group * 2, num_generations=a.group,
        gradient_accumulation_steps=a.ga, max_completion_length=a.max_new, learning_rate=1e-4,
        save_strategy="no", seed=0, bf16=False, disable_tqdm=True,
    )
    data = Dataset.from_dict({"prompt": ["a b c", "d e f", "g h", "i j k"] * 16})
    trainer = GRPOTrainer(model=model, reward_funcs=_reward, args=args, train_dataset=data, processing_class=tok,
                          callbacks=[ExchangeCallback()] if with_callback else None)
    stamps: list[float] = []
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def on_step_end(self, *args, **kwargs):
            stamps.append(time.perf_counter())

    trainer.add_callback(Clock())
    trainer.train()
    if with_callback:
        assert any(SHARED_RESIDUAL in h for h in trainer.state.log_history)
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)  # the first step is the warm-up


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--max-new", type=int, default=16)
    p.add_argument("--ga", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    add_flag(p)
    a = p.parse_args()
    prov = Provenance()
    torch.set_num_threads(a.threads)
    plain, cb = [], []
    for r in range(a.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        for side in order:
            (cb if side else plain).append(run(side, a))
    mp, mc = statistics.median(plain), statistics.median(cb)
    print(f"plain GRPOTrainer        : {mp * 1e3:8.1f} ms/step (median of {a.rounds})  {plain}")
    print(f"GRPOTrainer+ExchangeCallback: {mc * 1e3:8.1f} ms/step (median of {a.rounds})  {cb}")
    print(f"ratio callback/plain: {mc / mp:.3f}")
    if a.write_docs:
        from importlib import metadata

        body = (f"TRL {metadata.version('trl')}'s `GRPOTrainer` with and without `ExchangeCallback()`: a tiny Qwen2"
                f" (hidden {a.hidden}, {a.layers} layers) built in code, G={a.group}, at most {a.max_new} new tokens,"
                f" gradient accumulation {a.ga}, {a.steps} timed optimizer steps after a warm-up, {a.threads} torch"
                f" thread(s), {a.rounds} rounds alternating which side runs first; wall seconds per step (goal: a ratio"
                " <= 1.05).\n\n"
                + table(["side", "median ms / step", "every round, ms / step"],
                        [["plain `GRPOTrainer`", f"{mp * 1e3:.1f}", ", ".join(f"{x * 1e3:.1f}" for x in plain)],
                         ["with `ExchangeCallback`", f"{mc * 1e3:.1f}", ", ".join(f"{x * 1e3:.1f}" for x in cb)]])
                + f"\n\nRatio callback / plain: **{mc / mp:.3f}**.")
        write_section("trl_callback_overhead", "overhead", body, prov)


if __name__ == "__main__":
    main()
