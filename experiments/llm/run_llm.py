"""The paired P1-P4 experiments at LLM scale: a Hugging Face causal LM trained by TRL.

Same arms as the CPU harness (an experiment TOML from experiments/configs/: the
objective spec strings, seeds, epochs per rollout), on a local model and a local
verifiable math JSONL ({"prompt": ..., "answer": ...} per line) with an exact-match
verifier (exchange.lab.llm.exact_match_reward). The engine is
exchange.libraries.trl.trainer.ExchangeGRPOTrainer, TRL's GRPOTrainer with the loss
replaced by the exchange objective; everything else (generation, optimizer,
schedule, accelerate/DeepSpeed, vLLM) is TRL's, identical across the two arms.

One GPU:
    python experiments/llm/run_llm.py --config experiments/configs/grpo_group_constant_norm.toml \
        --model /models/Qwen2.5-0.5B-Instruct --data data/math_train.jsonl --out runs/llm

Several GPUs (accelerate; add --use-vllm for vLLM generation):
    accelerate launch --num_processes 8 experiments/llm/run_llm.py --config ... --model ... --data ...

CPU smoke test (a tiny random Llama and tokenizer built in code, no downloads):
    python experiments/llm/run_llm.py --config experiments/configs/grpo_group_constant_norm.toml \
        --tiny --data tests/lab/data/tiny_math.jsonl --out /tmp/llm_smoke --max-steps 2 --seeds 0

Each (arm, seed) writes OUT/<experiment>/<arm>/seed<k>/ with TRL checkpoints
(rerunning resumes from the newest one), metrics.jsonl (namespaced keys, one row per
logging step) and done.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# TRL log key -> harness key (the same namespaces as the CPU harness)
KEY_MAP = {
    "reward": "charts/reward", "loss": "losses/loss", "entropy": "entropy/all",
    "completions/mean_length": "charts/length", "kl": "kl/ref", "grad_norm": "losses/grad_norm",
    "clip_ratio/low_mean": "clip/frac_low", "clip_ratio/high_mean": "clip/frac_high",
    "clip_ratio/region_mean": "clip/frac_region", "learning_rate": "losses/lr",
    # ExchangeGRPOTrainer's own measurements (its definitions: exchange/libraries/trl/trainer.py)
    "exchange/shared_residual": "tax/integration_shared_residual", "exchange/shared_events": "tax/shared_events",
    "exchange/learning_tax": "tax/integration_learning_tax",
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="experiment TOML (arms, seeds, epochs per rollout)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="local path of a HF causal LM (e.g. a 0.5B-1.5B instruct model)")
    src.add_argument("--tiny", action="store_true", help="tiny random model + tokenizer built in code (smoke test)")
    p.add_argument("--data", required=True, help="local JSONL with prompt and answer fields")
    p.add_argument("--out", default="runs/llm")
    p.add_argument("--seeds", type=int, nargs="+", help="override the config's seeds")
    p.add_argument("--arms", nargs="+", help="only these arm names")
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--num-generations", type=int, default=8, help="G, responses per prompt")
    p.add_argument("--per-device-batch", type=int, default=8, help="completions per device per step")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--max-completion-length", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--save-steps", type=int, default=25)
    p.add_argument("--use-vllm", action="store_true")
    p.add_argument("--bf16", action="store_true", help="bfloat16 training (GPUs)")
    return p.parse_args(argv)


class _MetricsCallback:
    """Appends TRL's logs as namespaced rows to metrics.jsonl (rank 0 only)."""

    def __new__(cls, path: Path):
        from transformers import TrainerCallback

        from exchange.lab.runlog import MetricsLog, read_metrics

        class Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                if state.is_world_process_zero and path.exists():  # resumed: drop rows past the checkpoint
                    MetricsLog(path).truncate(state.global_step + 1)

            def on_log(self, args, state, control, logs=None, **kw):
                if not state.is_world_process_zero or not logs:
                    return
                row = {"step": state.global_step}
                for k, v in logs.items():
                    if isinstance(v, (int, float)):
                        row[KEY_MAP.get(k, f"trl/{k}")] = float(v)
                if read_metrics(path) and read_metrics(path)[-1]["step"] == row["step"]:
                    return  # final summary log of the same step
                MetricsLog(path).append(row)

        return Callback()


