"""An experiment's ``[train]`` section as TRL's ``GRPOConfig``: the mapping, declared once.

The CPU trainer (:mod:`exchange.lab.trainer`) reads ``[train]`` directly; the TRL run
(:mod:`exchange.lab.llm_run`) trains with a ``GRPOConfig``. :data:`FIELDS` is the one table
between them, one row per ``[train]`` field that TRL runs: its ``GRPOConfig`` field, the
value TRL gets from ``[train]`` (:func:`grpo_defaults`, run_llm's defaults before a YAML
recipe and the command line override them) and the ``[train]`` value a parsed
``GRPOConfig`` stands for (:func:`train_as_run`: what ``experiment.json`` records and
what a TRL run's fingerprint hashes). Nothing else in the lab spells a pair of them
(tests/lab/test_one_runner.py).

One TRL optimizer step is one minibatch of the rollout: a rollout of
``prompts_per_step x group_size`` completions is split into ``minibatches`` steps
(``steps_per_generation``), reused ``epochs`` times (``num_iterations``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from exchange.lab.config import TrainConfig

__all__ = ["FIELDS", "FIXED", "Field", "grpo_defaults", "train_as_run"]


@dataclass(frozen=True)
class Field:
    """One ``[train]`` field and the ``GRPOConfig`` field TRL runs it as."""

    train: str
    """The :class:`~exchange.lab.config.TrainConfig` field."""
    grpo: str
    """The ``GRPOConfig`` field."""
    to_grpo: Callable[[TrainConfig], Any] | None = None
    """``[train]`` -> the GRPOConfig value; None: the field's value as it is."""
    from_grpo: Callable[[Any], Any] | None = None
    """A parsed GRPOConfig -> the ``[train]`` value it stands for; None: ``args.<grpo>``."""

    def forward(self, tc: TrainConfig) -> Any:
        return getattr(tc, self.train) if self.to_grpo is None else self.to_grpo(tc)

    def inverse(self, args: Any) -> Any:
        return getattr(args, self.grpo) if self.from_grpo is None else self.from_grpo(args)


def _minibatches(tc: TrainConfig) -> int:
    # groups are whole in a TRL step only when the prompts split evenly (else one step per rollout)
    return tc.minibatches if tc.prompts_per_step % tc.minibatches == 0 else 1


def _optimizer(optim: str) -> str:
    # TRL's adamw_torch at weight_decay 0 (TRL's default) is the CPU trainer's Adam; any
    # other optimiser keeps TRL's name
    return {"adamw_torch": "adam"}.get(optim, optim)


FIELDS: tuple[Field, ...] = (
    Field("steps", "max_steps"),
    Field("group_size", "num_generations"),
    Field("epochs", "num_iterations"),
    Field("minibatches", "steps_per_generation", _minibatches),
    Field("prompts_per_step", "per_device_train_batch_size",
          lambda tc: tc.prompts_per_step * tc.group_size // _minibatches(tc),
          lambda a: a.generation_batch_size // a.num_generations),
    Field("lr", "learning_rate"),
    Field("optimizer", "optim", lambda tc: "sgd" if tc.optimizer == "sgd" else "adamw_torch",
          lambda a: _optimizer(str(getattr(a.optim, "value", a.optim)))),
    Field("temperature", "temperature"),
    Field("max_response_len", "max_completion_length"),
    Field("eval_every", "eval_steps"),
    Field("ckpt_every", "save_steps"),
)
"""``[train]`` field <-> ``GRPOConfig`` field, both directions."""

FIXED: dict[str, Any] = {"lr_scheduler_type": "constant", "logging_steps": 1, "beta": 0.0, "report_to": "none",
                         "output_dir": "runs/llm"}
"""GRPOConfig defaults with no ``[train]`` field: the CPU trainer's constant lr, no
reference KL (beta 0), one metrics row per step (logging_steps 1, which run_llm requires)."""


def grpo_defaults(tc: TrainConfig) -> dict[str, Any]:
    """The GRPOConfig defaults of ``[train]`` (a YAML recipe and the command line override them)."""
    return {**{f.grpo: f.forward(tc) for f in FIELDS}, **FIXED}


def train_as_run(tc: TrainConfig, args: Any) -> TrainConfig:
    """``tc`` with every mapped field replaced by the value the parsed GRPOConfig ``args`` runs."""
    return dataclasses.replace(tc, **{f.train: f.inverse(args) for f in FIELDS})
