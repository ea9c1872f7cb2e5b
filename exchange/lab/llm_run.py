"""The paired experiments at LLM scale: the CPU harness's runs, trained by TRL.

``experiments/llm/run_llm.py`` parses the arguments (TRL's ``TrlParser``) and calls
:func:`run_llm_experiment`. Everything a run measures and writes is the CPU harness's
own code, so ``exchange experiment report OUT/<experiment>`` reads an LLM run directory
exactly as it reads a CPU one:

- the task, its verifier and its grammar (:mod:`exchange.lab.tasks`), as text through
  the task tokenizer (:mod:`exchange.lab.llm`: token ids *are* task ids);
- the warm start (:func:`exchange.lab.sft.sft_warm_start`), cached per seed under
  ``OUT/<experiment>/_sft/`` and shared by both arms;
- the fixed eval prompts and drift probes (:func:`exchange.lab.trainer.fixed_eval_set`),
  ``init.json`` (:func:`~exchange.lab.trainer.initial_metrics`), the evaluations and the
  zero-credit certificate (:func:`~exchange.lab.trainer.evaluate`,
  :func:`~exchange.lab.trainer.certificate`);
- the per-minibatch instruments (:func:`exchange.lab.trainer.measure_minibatch`: shared
  residual, P1's update share, signed shared coefficients, clip fractions), the KL per
  step (:func:`exchange.lab.instruments.context_kl`) and cov(R, 1/L);
- the arms' objectives: a dose arm (issue 42) is the baseline's objective, as TRL binds it,
  through :func:`exchange.lab.dose.dose_arm` (the family of the design's surgical arm,
  ``Arm.dose_of``); a surgical arm's attribution (the pilot's
  delta_hat bracket) reads the residual of its base objective, as the CPU trainer's does;
- the run files (:mod:`exchange.lab.runlog`: ``metrics.jsonl`` with one row per step,
  0-based, the run-directory lock, ``env.json``, ``done.json``;
  :func:`exchange.lab.experiment.write_experiment_json`).

What differs from the CPU harness is the engine: TRL's ``GRPOTrainer`` with the arm's
objective as its loss (:class:`exchange.libraries.trl.trainer.ExchangeGRPOTrainer`),
so one *step* is one TRL optimizer step (``per_device_train_batch_size`` x
``gradient_accumulation_steps`` completions per process), a rollout is reused over
``num_iterations`` steps, the held-out evaluation runs every ``eval_steps`` steps on
prompts that training never samples, and checkpoints are TRL's ``checkpoint-<step>``
folders (a rerun resumes from the newest; ``metrics.jsonl`` is cut back to it).

With several processes (``accelerate launch``) the instruments are those of the main
process's slice of each batch (whole groups), and only the main process writes files.
transformers, trl and datasets are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from exchange.core import metric_keys as mk
from exchange.core.metric_keys import INTEGRATION_KEYS
from exchange.errors import InvalidArgument
from exchange.lab.config import ExperimentConfig, RunConfig
from exchange.lab.runlog import (
    MetricsLog, RunDir, RunLock, atomic_write_text, check_steps, read_metrics, record_environment,
)
from exchange.core.events import events
from exchange.lab.dose import dose_arm
from exchange.lab.drift import probe_scalars
from exchange.lab.experiment import pilot_then_test, rollout_sources, run_dir, write_experiment_json
from exchange.lab.grpo_fields import grpo_defaults, train_as_run
from exchange.lab.llm_replay import ReplayIdentity, record_completions, replay_completions
from exchange.lab.llm_step import RolloutStep
from exchange.lab.klstep import control_contexts
from exchange.lab.instruments import (
    context_kl, reward_length_covariance, update_share, zero_credit_gradient, zero_credit_mask,
)
from exchange.lab.llm import (
    LogitsOnly, MODEL_CONFIGS, build_model, check_task_tokenizer, constrain_to_grammar, exact_match_reward,
    grammar_fused_head, load_math_jsonl, render, task_reward, task_tokenizer, text_accuracy,
)
from exchange.lab.sft import sft_warm_start
from exchange.lab.tasks import STYLE
from exchange.lab.trainer import (
    base_shared_gradient, certificate, evaluate, fixed_eval_set, initial_metrics, measure_minibatch, rollout_hash,
)

__all__ = ["KEY_MAP", "experiment_defaults", "held_out_split", "warm_start", "run_llm_experiment", "run_arm",
           "run_fingerprint"]

# TRL log key -> harness key (the CPU harness's namespaces; other TRL keys go under trl/).
# exchange's own integration keys (exchange.core.metric_keys) are harness keys already and
# keep their names; where the harness's instruments measure the same quantity (the shared
# residual, per micro-batch as on the CPU), the instrument's value is the one kept.
KEY_MAP = {
    "reward": mk.REWARD, "loss": mk.LOSS, "entropy": mk.ENTROPY_ALL,
    "completions/mean_length": mk.LENGTH, "kl": mk.KL_REF, "grad_norm": mk.GRAD_NORM,
    "clip_ratio/low_mean": mk.CLIP_LOW, "clip_ratio/high_mean": mk.CLIP_HIGH,
    "clip_ratio/region_mean": mk.CLIP_REGION, "learning_rate": mk.LR,
    **{key: key for key in INTEGRATION_KEYS},
}
N_TRAIN_PROMPTS = 4096
"""Size of the training prompt set (fixed, so a resume with a larger max_steps sees the same data)."""


def _main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


# ------------------------------------------------------------------ settings
def experiment_defaults(cfg: ExperimentConfig) -> dict[str, Any]:
    """GRPOConfig defaults taken from the experiment TOML's ``[train]`` (a YAML recipe and
    the command line override them): :func:`exchange.lab.grpo_fields.grpo_defaults`, the
    one mapping; one TRL step = one minibatch of the rollout."""
    return grpo_defaults(cfg.train)


def held_out_split(task, eval_prompts: torch.Tensor, seed: int, n_train: int = N_TRAIN_PROMPTS,
                   share: float = 0.25) -> tuple[torch.Tensor, torch.Tensor]:
    """``(held_out [E, P], train [n_train, P])``: the distinct prompts of the seed's fixed
    eval draw, at most ``share`` of the task's prompt space (estimated from a 20,000-prompt
    draw), and training prompts from the seed's prompt stream with every held-out
    prompt removed, so the evaluation never sees a training prompt."""
    space = len(torch.unique(task.sample_prompts(20_000, torch.Generator().manual_seed(30_000)), dim=0))
    keep, seen = [], set()
    for row in eval_prompts.tolist():
        if tuple(row) not in seen and len(keep) < max(1, int(share * space)):
            seen.add(tuple(row))
            keep.append(row)
    gen = torch.Generator().manual_seed(1_000 * seed)  # the CPU harness's "prompts" stream seed
    train: list[list[int]] = []
    for _ in range(1000):
        train += [r for r in task.sample_prompts(n_train, gen).tolist() if tuple(r) not in seen]
        if len(train) >= n_train:
            break
    if len(train) < n_train:
        raise InvalidArgument(f"[task] name={task.name!r}: no training prompts outside the held-out set.")
    return torch.tensor(keep), torch.tensor(train[:n_train])


def _key(run: RunConfig, model_spec: str) -> str:
    return hashlib.sha256(f"{run.sft_key()}|{model_spec}".encode()).hexdigest()[:16]


def warm_start(run: RunConfig, task, model_config: str, cache_dir: Path, device: str):
    """The seed's SFT warm start of ``model_config`` (built in code, grammar inside its
    forward), computed once and saved with ``save_pretrained`` under ``cache_dir``; both
    arms load the same weights."""
    from transformers import AutoModelForCausalLM

    path = Path(cache_dir) / f"{model_config}-sft-{_key(run, model_config)}"
    if (path / "config.json").exists():
        model = AutoModelForCausalLM.from_pretrained(path)
        return constrain_to_grammar(model, task).to(device), path
    max_pos = task.prompt_len + run.train.max_response_len + task.max_response_len + 8
    model = constrain_to_grammar(build_model(model_config, run.seed, max_positions=max(64, max_pos)), task).to(device)
    if run.sft.steps:
        gen = torch.Generator().manual_seed(10_000 + run.seed)  # the CPU harness's warm-start stream
        sft_warm_start(LogitsOnly(model), task, run.sft.steps, run.sft.batch, run.sft.lr, gen)
    if _main_process():
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        model.save_pretrained(tmp)
        task_tokenizer().save_pretrained(tmp)
        if path.exists():  # another process saved it meanwhile
            import shutil

            shutil.rmtree(tmp)
        else:
            os.replace(tmp, path)
    return model, path


def _local_model(path: str, task, device: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(path).is_dir():
        raise InvalidArgument(f"model={path!r} is not a local directory; pass a saved Hugging Face model folder.")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if task is None:
        tokenizer.padding_side = "left"
        return AutoModelForCausalLM.from_pretrained(path).to(device), tokenizer
    check_task_tokenizer(tokenizer, path)
    return constrain_to_grammar(AutoModelForCausalLM.from_pretrained(path), task).to(device), tokenizer


# ------------------------------------------------------------- the trainer
def _trainer_class():
    """``ExchangeGRPOTrainer`` measuring the CPU harness's instruments on every
    micro-batch it trains on (built lazily: trl is imported here)."""
    from exchange.libraries.trl.callback import rollout_of
    from exchange.libraries.trl import contact
    from exchange.libraries.trl.trainer import ExchangeGRPOTrainer

    class InstrumentedGRPOTrainer(ExchangeGRPOTrainer):
        def __init__(self, *a, measure_update_norm: bool = True, instruments: bool = True, kl_target: float = 0.0,
                     probes=None, keep: float | None = None, surgical: bool = False, dose_of: str | None = None,
                     **k):
            self.exchange_measure_update_norm = measure_update_norm
            self.exchange_instruments = instruments
            self.exchange_step_metrics: dict[str, list] = {}
            self.exchange_rollout_hashes: list[int] = []
            self.exchange_kl_pending: list = []
            super().__init__(*a, **k)
            if keep is not None:  # a dose arm (issue 42): keeping a fraction of what the design's surgical arm
                self.exchange_objective = dose_arm(  # removes, the CPU arm's transform (exchange.lab.dose)
                    k["objective"], self.exchange_params, keep, dose_of, bound=self.exchange_objective)
            # the surgical arm's attribution reads the residual its base objective would add (issue 42's bracket)
            self.exchange_surgical_base = getattr(self.exchange_objective, "surgical_base", None) if surgical else None

            for m in (self.model, self.ref_model):  # TRL's fused head must see the task grammar too
                if m is not None:
                    grammar_fused_head(m, self.temperature)
            # the KL-normalised step and the attribution, per TRL rollout (exchange.lab.llm_step)
            self.exchange_generate_every = self.args.steps_per_generation * self.num_iterations
            self.exchange_rollout_step = None
            if kl_target > 0 or probes is not None:
                model = self.accelerator.unwrap_model(self.model)
                self.exchange_rollout_step = RolloutStep(
                    model, self._exchange_context_logp, self.exchange_generate_every, self.args.steps_per_generation,
                    kl_target, None if probes is None else probe_scalars(probes), LogitsOnly(model))

        def _exchange_rollout(self, inputs, per_token_logps):
            rollout = super()._exchange_rollout(inputs, per_token_logps)
            if self.exchange_instruments and self.model.training and self.exchange_objective is not None:
                self._exchange_measure(inputs, per_token_logps)
            return rollout

        def _exchange_measure(self, inputs, logprobs):
            cpu = {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
            mb = rollout_of(cpu, torch.float64, logprobs.detach().double().cpu())
            ev = events(mb)
            shared_occ = ev.shared[ev.ids.clamp(min=0)] & mb.mask
            params = list(self.model.parameters())
            step = self.exchange_rollout_step
            attribute = step is not None and step.probes is not None
            metrics, g_shared, kappa = measure_minibatch(
                self.exchange_objective, logprobs, mb, ev, zero_credit_mask(mb, ev), shared_occ, params,
                self.exchange_measure_update_norm or attribute)
            g_total = None
            if g_shared is not None:  # -grad loss = sum kappa grad l (the loss sees theta only through l)
                g_total = zero_credit_gradient(params, logprobs, kappa.to(logprobs), mb.mask.to(logprobs.device))
                metrics[mk.SHARED_UPDATE_SHARE] = update_share(g_shared, g_total, mass=float(kappa.abs().sum()))
            metrics[mk.COV_REWARD_INV_LEN] = reward_length_covariance(mb)
            spread = mb.group_max(mb.rewards) > mb.group_min(mb.rewards)  # [n], per row of each group
            metrics[mk.ZERO_SPREAD_GROUPS] = 1.0 - float(spread.double().mean())
            self.exchange_rollout_hashes.append(rollout_hash(mb))  # the data, before any objective
            attributed = g_shared
            if attribute and self.exchange_surgical_base is not None:
                # as exchange.lab.trainer._update: the surgical arm attributes the negation of the residual its base
                # objective would add here (absent from this step), i.e. minus its effect along this arm's path
                attributed = [-g for g in base_shared_gradient(self.exchange_surgical_base, params, logprobs, mb,
                                                               shared_occ)]
            if step is not None:
                step.micro_batch(contact.micro_step(self), inputs, control_contexts(mb),
                                 attributed if attribute else None, g_total if attribute else None)
            for key, value in metrics.items():
                self.exchange_step_metrics.setdefault(key, []).append(value)
            with torch.no_grad():  # KL(pi_before || pi_after) of this step at the micro-batch's contexts
                self.exchange_kl_pending.append((inputs, self._exchange_context_logp(inputs), shared_occ, mb.mask,
                                                 control_contexts(mb)))

        def _exchange_context_logp(self, inputs) -> torch.Tensor:
            model = self.accelerator.unwrap_model(self.model)
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
            att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
            p = inputs["prompt_ids"].shape[1]
            # autocast off: the "before" pass runs inside TRL's bf16 autocast (in _compute_loss),
            # the "after" pass outside it, and bf16 logits would put noise of ~1e-5 per step into a
            # KL compared at 10%. Under --bf16, though, accelerate has wrapped model.forward itself
            # in a bf16 autocast, which this does not undo (docs/experiments.md, "Precision")
            with torch.autocast(device_type=ids.device.type, enabled=False):
                logits = model(input_ids=ids, attention_mask=att).logits[:, p - 1: -1]
            return torch.log_softmax(logits.double(), -1).cpu()

        def exchange_end_step(self) -> dict[str, Any]:
            """The step's instrument row (means over its micro-batches); resets them. At a
            rollout's end, first the KL-normalised step and the attribution's sums."""
            row: dict[str, Any] = {}
            if self.exchange_rollout_step is not None:
                row.update(self.exchange_rollout_step.end_step(contact.micro_step(self)))
            if self.exchange_rollout_hashes:  # the step's micro-batches, in order (the CPU harness: its rollout)
                joined = hashlib.sha256(json.dumps(self.exchange_rollout_hashes).encode()).hexdigest()
                row[mk.ROLLOUT_HASH] = int(joined[:13], 16)  # 52 bits: exact in a JSON float
            for key, values in self.exchange_step_metrics.items():
                vals = [v for v in values if v is not None]
                row[key] = sum(vals) / len(vals) if vals else None
            kl = {mk.KL_ALL: [], mk.KL_SHARED: [], mk.KL_CONTROL: []}
            with torch.no_grad():
                for inputs, before, shared_occ, mask, control in self.exchange_kl_pending:
                    after = self._exchange_context_logp(inputs)
                    for key, where in ((mk.KL_ALL, mask), (mk.KL_SHARED, shared_occ),
                                       (mk.KL_CONTROL, control)):
                        value = context_kl(before, after, where)
                        if value is not None:
                            kl[key].append((value, int(where.sum())))
            for key, pairs in kl.items():
                n = sum(c for _, c in pairs)
                row[key] = sum(v * c for v, c in pairs) / n if n else None
            if self.exchange_rollout_step is not None and self.exchange_rollout_step.kl_target > 0:
                # the KL-normalised step acts per rollout: the trust-region KL is the rollout's (as in the
                # CPU harness, where one step is one rollout), logged at its last step
                row[mk.KL_CONTROL] = row.get(mk.KL_ROLLOUT_CONTROL)
            self.exchange_step_metrics, self.exchange_kl_pending, self.exchange_rollout_hashes = {}, [], []
            return row

    return InstrumentedGRPOTrainer


STEP_STATE = "exchange_rollout_step.pt"
"""Saved in each TRL checkpoint folder: the attribution's shadow moments and the cumulative KL."""


