"""The paired P1-P4 experiments at LLM scale: a Hugging Face causal LM trained by TRL.

Arguments are parsed by TRL's own ``TrlParser``: this script's options (below) and
every ``GRPOConfig`` flag (``--learning_rate``, ``--num_generations``, ``--bf16``,
``--use_vllm``, ...), with a YAML recipe through ``--config recipe.yaml`` (keys of
either kind). Precedence: the experiment TOML's ``[train]`` gives the defaults
(exchange.lab.llm_run.experiment_defaults), the YAML recipe overrides them, the
command line overrides both.

The same arms, task, instruments, verdict logic and report as the CPU harness
(exchange.lab.llm_run reuses its code): the run directory is one that
``python -m exchange experiment report OUT/<experiment>`` reads.

One GPU, a model built in code (no downloads), warm-started by SFT on the task:
    python experiments/llm/run_llm.py --experiment experiments/configs/grpo_group_constant_norm.toml \
        --model_config llama-25m --config experiments/llm/recipes/grpo_norm_llama25m.yaml --out runs/llm
    python -m exchange experiment report runs/llm/grpo_norm

A local model folder that uses the task tokenizer (e.g. a warm start saved under
OUT/<experiment>/_sft/): ``--model PATH`` instead of ``--model_config``.
Several GPUs: ``accelerate launch --num_processes 8 experiments/llm/run_llm.py ...``.

Text mode (a local model and a verifiable math JSONL, exact-match reward): ``--model
PATH --data train.jsonl``: both arms train and log TRL's metrics and the held-out
accuracy (every 10th row is held out); the P1-P3 instruments need the synthetic
task's known credit structure, so ``experiment report`` reads synthetic runs only.

Each (arm, seed) writes OUT/<experiment>/<arm>/seed<k>/: TRL's checkpoint-<step>
folders (a rerun resumes from the newest; a larger --max_steps extends a finished run),
metrics.jsonl, init.json, config.json, env.json, done.json.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from exchange.lab.llm import MODEL_CONFIGS  # noqa: E402  (light: no transformers import)


@dataclass
class LLMArguments:
    """The script's own options (every other flag is a GRPOConfig field)."""

    experiment: str = field(metadata={"help": "experiment TOML (arms, seeds, task, [train] defaults), e.g. "
                                              "experiments/configs/grpo_group_constant_norm.toml"})
    model: str | None = field(default=None, metadata={"help": "local Hugging Face model folder"})
    model_config: str | None = field(default=None, metadata={
        "help": f"a model built in code and warm-started by SFT on the task: {', '.join(MODEL_CONFIGS)}"})
    data: str | None = field(default=None, metadata={
        "help": "text mode: a local JSONL with prompt and answer fields (with --model); default: the TOML's task"})
    out: str = field(default="runs/llm", metadata={"help": "output root; runs go to OUT/<experiment>/<arm>/seed<k>"})
    device: str | None = field(default=None, metadata={"help": "cuda, cpu, ... (default: cuda when available)"})
    sft_steps: int | None = field(default=None, metadata={"help": "override the TOML's [sft] steps (warm start)"})
    sft_lr: float | None = field(default=None, metadata={"help": "override the TOML's [sft] lr"})
    sft_batch: int | None = field(default=None, metadata={"help": "override the TOML's [sft] batch"})
    seeds: list[int] | None = field(default=None, metadata={"help": "override the TOML's seeds"})
    arms: list[str] | None = field(default=None, metadata={"help": "only these arm names"})
    time_budget_s: float | None = field(default=None, metadata={
        "help": "stop (with a checkpoint) after this many seconds and start no further run; call again to resume "
                "(experiments/llm/device_kit.py uses it to fit a time-limited GPU call)"})


def _experiment_path(argv: list[str]) -> str | None:
    """``--experiment`` from the command line, else from the YAML recipe."""
    for flag in ("--experiment",):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return argv[argv.index(flag) + 1]
        hits = [a for a in argv if a.startswith(flag + "=")]
        if hits:
            return hits[-1].split("=", 1)[1]
    if "--config" in argv and argv.index("--config") + 1 < len(argv):
        import yaml

        data = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text()) or {}
        if isinstance(data, dict) and data.get("experiment"):
            return str(data["experiment"])
    return None


def parse(argv: list[str] | None = None):
    """``(LLMArguments, GRPOConfig, ExperimentConfig)`` from ``argv`` through TRL's parser."""
    from trl import GRPOConfig, TrlParser

    from exchange.errors import InvalidArgument
    from exchange.lab.config import load_experiment
    from exchange.lab.llm_run import experiment_defaults

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = TrlParser((LLMArguments, GRPOConfig))
    path = _experiment_path(argv)
    if path is None and not any(a in ("-h", "--help") for a in argv):
        raise InvalidArgument("experiment is missing: pass --experiment CONFIG.toml (or experiment: in the YAML "
                              "recipe), e.g. experiments/configs/grpo_group_constant_norm.toml.")
    cfg = load_experiment(path) if path else None
    if cfg is not None:
        parser.set_defaults_with_config(**experiment_defaults(cfg))
    try:
        script, args = parser.parse_args_and_config(argv)
    except ValueError as err:  # GRPOConfig.__post_init__ or an unknown YAML key
        raise InvalidArgument(f"the GRPOConfig arguments are rejected: {err}") from None
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    if "--model" in given and "--model_config" not in given:
        script.model_config = None  # --model PATH on the command line replaces the recipe's model_config
    if "--model_config" in given and "--model" not in given:
        script.model = None
    sft = {k: getattr(script, f"sft_{k}") for k in ("steps", "lr", "batch") if getattr(script, f"sft_{k}") is not None}
    if sft:
        import dataclasses

        cfg = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, **sft))  # a new warm start (new cache key)
    return script, args, cfg


def main(argv: list[str] | None = None) -> int:
    from exchange.errors import ExchangeError

    try:
        script, args, cfg = parse(argv)
        from exchange.lab.llm_run import run_llm_experiment

        exp = run_llm_experiment(cfg, args, script.out, model=script.model, model_config=script.model_config,
                                 data=script.data, device=script.device, seeds=script.seeds, arms=script.arms,
                                 source=script.experiment, time_budget_s=script.time_budget_s)
        if script.data is None:
            print(f"[run_llm] done: python -m exchange experiment report {exp}", flush=True)
    except ExchangeError as err:
        print(f"run_llm: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
