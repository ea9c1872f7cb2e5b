"""Common rollouts on the TRL engine (issue 42): the baseline's completions, replayed.

With ``[train] common_rollouts`` every arm of a seed trains on the rollouts the baseline
arm sampled, so the arms differ only in the mechanism, never in the sampling noise. The
CPU harness stores each step's :class:`~exchange.core.rollout.Rollout` and re-scores it
under the replaying policy (:func:`exchange.lab.trainer.replay_rollout`). Under TRL the
same cut sits at the model's ``generate``, which TRL 1.16 calls once per generation
batch (``unwrapped_model.generate(input_ids=[B, P], ..., generation_config=...)`` in
``_generate_single_turn``, returning ``[B, P + C]``):

- the baseline's ``generate`` is wrapped by :func:`record_completions`: it samples as
  always and stores, per optimizer step at which it generated, the prompt ids
  ``[B, P]``, the completion ids ``[B, C]`` (as ``generate`` returned them, padding and
  tokens after EOS included) and the random-number state right after sampling;
- every other arm's ``generate`` is wrapped by :func:`replay_completions`: it samples
  nothing and returns the stored ``prompt + completion`` ids for the same step, after
  checking that the stored file is this seed's, its prompts are the ones TRL asks to
  complete, and its completions fit this arm's ``max_new_tokens``; it then sets the
  random-number state the baseline had after sampling, so TRL's group shuffle into
  micro-batches (:mod:`exchange.libraries.trl.trainer`, drawn from the global CPU
  generator) is the baseline's too.

Everything after ``generate`` is TRL's own code in both arms: the EOS mask, the rewards
(the task's verifier on the decoded completions), the advantages and the loss, whose
log-probs (and the ``old`` log-probs of ``num_iterations > 1``) are forward passes of the
*replaying* policy. No log-prob of the baseline is stored or read: the replaying arm's
gradient differs from the baseline's only through its objective (and, after the first
step, through its own weights).

Only generation in training mode is replayed (TRL's; the text mode's held-out
evaluation calls ``generate`` with the model in eval mode). One process per run:
``run_llm`` refuses common rollouts with ``world_size > 1``.
No private TRL name is touched here (the contract of
``exchange/libraries/trl/contact.py``); like ``contact.force_first_token`` this wraps
the ``generate`` of one model instance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from exchange.errors import InvalidArgument
from exchange.lab.runlog import atomic_torch_save

__all__ = ["COMPLETIONS_DIR", "ReplayIdentity", "completions_path", "record_completions", "replay_completions"]

COMPLETIONS_DIR = "completions"
"""Under the baseline's run directory: one file per generation, ``step<k>.pt``."""


@dataclass(frozen=True)
class ReplayIdentity:
    """What makes two arms' rollouts the same data: the experiment (``<name>`` or
    ``<name>/pilot``) and the seed. Stored in every file and checked on replay."""

    experiment: str
    seed: int


def completions_path(run_dir: str | Path, step: int) -> Path:
    """Where the baseline run at ``run_dir`` stores the completions it generated at
    optimizer step ``step`` (TRL's ``state.global_step`` when it generated)."""
    return Path(run_dir) / COMPLETIONS_DIR / f"step{int(step):05d}.pt"


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _input_ids(args, kwargs) -> torch.Tensor:
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:
        raise InvalidArgument("[train] common_rollouts=true: generate was called without input_ids; the recorded "
                              "completions are keyed by the prompts TRL asks to complete.")
    return ids


def record_completions(hf_model, run_dir: str | Path, identity: ReplayIdentity, step: Callable[[], int]) -> None:
    """Wrap ``hf_model.generate`` (this instance) so that every generation in training
    mode is stored at :func:`completions_path` ``(run_dir, step())``, ``step`` giving the
    optimizer step at the call (``lambda: trainer.state.global_step``). The baseline arm
    of a run with ``[train] common_rollouts``."""
    original = hf_model.generate

    def generate(*args, **kwargs):
        out = original(*args, **kwargs)
        if hf_model.training:
            ids = _input_ids(args, kwargs)
            width = ids.shape[1]
            atomic_torch_save({"experiment": identity.experiment, "seed": identity.seed, "step": int(step()),
                               "prompt_ids": ids.detach().cpu(), "completion_ids": out[:, width:].detach().cpu(),
                               "rng": _rng_state(out.device)}, completions_path(run_dir, step()))
        return out

    hf_model.generate = generate


