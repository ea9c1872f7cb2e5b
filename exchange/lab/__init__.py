"""The confirmation harness: paired training experiments for P1-P4 and the falsifier.

One concept per module; the trainer is one readable loop whose maths comes from the
package (``exchange.core.coefficients``, ``exchange.core.events``, ``exchange.objectives``):

- ``tasks``: synthetic verifiable tasks, the grammar that makes template/S/filler
  zero-credit by construction, and the certificate that measures it;
- ``sft``, ``generation``: warm start and group sampling of a policy (``TinyLM`` or the
  no-spillover control ``tabular.TabularLM``);
- ``instruments``, ``drift``: learning tax, shared-event share and signed coefficients,
  clipping by sign, entropy, KL, fixed-context probes;
- ``runlog``: atomic writes, metrics log, checkpoints, run lock, step checks, environment;
- ``config``, ``trainer``, ``experiment``: TOML experiments, one run, all runs;
- ``surgical`` arms (``exchange.objectives.surgical``), ``klstep`` (the KL-normalised
  step), ``attribution`` (the shared part sent through the optimiser: delta_hat),
  ``certificate`` (the forced-prefix credit of S), ``pilot`` (frozen predictions),
  ``verdict`` (the verdict rule), ``predictions``, ``experiment_decision`` (an experiment's
  typed results), ``experiment_report``, ``plots``: predict, then test, and report from
  typed results;
- ``llm``, ``llm_run``: the LLM-scale runner's pieces (the task as text through a task
  tokenizer, the grammar inside a HF model, Llama/Qwen2 built in code, the text-mode
  verifier) and the paired runs through TRL with the harness's own instruments, eval and
  run files (``experiments/llm/run_llm.py`` is its command line); ``grpo_fields``: the one
  ``[train]`` <-> ``GRPOConfig`` mapping. Both engines share the fingerprint
  (``RunConfig.fingerprint``), the orchestration (``experiment.pilot_then_test``) and the
  metric keys (``exchange.core.metric_keys``).

matplotlib, scipy, tqdm, transformers and trl are imported inside the functions that
use them.
"""

from exchange.lab.config import Arm, ExperimentConfig, RunConfig, load_experiment, parse_experiment
from exchange.lab.experiment import run_dir, run_experiment
from exchange.lab.experiment_report import report_experiment, report_experiments
from exchange.lab.verdict import Decision, Pilot, Verdict, decide_p4, decide_signed
from exchange.lab.tasks import TASKS, Task, get_task, verify
from exchange.lab.trainer import train_run

__all__ = [
    "Arm", "ExperimentConfig", "RunConfig", "load_experiment", "parse_experiment",
    "run_dir", "run_experiment", "train_run",
    "report_experiment", "report_experiments", "Decision", "Pilot", "Verdict", "decide_signed", "decide_p4",
    "TASKS", "Task", "get_task", "verify",
]