def _run_log_callback(out: Path, evaluate_fn, eval_steps: int, rows_per_step: int, wall_start: float,
                      deadline: float | None = None, resume: Path | None = None):
    """Writes the harness's ``metrics.jsonl`` rows (one per step, ``step`` 0-based) from
    TRL's logs, the trainer's instruments and ``evaluate_fn(model, last) -> dict`` (the
    held-out evaluation, every ``eval_steps`` steps and after the last). Past ``deadline``
    (``time.time()``), it stops training after the step with a checkpoint, so a later
    call resumes there."""
    from transformers import TrainerCallback

    from exchange.libraries.trl import contact

    class RunLogCallback(TrainerCallback):
        def __init__(self):
            self.trainer = None
            self.pending: dict[str, Any] = {}
            self.wall = wall_start
            self.t0 = None

        def on_train_begin(self, args, state, control, **kw):
            step = getattr(self.trainer, "exchange_rollout_step", None)
            if step is not None:
                step.begin(self.trainer.optimizer)
                if resume is not None and (resume / STEP_STATE).exists():
                    step.load_state_dict(torch.load(resume / STEP_STATE, weights_only=False))
            if not state.is_world_process_zero:
                return
            log = MetricsLog(out / "metrics.jsonl")
            if log.path.exists():  # resumed (or restarted): drop rows past the checkpoint, refuse a corrupt log
                log.truncate(state.global_step)
            check_steps(read_metrics(log.path), state.global_step, str(out))
            record_environment(out, state.global_step, device=str(args.device), world_size=args.world_size)

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            end_step = getattr(self.trainer, "exchange_end_step", None)
            row = end_step() if end_step is not None else {}
            if not state.is_world_process_zero:
                return
            step = state.global_step
            row.update({"step": step - 1, mk.SAMPLES: step * rows_per_step})
            if step % eval_steps == 0 or step == state.max_steps:
                model = self.trainer.accelerator.unwrap_model(self.trainer.model)
                was = model.training
                model.eval()
                row.update(evaluate_fn(model, step == state.max_steps))
                model.train(was)
            self.pending = row
            self.wall += time.perf_counter() - (self.t0 or time.perf_counter())
            rollout_step = getattr(self.trainer, "exchange_rollout_step", None)
            at_boundary = rollout_step is None or contact.micro_step(self.trainer) % self.trainer.exchange_generate_every == 0
            if deadline is not None and time.time() >= deadline and step < state.max_steps and at_boundary:
                control.should_save = True  # the next call resumes from this step
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kw):
            if not state.is_world_process_zero or not logs or "train_runtime" in logs or not self.pending:
                return
            row = self.pending
            for k, v in logs.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    row.setdefault(KEY_MAP.get(k, mk.trl_key(k)), float(v))
            MetricsLog(out / "metrics.jsonl").append(row)
            self.pending = {}

        def on_save(self, args, state, control, **kw):
            if state.is_world_process_zero:
                atomic_write_text(out / "wall.json", json.dumps({"step": state.global_step, "wall_s": self.wall}))
                step = getattr(self.trainer, "exchange_rollout_step", None)
                if step is not None:
                    from exchange.lab.runlog import atomic_torch_save

                    atomic_torch_save(step.state_dict(), out / f"checkpoint-{state.global_step}" / STEP_STATE)

    return RunLogCallback()


