"""CPU cost of one TRL optimizer step at 25M parameters, as the GPU design runs it.

Issue 42 asks for "the measured CPU cost of one step at 25M": the device command
(``experiments/llm/device_kit.py campaign -- --config RECIPE``, docs/experiments.md) runs
``run_llm.py`` on a recipe such as ``experiments/llm/recipes/grpo_norm_llama25m.yaml``:
the 25M Llama built in code (``exchange.lab.llm.MODEL_CONFIGS['llama-25m']``, nothing
downloaded), the recipe's batch (``per_device_train_batch_size`` rows = prompts x G, whole
groups), its completion length, its objective, the lab's instruments. This script trains
one (arm, seed) of that recipe through the same code (``exchange.lab.llm_run.run_arm``,
the function ``run_llm.py`` calls for every run) on the CPU, with ``--bf16 false
--use_cpu true``, and times every optimizer step from TRL's ``on_step_begin`` to the end
of the lab's ``on_step_end`` (generation, scoring, loss, backward, the step and the lab's
per-step instruments), less the held-out evaluation, which is timed on its own (the
recipe's ``eval_steps``; the last step always evaluates). Seconds are process CPU
seconds (``time.process_time``: every thread of the process) and wall seconds, with
``torch.set_num_threads(--threads)``; the first step (lazy initialisation, optimizer
state) is printed but left out of the median.

The warm start is cut to ``--sft-steps`` (default 2; the recipe's 300 SFT steps are a
one-off per seed, not a per-step cost): a barely trained policy samples responses of
every grammatical length up to ``max_completion_length``, so the step's generation is
not cheaper than after a full warm start. Runs go to a temporary folder (deleted).

    python benchmarks/llm_step_cost.py [--recipe experiments/llm/recipes/grpo_norm_llama25m.yaml] \
        [--arm grpo] [--seed 0] [--pilot] [--steps 4] [--threads 1] [--sft-steps 2] [-- run_llm.py overrides]

Prints one line per step and the medians. No ``--write-docs``: the number is quoted with
this command in docs/experiments.md (the GPU design's cost on the CPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore")


def _run_llm():
    spec = importlib.util.spec_from_file_location("run_llm", ROOT / "experiments" / "llm" / "run_llm.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_llm"] = module  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


class StepClock:
    """CPU and wall seconds per optimizer step, the held-out evaluation timed apart."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self._t = None
        self._eval = (0.0, 0.0)
        self.threads = None

    def begin(self) -> None:
        import torch

        self.threads = torch.get_num_threads()
        self._eval = (0.0, 0.0)
        self._t = (time.process_time(), time.perf_counter())

    def evaluating(self, fn):
        def timed(*a, **k):
            c, w = time.process_time(), time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self._eval = (self._eval[0] + time.process_time() - c, self._eval[1] + time.perf_counter() - w)
        return timed

    def end(self, step: int) -> None:
        cpu, wall = time.process_time() - self._t[0], time.perf_counter() - self._t[1]
        row = {"step": step, "cpu_s": cpu - self._eval[0], "wall_s": wall - self._eval[1],
               "eval_cpu_s": self._eval[0], "eval_wall_s": self._eval[1], "threads": self.threads}
        self.steps.append(row)
        print(f"[step {step}] {row['cpu_s']:.1f} CPU s, {row['wall_s']:.1f} wall s "
              f"(+ eval {row['eval_cpu_s']:.1f} CPU s), torch threads {self.threads}", flush=True)


