"""One optimizer step of a TRL run, as the callback measures it (THEORY.md section 4: a
monitor judges one optimizer step; trl==1.16.0). :class:`StepAccumulator` puts each
micro-batch's coefficients back into its rows of the generation batch and closes the
step's part of each batch into :func:`~exchange.libraries.step_metrics.batch_sums`
(events found on whole groups, coefficient 0 on the rows other steps train: M8 shows as
a residual); :func:`concat_steps` joins the step's rows of several generation batches for
the dump; :func:`log_sums` reduces the sums over processes and logs them through TRL.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.libraries.step_metrics import batch_sums, metrics_from_sums
from exchange.libraries.trl.batches import rollout_of
from exchange.libraries.trl.contact import log_metric

__all__ = ["StepAccumulator", "concat_steps", "log_sums"]


class StepAccumulator:
    """Collects each micro-batch's ``kappa [rows, T]`` (and log-probs) into the rows of
    the generation batch, for the optimizer step they belong to (kept on the CPU, where
    the events of the whole batch are found)."""

    def __init__(self) -> None:
        self.reset(None)
        self.pending: Tensor | None = None  # sums of a step's earlier generation batches (GA > steps_per_generation)
        self.parts: list[Rollout] = []  # the step's rows, for the dump
        self.micro = 0  # micro-batches seen in the current optimizer step

    def reset(self, batch: dict | None) -> None:
        self.batch = batch
        self.kappa: Tensor | None = None
        self.logps: Tensor | None = None
        self.seen: Tensor | None = None

    def add(self, inputs: dict, kappa: Tensor, logps: Tensor, n_rows: int) -> None:
        rows = inputs["exchange_row"].cpu()
        if self.kappa is None:  # kept on the CPU, where the events of the whole batch are found
            self.kappa = torch.zeros(n_rows, kappa.shape[1], dtype=torch.float64, device="cpu")
            self.logps = torch.zeros(n_rows, kappa.shape[1], dtype=torch.float64, device="cpu")
            self.seen = torch.zeros(n_rows, dtype=torch.bool, device="cpu")
        self.kappa[rows] = kappa.detach().double().cpu()
        self.logps[rows] = logps.detach().double().cpu()
        self.seen[rows] = True

    def close_batch(self) -> Tensor | None:
        """The sums of the rows this step saw in the current generation batch (its events
        found on the whole batch, so a group split over steps keeps its shared events and
        the coefficients of the rows outside the step are 0, THEORY.md M8); the step's rows
        kept for the dump; the batch's coefficients cleared."""
        if self.kappa is None or not bool(self.seen.any()):
            return None
        batch = {k: (v.cpu() if isinstance(v, Tensor) else v) for k, v in self.batch.items()}
        rollout = rollout_of(batch, torch.float64, logprobs=self.logps)  # on-policy: TRL kept no old log-probs
        kappa = torch.where(self.seen[:, None], self.kappa, torch.zeros_like(self.kappa))
        sums = batch_sums(kappa, rollout)
        rows = self.seen.nonzero().flatten()
        if rollout.advantages is None and isinstance(batch.get("advantages"), Tensor):
            # TRL's own advantages, over whole groups: a step that holds part of a group (M8)
            # keeps them (a Rollout of partial groups needs them), and inspect reads them
            rollout = dataclasses.replace(rollout, advantages=batch["advantages"].to(torch.float64))
        self.parts.append(dataclasses.replace(rollout.select(rows), logprobs=self.logps[rows]))
        self.kappa.zero_(), self.logps.zero_(), self.seen.zero_()
        return sums


def concat_steps(parts: list[Rollout]) -> Rollout:
    """One rollout of the step's rows from several generation batches (group ids made
    distinct, tokens padded to the widest)."""
    if len(parts) == 1:
        return parts[0]
    width = max(p.mask.shape[1] for p in parts)
    fields, offset = {}, 0
    for part in parts:
        pad = width - part.mask.shape[1]
        for f in dataclasses.fields(part):
            value = getattr(part, f.name)
            if not f.init or value is None:
                continue
            if f.name == "group":
                value = value + offset
            elif value.ndim == 2 and f.name not in ("prompt_tokens", "prompt_mask"):
                value = torch.nn.functional.pad(value, (0, pad))
            fields.setdefault(f.name, []).append(value)
        offset += int(part.group.max()) + 1
    prompts = [fields.get("prompt_tokens"), fields.get("prompt_mask")]
    if any(p is not None and len({v.shape[1] for v in p}) > 1 for p in prompts):  # prompts of different widths
        fields.pop("prompt_tokens", None), fields.pop("prompt_mask", None)
    return Rollout(**{k: torch.cat(v) for k, v in fields.items()})


def log_sums(trainer, mode: str, sums: Tensor) -> dict[str, float]:
    """Reduce :func:`batch_sums` over processes and log the metrics."""
    sums = trainer.accelerator.reduce(sums.to(trainer.accelerator.device, torch.float32), reduction="sum")
    metrics = metrics_from_sums(sums.cpu())
    for key, value in metrics.items():
        log_metric(trainer, mode, key, value)
    return metrics