@dataclasses.dataclass
class _Setup:
    """What one (arm, seed) trains and measures: the synthetic task or a text JSONL."""

    policy: Any
    tokenizer: Any
    reward: Any
    prompts: list[dict[str, Any]]
    evaluate: Any  # (model, last: bool) -> dict of eval/... metrics
    init: Any  # model -> init.json
    instruments: bool
    probes: Any = None  # the fixed drift probes (Rollout), for the attribution


def _synthetic_setup(run: RunConfig, args, exp_dir: Path, model: str | None, model_config: str | None,
                     device: str) -> _Setup:
    task = run.task.build()
    eval_prompts, probes = fixed_eval_set(run, task)
    held_out, train_prompts = held_out_split(task, eval_prompts, run.seed)
    policy, tokenizer = (_local_model(model, task, device) if model is not None
                         else (warm_start(run, task, model_config, exp_dir / "_sft", device)[0], task_tokenizer()))
    max_len = args.max_completion_length
    if task.forced_style:  # issue 42: S written at the head of every sampled completion (generation-time only)
        from exchange.libraries.trl.contact import force_first_token

        force_first_token(policy, STYLE)

    def evaluate_fn(m, last: bool) -> dict[str, Any]:
        lm = LogitsOnly(m)
        return {**evaluate(lm, task, held_out, probes, max_len), **(certificate(lm, task, held_out, max_len) if last else {})}

    return _Setup(policy, tokenizer, task_reward(task, run.train.style_bonus),
                  [{"prompt": render(p)} for p in train_prompts.tolist()],
                  evaluate_fn, lambda m: initial_metrics(LogitsOnly(m), task, held_out, probes, max_len), True, probes)