def instrument(clock: StepClock) -> None:
    """Wrap the lab's run-log callback (the one run_arm builds for every run) so that each
    step is timed around everything the lab does in it; nothing else changes."""
    from exchange.lab import llm_run

    original = llm_run._run_log_callback

    def timed_callback(out, evaluate_fn, *a, **k):
        cb = original(out, clock.evaluating(evaluate_fn), *a, **k)
        begin, end = cb.on_step_begin, cb.on_step_end

        def on_step_begin(args, state, control, **kw):
            clock.begin()
            return begin(args, state, control, **kw)

        def on_step_end(args, state, control, **kw):
            result = end(args, state, control, **kw)
            clock.end(state.global_step)
            return result

        cb.on_step_begin, cb.on_step_end = on_step_begin, on_step_end
        return cb

    llm_run._run_log_callback = timed_callback


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        argv, rest = argv[: argv.index("--")], argv[argv.index("--") + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="experiments/llm/recipes/grpo_norm_llama25m.yaml")
    p.add_argument("--arm", default=None, help="arm name (default: the experiment's baseline)")
    p.add_argument("--seed", type=int, default=None, help="default: the first test seed (the first pilot seed with --pilot)")
    p.add_argument("--pilot", action="store_true",
                   help="time the arm's pilot run (the baseline's has the attribution instrument on)")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps (the first is left out of the median)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--sft-steps", type=int, default=2, help="warm-start steps (a one-off per seed, not per step)")
    a = p.parse_args(argv)
    if a.steps < 2:
        p.error("--steps must be >= 2 (the first step is left out of the median)")

    import torch

    torch.set_num_threads(a.threads)
    from exchange.lab import llm_run
    from exchange.lab.experiment import pilot_runs
    from exchange.lab.llm import build_model

    clock = StepClock()
    instrument(clock)
    with tempfile.TemporaryDirectory(prefix="llm_step_cost.") as tmp:
        overrides = ["--config", a.recipe, "--use_cpu", "true", "--bf16", "false", "--max_steps", str(a.steps),
                     "--sft_steps", str(a.sft_steps), "--save_steps", str(10**6), "--out", tmp, *rest]
        script, args, cfg = _run_llm().parse(overrides)
        arm = next((x for x in cfg.arms if (x.name == a.arm if a.arm else x.role == "baseline")), None)
        if arm is None:
            p.error(f"--arm {a.arm!r}: the experiment's arms are {[x.name for x in cfg.arms]}")
        seed = a.seed if a.seed is not None else (cfg.pilot_seeds if a.pilot else cfg.seeds)[0]
        pool = pilot_runs(dataclasses.replace(cfg, pilot_seeds=(seed,))) if a.pilot else cfg.runs((seed,))
        run = next((r for r in pool if r.arm == arm), None)
        if run is None:
            p.error(f"--arm {arm.name!r} has no pilot run (dose arms run with the test seeds)")
        if run.train.common_rollouts and arm.role != "baseline":
            p.error("--arm: with common rollouts a non-baseline arm replays the baseline's run; time the baseline")
        print(f"[llm_step_cost] {cfg.name} arm={arm.name} objective={arm.objective} seed={seed} "
              f"({'pilot, attribute=' + str(run.train.attribute) if a.pilot else 'test'}) "
              f"model={script.model_config} batch={args.per_device_train_batch_size} rows "
              f"(G={args.num_generations}) x ga {args.gradient_accumulation_steps}, "
              f"max_completion_length={args.max_completion_length}, steps_per_generation={args.steps_per_generation}, "
              f"num_iterations={args.num_iterations}, torch threads {a.threads}", flush=True)
        params = sum(t.numel() for t in build_model(script.model_config, seed).parameters())
        print(f"[llm_step_cost] {script.model_config}: {params / 1e6:.1f}M parameters", flush=True)
        c0, w0 = time.process_time(), time.perf_counter()
        llm_run.run_arm(run, args, Path(tmp) / run.experiment, model_config=script.model_config, device="cpu")
        total_cpu, total_wall = time.process_time() - c0, time.perf_counter() - w0
    timed = clock.steps[1:]
    med_cpu = statistics.median(s["cpu_s"] for s in timed)
    med_wall = statistics.median(s["wall_s"] for s in timed)
    evals = [s["eval_cpu_s"] for s in clock.steps if s["eval_cpu_s"] > 0]
    print(json.dumps({"recipe": a.recipe, "arm": arm.name, "seed": seed, "pilot": a.pilot,
                      "attribute": run.train.attribute, "model_config": script.model_config, "parameters": params,
                      "threads": a.threads,
                      "steps": clock.steps, "median_step_cpu_s": round(med_cpu, 2),
                      "median_step_wall_s": round(med_wall, 2),
                      "eval_cpu_s": [round(e, 2) for e in evals],
                      "whole_run_cpu_s": round(total_cpu, 1), "whole_run_wall_s": round(total_wall, 1)}, indent=1))
    print(f"[llm_step_cost] median of steps 2..{a.steps}: {med_cpu:.1f} CPU s per optimizer step "
          f"({med_wall:.1f} wall s), torch threads {a.threads}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
