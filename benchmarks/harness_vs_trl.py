"""Steps per second: the exchange harness vs TRL's GRPOTrainer, same tiny model and batch.

Both sides train the same random tiny Llama (exchange.lab.llm.tiny_causal_lm, built in
code) on the same prompts, with the same batch (prompts x G completions of at most
--max-new tokens), one optimizer step per generation step, the GRPO loss, on CPU with
one thread. Measured in one run; prints both rates and their ratio.

    python benchmarks/harness_vs_trl.py [--steps 10] [--prompts 4] [--group 4] [--max-new 8]

Needs trl (pip install trl==1.16.0); without it only the harness rate is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _prompts(n: int) -> list[dict]:
    return [{"prompt": f"what is {i % 10} plus {(3 * i) % 10} ?", "answer": str(i % 10 + (3 * i) % 10)}
            for i in range(n)]


def harness_steps_per_s(steps: int, prompts: int, group: int, max_new: int) -> float:
    """The harness's step on a HF model: sample G per prompt, verify, objective, update."""
    from exchange.core.coefficients import token_coefficients
    from exchange.lab.llm import LogitsOnly, exact_match_reward, tiny_causal_lm
    from exchange.lab.generation import generate
    from exchange.models import response_logprobs
    from exchange.objectives import resolve
    from exchange.core.rollout import Rollout

    hf, tok = tiny_causal_lm(0)
    model = LogitsOnly(hf)
    loss_fn = resolve("grpo")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = _prompts(prompts)
    enc = tok([d["prompt"] for d in data], return_tensors="pt", padding=True)
    ids = enc.input_ids.repeat_interleave(group, 0)
    gen = torch.Generator().manual_seed(0)
    t0 = None
    for step in range(steps + 1):  # step 0 warms up (imports, allocator)
        if step == 1:
            t0 = time.perf_counter()
        tokens, mask, _ = generate(model, ids, max_new, 1.0, gen)
        texts = tok.batch_decode(torch.where(mask, tokens, 0), skip_special_tokens=True)
        rewards = torch.tensor(exact_match_reward(texts, answer=[d["answer"] for d in data for _ in range(group)]),
                               dtype=torch.float64)
        ro = Rollout(tokens=tokens, mask=mask, rewards=rewards, group=torch.arange(prompts).repeat_interleave(group),
                     old_logprobs=torch.zeros(tokens.shape, dtype=torch.float64), prompt_tokens=ids,
                     prompt_mask=torch.ones(ids.shape, dtype=torch.bool))
        with torch.no_grad():
            ro = ro.replace(old_logprobs=response_logprobs(model, ro).double())
        logprobs = response_logprobs(model, ro).double()
        token_coefficients(loss_fn, logprobs.detach(), ro)  # the harness's instrumentation
        loss = loss_fn(logprobs, ro)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return steps / (time.perf_counter() - t0)


def trl_steps_per_s(steps: int, prompts: int, group: int, max_new: int) -> float:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from exchange.lab.llm import exact_match_reward, tiny_causal_lm

    hf, tok = tiny_causal_lm(0)
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, max_steps=steps + 1, learning_rate=1e-3, num_generations=group,
                         per_device_train_batch_size=prompts * group, max_completion_length=max_new,
                         logging_steps=1000, save_strategy="no", report_to=[], use_cpu=True, seed=0,
                         loss_type="grpo", beta=0.0, disable_tqdm=True)
        trainer = GRPOTrainer(model=hf, reward_funcs=[exact_match_reward], args=cfg,
                              train_dataset=Dataset.from_list(_prompts(prompts) * (steps + 2)),
                              processing_class=tok, callbacks=[Clock()])
        trainer.train()
    return steps / (times[-1] - times[0])  # first step excluded (warm-up)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--max-new", type=int, default=8)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    h = harness_steps_per_s(a.steps, a.prompts, a.group, a.max_new)
    print(f"harness  : {h:8.2f} steps/s  ({a.prompts} prompts x G={a.group}, <= {a.max_new} new tokens)")
    if importlib.util.find_spec("trl") is None:
        print("trl      : not installed (pip install trl==1.16.0); no ratio")
        return 0
    t = trl_steps_per_s(a.steps, a.prompts, a.group, a.max_new)
    print(f"trl      : {t:8.2f} steps/s  (GRPOTrainer, same model, batch and length)")
    print(f"ratio    : harness / trl = {h / t:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