def _text_setup(run: RunConfig, args, data: str, model: str, device: str) -> _Setup:
    rows = load_math_jsonl(data)
    held_out = [r for k, r in enumerate(rows) if k % 10 == 0][:512]
    train = [r for k, r in enumerate(rows) if k % 10 != 0]
    if not train:
        raise InvalidArgument(f"data={data!r} has {len(rows)} rows: too few to hold out every 10th and train.")
    policy, tokenizer = _local_model(model, None, device)
    n = args.max_completion_length
    return _Setup(policy, tokenizer, exact_match_reward, train,
                  lambda m, last: text_accuracy(m, tokenizer, held_out, n),
                  lambda m: {"step": -1, mk.SAMPLES: 0, **text_accuracy(m, tokenizer, held_out, n)}, False)


# ---------------------------------------------------------------- the runs
def _newest_checkpoint(out: Path) -> tuple[Path | None, int]:
    ckpts = sorted((int(p.name.split("-")[1]), p) for p in out.glob("checkpoint-*") if p.name.split("-")[1].isdigit())
    return (ckpts[-1][1], ckpts[-1][0]) if ckpts else (None, 0)


def run_fingerprint(run: RunConfig, args, **spec: Any) -> str:
    """The CPU trainer's fingerprint (:meth:`RunConfig.fingerprint`) of ``run`` as TRL trains
    it: its ``[train]`` read back from the GRPOConfig ``args`` (the one mapping,
    :func:`exchange.lab.grpo_fields.train_as_run`) and ``spec`` (model, model_config, data);
    steps left out, since a larger ``max_steps`` extends a finished run."""
    return dataclasses.replace(run, train=train_as_run(run.train, args)).fingerprint(extendable=True, **spec)