def replay_completions(hf_model, source: str | Path, identity: ReplayIdentity, step: Callable[[], int]) -> None:
    """Wrap ``hf_model.generate`` (this instance) so that every generation in training
    mode returns the baseline's stored completions of the same optimizer step instead of
    sampling: ``source`` is the baseline's run directory of this seed. Raises
    :class:`InvalidArgument` naming the file and the mismatch when that file is missing
    or is another run's (experiment, seed, step, prompts) or longer than this arm's
    ``max_new_tokens``."""
    original = hf_model.generate

    def generate(*args, **kwargs):
        if not hf_model.training:
            return original(*args, **kwargs)
        ids = _input_ids(args, kwargs)
        k = int(step())
        path = completions_path(source, k)
        rec = _load(path, k)
        _check(rec, path, identity, k, ids, kwargs.get("generation_config"))
        _set_rng_state(rec["rng"], ids.device)  # the baseline's state after sampling: same shuffle, same stream
        return torch.cat([ids, rec["completion_ids"].to(ids.device, ids.dtype)], 1)

    hf_model.generate = generate


def _load(path: Path, step: int) -> dict[str, Any]:
    if not path.exists():
        have = sorted(p.name for p in path.parent.glob("step*.pt")) if path.parent.is_dir() else []
        raise InvalidArgument(
            f"[train] common_rollouts=true: {path} is missing: the baseline arm generated nothing at optimizer step "
            f"{step} (it has {len(have)} generation file(s){', last ' + have[-1] if have else ''}). Train the baseline "
            "of this seed first with the same schedule (per_device_train_batch_size, gradient_accumulation_steps, "
            "num_iterations) and at least this arm's max_steps; run_llm orders it so.")
    return torch.load(path, weights_only=False)


def _check(rec: dict[str, Any], path: Path, identity: ReplayIdentity, step: int, ids: torch.Tensor,
           generation_config) -> None:
    got = ReplayIdentity(str(rec.get("experiment")), int(rec.get("seed", -1)))
    if got != identity:
        raise InvalidArgument(
            f"[train] common_rollouts=true: {path} holds the completions of experiment {got.experiment!r} seed "
            f"{got.seed}, not of experiment {identity.experiment!r} seed {identity.seed}, which this arm trains; "
            "replay the baseline run directory of the same experiment and seed.")
    if int(rec.get("step", -1)) != step:
        raise InvalidArgument(f"[train] common_rollouts=true: {path} was recorded at optimizer step {rec.get('step')}, "
                              f"not {step}; the file was moved or renamed. Rerun the baseline arm of this seed.")
    prompts = rec["prompt_ids"]
    if tuple(prompts.shape) != tuple(ids.shape):
        raise InvalidArgument(
            f"[train] common_rollouts=true: {path} holds {tuple(prompts.shape)} prompt ids [rows, width], this arm "
            f"generates for {tuple(ids.shape)} at optimizer step {step}: the arms' generation batches differ. Give "
            "every arm the same per_device_train_batch_size, gradient_accumulation_steps, num_generations and seed.")
    if not torch.equal(prompts, ids.detach().cpu()):
        rows = (prompts != ids.detach().cpu()).any(1).nonzero().flatten().tolist()
        raise InvalidArgument(
            f"[train] common_rollouts=true: {path}: the prompts of rows {rows[:8]} differ from the ones this arm "
            f"generates for at optimizer step {step}: the arms draw different prompts (another seed, dataset or "
            "batch size). Give every arm of the seed the same data and schedule.")
    limit = getattr(generation_config, "max_new_tokens", None)
    width = rec["completion_ids"].shape[1]
    if limit is not None and width > int(limit):
        raise InvalidArgument(
            f"[train] common_rollouts=true: {path} holds completions of {width} tokens, longer than this arm's "
            f"max_new_tokens={limit} (max_completion_length): give every arm the baseline's max_completion_length.")
