"""TRL's training schedule, as an audit of one optimizer step needs it (trl==1.16.0).

THEORY.md section 4: a recipe audit and a monitor judge one optimizer step. TRL's
dataloader batch is always ``per_device_train_batch_size * steps_per_generation`` rows;
``GRPOTrainer._prepare_inputs`` shuffles it once (``shuffle_sequence_dict``) and cuts it
into ``steps_per_generation`` equal micro-batches (``split_tensor_dict``); the training
loop accumulates ``gradient_accumulation_steps`` of them into each optimizer step, and
``num_iterations`` replays the same buffered micro-batches in the same order. Used by
the ``trl:`` adapter (:mod:`exchange.libraries.trl.loss`), its derivation and the recipe
report (:mod:`exchange.libraries.trl.recipe`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["Schedule", "micro_batches", "schedule", "schedule_of"]


@dataclass(frozen=True)
class Schedule:
    """How TRL 1.16 turns a recipe's generation batch into optimizer steps (one process).

    ``_prepare_inputs`` shuffles the generation batch of ``rows = per_device_train_batch_size *
    steps_per_generation`` rows once and cuts it into ``micro_batches = steps_per_generation``
    equal micro-batches; the trainer's loop accumulates ``accumulation =
    gradient_accumulation_steps`` micro-batches into each optimizer step (``num_iterations``
    replays the same buffered micro-batches, in the same order). So a step holds whole
    generation batches when ``accumulation % micro_batches == 0`` and otherwise only
    ``judged = accumulation % micro_batches`` micro-batches of one (THEORY.md section 4: a
    recipe audit judges one optimizer step; its groups are split over steps, M8)."""

    rows: int
    micro_batches: int
    accumulation: int
    judged: int

    @property
    def splits_groups(self) -> bool:
        return self.judged < self.micro_batches


def schedule(config) -> Schedule:
    """The :class:`Schedule` of a validated ``GRPOConfig``."""
    k = int(config.steps_per_generation or config.gradient_accumulation_steps or 1)
    ga = int(config.gradient_accumulation_steps or 1)
    rows = int(config.per_device_train_batch_size) * k
    return Schedule(rows=rows, micro_batches=k, accumulation=ga, judged=(ga % k) or k)


def micro_batches(n: int, plan: Schedule, device=None) -> list[Tensor]:
    """The rows of each micro-batch of a generation batch of ``n`` real rows, TRL's way:
    padded with fully masked rows (index >= ``n``, no token, no coefficient) to the next
    multiple of the micro-batch count, so every micro-batch has the same number of rows,
    as TRL's always do; shuffled with a fixed seed (TRL's ``shuffle_sequence_dict`` draws
    its own), cut into equal parts. A fuzzed batch is rarely the recipe's size
    (``plan.rows``): its micro-batches then hold fewer or more rows than the recipe's,
    equally many, and that equality is all TRL's per-micro-batch constants (grpo's and
    dr_grpo's row count) read. Padding only to a multiple, not up to ``plan.rows``, keeps
    real rows in every micro-batch, so a step that holds one of several micro-batches
    still holds two responses of some groups (what (E) compares)."""
    k = plan.micro_batches
    total = -(-n // k) * k
    perm = torch.randperm(total, generator=torch.Generator(device="cpu").manual_seed(0), device="cpu")
    return [part.to(device) for part in perm.chunk(k)]


def schedule_of(p: Mapping[str, Any]) -> Schedule:
    """:func:`schedule` of adapter parameters (strings as ``--param`` gives them)."""
    def num(name: str, default: int) -> int:
        value = p.get(name)
        return default if value in (None, "None", "none") else int(float(value))

    ga = num("gradient_accumulation_steps", 1)
    k = num("steps_per_generation", ga)
    return Schedule(rows=num("per_device_train_batch_size", 8) * k, micro_batches=k, accumulation=ga,
                    judged=(ga % k) or k)