def run_arm(run: RunConfig, args, exp_dir: Path, *, model: str | None = None, model_config: str | None = None,
            data: str | None = None, device: str = "cpu", deadline: float | None = None,
            replay_from: str | Path | None = None) -> Path:
    """Train one (arm, seed) into ``exp_dir/<arm>/seed<k>``; resumes from the newest TRL
    checkpoint there (a finished run with fewer steps than ``args.max_steps`` is
    extended). ``args`` is the parsed GRPOConfig; ``data`` selects the text mode.
    ``deadline`` (``time.time()``): stop after the step that passes it, with a checkpoint
    and without ``done.json``. With ``[train] common_rollouts`` the baseline records its
    completions and every other arm replays them from ``replay_from``, the baseline's run
    directory of this seed (:mod:`exchange.lab.llm_replay`)."""
    from datasets import Dataset

    out = exp_dir / run.arm.name / f"seed{run.seed}"
    out.mkdir(parents=True, exist_ok=True)
    spec = {"model": model, "model_config": model_config, "data": data}
    fingerprint = run_fingerprint(run, args, **spec)
    main = _main_process()
    with RunDir(out, fingerprint, lock=main) as rd:  # non-main processes never write
        if rd.finished(args.max_steps):
            return out
        setup = (_text_setup(run, args, data, model, device) if data is not None
                 else _synthetic_setup(run, args, exp_dir, model, model_config, device))
        if main and not (out / "init.json").exists():
            setup.policy.eval()
            atomic_write_text(out / "init.json", json.dumps(setup.init(setup.policy)))
            setup.policy.train()
        if main:
            rd.write_config(**{**run.to_dict(), **spec, "grpo_config": json.loads(args.to_json_string())})
        ckpt, ckpt_step = _newest_checkpoint(out)
        wall = json.loads((out / "wall.json").read_text()) if (out / "wall.json").exists() else {}
        wall_start = float(wall.get("wall_s", 0.0)) if wall.get("step") == ckpt_step else 0.0
        rargs = copy.deepcopy(args)
        rargs.output_dir, rargs.seed = str(out), run.seed
        if setup.instruments:  # the grammar inside the forward needs the whole prefix at every generation step
            rargs.generation_kwargs = {**(rargs.generation_kwargs or {}), "use_cache": False}
        rows_per_step = rargs.per_device_train_batch_size * rargs.gradient_accumulation_steps * rargs.world_size
        callback = _run_log_callback(out, setup.evaluate, rargs.eval_steps, rows_per_step, wall_start, deadline,
                                     ckpt)
        cls = _trainer_class()
        trainer = cls(model=setup.policy, reward_funcs=[setup.reward], args=rargs,
                      train_dataset=Dataset.from_list(setup.prompts), processing_class=setup.tokenizer,
                      callbacks=[callback], objective=run.arm.objective, objective_params=run.arm.params or None,
                      # the experiment's arms are catalog objectives (their own clip widths, as on
                      # the CPU harness), and its instruments read whole groups in every micro-batch
                      trl_defaults=False, batching="groups",
                      measure_update_norm=run.train.measure_update_norm, instruments=setup.instruments,
                      kl_target=run.train.kl_target if setup.instruments else 0.0,
                      probes=setup.probes if run.train.attribute and setup.instruments else None,
                      keep=run.arm.keep if run.arm.role == "dose" else None, surgical=run.arm.role == "surgical",
                      dose_of=run.arm.dose_of)
        callback.trainer = trainer
        if run.train.common_rollouts:  # after construction: the model TRL generates with, and its step counter
            policy, identity = trainer.accelerator.unwrap_model(trainer.model), ReplayIdentity(run.experiment, run.seed)
            if run.arm.role == "baseline":
                record_completions(policy, out, identity, lambda: trainer.state.global_step)
            elif replay_from is None:
                raise InvalidArgument(f"[train] common_rollouts=true: arm {run.arm.name!r} (role {run.arm.role}) "
                                      "replays the baseline's completions; pass replay_from=<the baseline's run "
                                      "directory of this seed>.")
            else:
                replay_completions(policy, replay_from, identity, lambda: trainer.state.global_step)
        trainer.train(resume_from_checkpoint=str(ckpt) if ckpt is not None else None)
        # a run stopped by the time budget keeps its checkpoint and no done.json: it resumes
        if trainer.accelerator.is_main_process and trainer.state.global_step >= args.max_steps:
            rd.finish(args.max_steps, arm=run.arm.name, objective=run.arm.objective, seed=run.seed,
                      wall_s=callback.wall)
        return out


