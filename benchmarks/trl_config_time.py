"""Where the time of ``exchange check --trl-config RECIPE`` goes (issue 41: <= 15 s asked).

Each recipe is checked in a fresh process at default settings (``--json``, 200 examples,
as a user runs it), with process CPU time (user + sys, every thread) taken around:

- ``imports``: ``import exchange.cli`` and ``from trl import GRPOConfig, GRPOTrainer``
  (transformers, torch, datasets: what running TRL's own code needs);
- ``trl scoring``: TRL's ``_generate_and_score_completions`` on the shell
  (``exchange.libraries.trl.contact._score``, memo misses only), with its count;
- ``trl loss``: TRL's ``_compute_loss`` on the shell (``contact.shell_loss``), with its count;
- ``adapter``: the rest of the ``trl:`` loss (``exchange.libraries.trl.loss._loss``:
  the schedule, the memo, the micro-batch inputs);
- ``checker``: the rest of the check (the twin's and the floor's modes outside the loss,
  autograd's backward, the properties, probes and mechanisms).

Every share is of the same run's total, so the ratios hold on a loaded machine; the
absolute seconds do not. The recipes are those of ``tests/libraries/trl`` (grpo and dapo
of test_recipe.py, the loss types of test_schedule.py at the issue's schedules, TRL's
GSPO recipe at GA 1 / ``steps_per_generation`` 4).

    python benchmarks/trl_config_time.py [--recipe NAME ...] [--max-examples 200]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's exchange

RECIPES = {
    "grpo": "loss_type: grpo\nbeta: 0.04\nepsilon: 0.2\nnum_generations: 8\n",
    "dapo": "loss_type: dapo\nepsilon: 0.2\nepsilon_high: 0.28\nscale_rewards: none\nmask_truncated_completions: true\n",
    "dr_grpo": "loss_type: dr_grpo\nscale_rewards: false\ngradient_accumulation_steps: 2\nper_device_train_batch_size: 8\n",
    "bnpo": "loss_type: bnpo\ngradient_accumulation_steps: 2\nepsilon_high: 0.28\n",
    "cispo": "loss_type: cispo\nepsilon_high: 5.0\n",
    "sapo": "loss_type: sapo\n",
    "gspo": "loss_type: grpo\nimportance_sampling_level: sequence\nepsilon: 0.0003\nepsilon_high: 0.0004\n"
            "gradient_accumulation_steps: 1\nsteps_per_generation: 4\nper_device_train_batch_size: 4\n"
            "num_generations: 4\nbeta: 0.0\n",
}
PHASES = ("imports", "trl scoring", "trl loss", "adapter", "checker")


def _one(path: str, max_examples: int) -> dict:
    """One check in this process: CPU seconds per phase and the calls counted."""
    import contextlib
    import functools
    import io

    cpu = time.process_time
    start = cpu()
    import exchange.cli
    from trl import GRPOConfig, GRPOTrainer  # noqa: F401

    imported = cpu()
    from exchange.libraries.trl import contact
    from exchange.libraries.trl import loss as adapter

    spent = {"trl scoring": 0.0, "trl loss": 0.0, "loss": 0.0}
    calls = {"trl scoring": 0, "trl loss": 0}

    def timed(module, name, key):
        inner = getattr(module, name)

        @functools.wraps(inner)
        def wrapper(*args, **kwargs):
            t = cpu()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[key] += cpu() - t
                if key in calls:
                    calls[key] += 1

        setattr(module, name, wrapper)

    timed(contact, "_score", "trl scoring")
    timed(contact, "shell_loss", "trl loss")
    timed(adapter, "_loss", "loss")  # bound by name when the recipe's loss_fn is built, after this
    with contextlib.redirect_stdout(io.StringIO()):
        code = exchange.cli.main(["check", "--trl-config", path, "--json", "--max-examples", str(max_examples)])
    end = cpu()
    seconds = {"imports": imported - start, "trl scoring": spent["trl scoring"], "trl loss": spent["trl loss"],
               "adapter": spent["loss"] - spent["trl scoring"] - spent["trl loss"],
               "checker": (end - imported) - spent["loss"]}
    return {"exit": code, "seconds": seconds, "calls": calls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", action="append", choices=sorted(RECIPES), help="default: every recipe")
    ap.add_argument("--max-examples", type=int, default=200)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: check this recipe file in this process
    a = ap.parse_args()
    if a.one:
        print(json.dumps(_one(a.one, a.max_examples)))
        return
    root = Path(__file__).resolve().parents[1]
    print(f"{'recipe':8} {'wall s':>7} {'cpu s':>6}  " + "  ".join(f"{p:>11}" for p in PHASES) + "  scorings  losses")
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.recipe or list(RECIPES):
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(RECIPES[name])
            t = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "--one", str(path), "--max-examples", str(a.max_examples)],
                                 cwd=root, capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t
            got = json.loads(out.stdout.strip().splitlines()[-1])
            total = sum(got["seconds"].values())
            shares = "  ".join(f"{got['seconds'][p] / total:>10.0%} " for p in PHASES)
            print(f"{name:8} {wall:7.1f} {total:6.1f}  {shares}  {got['calls']['trl scoring']:8d}  "
                  f"{got['calls']['trl loss']:6d}")


if __name__ == "__main__":
    main()