def _trainer_class():
    try:
        from exchange.libraries.trl.trainer import ExchangeGRPOTrainer
    except ImportError as err:
        from exchange.errors import InvalidArgument

        raise InvalidArgument(
            f"exchange.libraries.trl.trainer.ExchangeGRPOTrainer is unavailable ({err}); install trl==1.16.0 "
            "(pip install 'exchange[trl]') on a checkout that has the TRL integration."
        ) from None
    return ExchangeGRPOTrainer


def _objective_kwargs(cls, arm) -> dict:
    """How the trainer takes the arm's objective: a spec string (``objective=``, with
    ``objective_params=``) or a bound ``loss_fn=``."""
    import inspect

    accepted = inspect.signature(cls.__init__).parameters
    if "objective" in accepted:
        if arm.params and "objective_params" not in accepted:
            return {"objective": arm.loss_fn()}  # params already bound
        return {"objective": arm.objective, **({"objective_params": arm.params} if arm.params else {})}
    if "loss_fn" in accepted:
        return {"loss_fn": arm.loss_fn()}
    from exchange.errors import InvalidArgument

    raise InvalidArgument(f"{cls.__name__} takes neither objective= nor loss_fn=; cannot set arm {arm.name!r}.")


def run_arm(args, cfg, arm, seed: int, rows: list[dict]) -> Path:
    """Train one (arm, seed); resumes from the newest TRL checkpoint in its directory."""
    from datasets import Dataset
    from trl import GRPOConfig

    from exchange.lab.llm import exact_match_reward, tiny_causal_lm
    from exchange.lab.runlog import atomic_write_text

    out = Path(args.out) / cfg.name / arm.name / f"seed{seed}"
    if (out / "done.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    if args.tiny:
        model, tokenizer = tiny_causal_lm(seed)
    else:
        from transformers import AutoTokenizer

        model, tokenizer = args.model, AutoTokenizer.from_pretrained(args.model, padding_side="left")
    gcfg = GRPOConfig(
        output_dir=str(out), seed=seed, max_steps=args.max_steps, learning_rate=args.lr,
        num_generations=args.num_generations, per_device_train_batch_size=args.per_device_batch,
        gradient_accumulation_steps=args.grad_accum, num_iterations=cfg.train.epochs,
        max_completion_length=args.max_completion_length, temperature=args.temperature,
        logging_steps=1, save_steps=args.save_steps, report_to=[], use_vllm=args.use_vllm,
        bf16=args.bf16, use_cpu=args.tiny, beta=0.0,
    )
    cls = _trainer_class()
    trainer = cls(
        model=model, reward_funcs=[exact_match_reward], args=gcfg, train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer, callbacks=[_MetricsCallback(out / "metrics.jsonl")],
        **_objective_kwargs(cls, arm),
    )
    resume = any(out.glob("checkpoint-*"))
    trainer.train(resume_from_checkpoint=True if resume else None)
    if trainer.accelerator.is_main_process:
        atomic_write_text(out / "done.json", json.dumps({"arm": arm.name, "objective": arm.objective,
                                                         "seed": seed, "steps": trainer.state.global_step}))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    from exchange.lab.config import load_experiment
    from exchange.lab.llm import load_math_jsonl

    cfg = load_experiment(args.config)
    rows = load_math_jsonl(args.data)
    seeds = args.seeds or list(cfg.seeds)
    arms = [a for a in cfg.arms if not args.arms or a.name in args.arms]
    for seed in seeds:
        for arm in arms:
            print(f"[run_llm] {cfg.name} arm={arm.name} objective={arm.objective} seed={seed}", flush=True)
            run_arm(args, cfg, arm, seed, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