def _check_args(cfg: ExperimentConfig, args, text: bool) -> None:
    need = cfg.task.build().max_response_len
    if not text and args.max_completion_length < need:
        raise InvalidArgument(
            f"max_completion_length={args.max_completion_length} < {need}, the longest grammatical response of "
            f"[task] name={cfg.task.name!r} (max_filler={cfg.task.max_filler}); raise it (the TOML's "
            f"max_response_len={cfg.train.max_response_len} is the default).")
    if not text and args.use_vllm:
        raise InvalidArgument(
            "use_vllm=True: the synthetic task's grammar lives in the Hugging Face model's forward, which vLLM does "
            "not run, so vLLM would sample outside the grammar. Drop --use_vllm (the built-in models are 25M-150M "
            "parameters; transformers generation is enough).")
    if args.logging_steps != 1:
        raise InvalidArgument(f"logging_steps={args.logging_steps}: metrics.jsonl needs one row per step; set "
                              "logging_steps: 1 (the default here).")
    if not args.eval_steps or args.eval_steps < 1:
        raise InvalidArgument(f"eval_steps={args.eval_steps}: the held-out evaluation needs eval_steps >= 1.")
    if args.max_steps is None or args.max_steps < 1:
        raise InvalidArgument(f"max_steps={args.max_steps}: set the number of TRL optimizer steps (>= 1).")


def run_llm_experiment(cfg: ExperimentConfig, args, out_root: str | Path, *, model: str | None = None,
                       model_config: str | None = None, data: str | None = None, device: str | None = None,
                       seeds=None, arms=None, source: str | None = None, time_budget_s: float | None = None) -> Path:
    """Every (seed, arm) of ``cfg`` through TRL; returns ``out_root/<experiment>``.

    On the TOML's synthetic task (``data=None``) that directory is one ``exchange
    experiment report`` reads. ``model`` is a local model folder, ``model_config`` a
    built-in one (exactly one of them); ``data`` (text mode) needs ``model``.
    ``time_budget_s``: stop (with a checkpoint) once that much wall time has passed and
    start no further run; calling again resumes (experiments/llm/device_kit.py)."""
    deadline = None if time_budget_s is None else time.time() + float(time_budget_s)
    if (model is None) == (model_config is None):
        raise InvalidArgument("give exactly one of model=PATH (a local model folder) and model_config=NAME "
                              f"({', '.join(_model_names())}).")
    if model_config is not None and model_config not in _model_names():
        raise InvalidArgument(f"model_config={model_config!r} is not a built-in model; choose one of: "
                              f"{', '.join(_model_names())}.")
    if data is not None and model is None:
        raise InvalidArgument(f"data={data!r} (text mode) needs model=PATH, a local model with its own tokenizer; "
                              "model_config builds a model for the synthetic task only.")
    _check_args(cfg, args, data is not None)
    _check_rollout_options(cfg, args, data is not None)
    device = device or str(args.device)  # this process's device (cuda:<local rank> under accelerate)
    seeds = list(seeds or cfg.seeds)
    chosen = [a for a in cfg.arms if not arms or a.name in arms]
    if arms and len(chosen) != len(arms):
        raise InvalidArgument(f"arms={list(arms)}: unknown arm; the config has {[a.name for a in cfg.arms]}.")
    exp_dir = Path(out_root) / cfg.name
    exp_dir.mkdir(parents=True, exist_ok=True)
    # a second run_llm on this --out is refused (only the main process holds the lock)
    with RunLock(exp_dir) if _main_process() else contextlib.nullcontext():
        if _main_process():
            _write_meta(cfg, args, exp_dir, seeds, model or model_config, data, source)
        kw = {"model": model, "model_config": model_config, "data": data, "device": device, "deadline": deadline}
        trained = [False]  # every call trains at least one step of one run, whatever the time budget

        def train(runs: list[RunConfig]) -> bool:
            trained[0] = _train_runs(runs, args, out_root, kw, trained[0])
            return all((run_dir(out_root, r) / "done.json").exists() for r in runs)

        # the CPU harness's orchestration (exchange.lab.experiment.pilot_then_test): the pilot
        # (every arm on pilot_seeds, the baseline with the attribution, the sensitivity runs)
        # frozen into pilot.json before any test seed; a refused design runs no test seed
        pilot_then_test(cfg, out_root, train, [r for r in cfg.runs(tuple(seeds)) if r.arm in chosen],
                        writer=_main_process())
    return exp_dir


def _train_runs(runs: list[RunConfig], args, out_root: str | Path, kw: dict[str, Any], trained: bool) -> bool:
    """Train each run into its :func:`~exchange.lab.experiment.run_dir` within the time
    budget; returns whether any run trained (every call trains at least one step of one run)."""
    deadline = kw["deadline"]
    # common rollouts: every baseline first (it samples and records), then the arms that replay it
    work = sorted(zip(runs, rollout_sources(runs, out_root)), key=lambda rs: rs[1] is not None)
    for run, source in work:
        finished = (run_dir(out_root, run) / "done.json").exists()
        if deadline is not None and time.time() >= deadline and trained and not finished:
            print(f"[run_llm] time budget spent: arm={run.arm.name} seed={run.seed} waits for the next call", flush=True)
            continue
        if source is not None and not finished and not (Path(source) / "done.json").exists():
            print(f"[run_llm] arm={run.arm.name} seed={run.seed} replays the baseline's completions, which has not "
                  "finished: it waits for the next call", flush=True)
            continue
        print(f"[run_llm] {run.experiment} arm={run.arm.name} objective={run.arm.objective} seed={run.seed}", flush=True)
        run_arm(run, args, Path(out_root) / run.experiment, replay_from=source, **kw)
        trained = trained or not finished
    return trained


def _check_rollout_options(cfg: ExperimentConfig, args, text: bool) -> None:
    """The per-rollout options of issue 31 on the TRL engine (exchange.lab.llm_step):
    refused where they cannot be honoured, with the field and the fix."""
    tc = cfg.train
    on = {k: v for k, v in (("kl_target", tc.kl_target), ("attribute", tc.attribute),
                            ("pilot_seeds", list(cfg.pilot_seeds))) if v}
    if tc.common_rollouts and text:
        raise InvalidArgument(
            f"{cfg.name}: [train] common_rollouts=true with data= (text mode): the report checks common rollouts by "
            "the synthetic task's per-step rollout hashes, which text mode does not measure; drop --data or set "
            "common_rollouts = false.")
    if tc.common_rollouts and args.world_size > 1:
        raise InvalidArgument(
            f"{cfg.name}: [train] common_rollouts=true with world_size={args.world_size}: each process would record "
            "and replay its own slice of the baseline's completions (exchange.lab.llm_replay); run each seed as one "
            "process (several seeds in parallel on one GPU), or set common_rollouts = false.")
    if not on:
        return
    if text:
        raise InvalidArgument(f"{cfg.name}: {on} with data= (text mode): the KL-normalised step, the attribution and "
                              "the pilot need the synthetic task's probes and contexts; drop --data or set them off.")
    if args.world_size > 1:
        raise InvalidArgument(f"{cfg.name}: {on} with world_size={args.world_size}: each process would rescale by "
                              "its own slice's KL; run them on one process (or set them off).")
    every = args.steps_per_generation * args.num_iterations
    if every % args.gradient_accumulation_steps:
        raise InvalidArgument(
            f"{cfg.name}: {on}: steps_per_generation x num_iterations = {every} is not a multiple of "
            f"gradient_accumulation_steps={args.gradient_accumulation_steps}: a rollout must end at an optimizer step.")
    if args.bf16 or args.fp16:
        print(f"[run_llm] warning: {on} with bf16/fp16: accelerate runs every forward of the model in reduced "
              "precision, the attribution's probes and the KL included (exchange.lab.llm_step); at CPU scale pass "
              "--bf16 false.", flush=True)
    per_rollout = every // args.gradient_accumulation_steps
    if args.save_steps % per_rollout:
        raise InvalidArgument(
            f"{cfg.name}: {on}: save_steps={args.save_steps} is not a multiple of the {per_rollout} optimizer steps "
            "of one rollout; a checkpoint must fall between rollouts (set save_steps to a multiple).")


def _model_names() -> list[str]:
    return list(MODEL_CONFIGS)


def _write_meta(cfg: ExperimentConfig, args, exp_dir: Path, seeds: list[int], model_spec: str, data: str | None,
                source: str | None) -> None:
    """``experiment.json`` with ``[train]`` as TRL ran it (steps = max_steps, group size,
    epochs = num_iterations, ...), so the report's step count and text are the run's."""
    n_eval = cfg.train.eval_prompts
    if data is None:
        run0 = dataclasses.replace(cfg.runs()[0], seed=seeds[0])
        task = cfg.task.build()
        n_eval = len(held_out_split(task, fixed_eval_set(run0, task)[0], run0.seed)[0])
    tc = dataclasses.replace(train_as_run(cfg.train, args), eval_prompts=n_eval)
    previous = exp_dir / "experiment.json"
    if previous.exists():  # runs split over calls: keep the seeds earlier calls ran
        seeds = sorted(set(seeds) | set(json.loads(previous.read_text()).get("seeds", [])))
    meta = dataclasses.replace(cfg, seeds=tuple(seeds), train=tc,
                               model=dataclasses.replace(cfg.model, kind=f"hf:{model_spec}"))
    write_experiment_json(meta, exp_dir, source, engine="trl", model_spec=model_spec, data=data,
                          grpo_config=json.loads(args.to_json_string()))
