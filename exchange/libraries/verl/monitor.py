"""The ``tax/*`` metrics of every optimizer step of a verl run, through verl's ``ppo_loss`` (verl==0.9.1).

    # every worker process (the plugin does it when EXCHANGE_VERL_MONITOR=1, see below)
    from exchange.libraries.verl.monitor import install
    install()

verl's actor trains with ``partial(ppo_loss, config=actor_config)``
(``verl.workers.engine_workers``, which imports ``ppo_loss`` from
``verl.workers.utils.losses``). :func:`install` puts a :class:`StepMonitor` around that
``ppo_loss`` in its module (and in the modules that already bound the name), so the
engine calls it in place of verl's, with verl's own arguments, for verl's own policy
losses and the registered ``exchange_*`` ones alike (``ppo_loss`` looks the
``loss_mode`` up itself). This is a contact with verl's internals, kept in this one
module; ``tests/libraries/verl/test_monitor.py`` checks it against the installed verl.

**What it measures.** A registered policy loss gets no tokens and no ``uid``; ``ppo_loss``
gets the micro-batch's whole ``TensorDict`` (``responses``, ``response_mask``, ``uid``,
``prompts``, the attention mask and the step's sizes). Per micro-batch the monitor calls
the wrapped loss, with the model's log-probs handed over as the flat ``[total_nnz]``
tensor ``no_padding_2_padding`` accepts, and takes ``kappa = -d loss / d log_probs`` by
``torch.autograd.grad`` on the loss arithmetic only (no second forward or backward
through the model), back in the response layout ``[bs, T]`` by verl's own
``no_padding_2_padding``. The rows of one optimizer step are gathered: verl's
``train_mini_batch`` runs one ``train_batch`` (one optimizer step) per mini-batch of
``global_batch_size`` rows over ``dp_size`` ranks, so a rank's step is complete when its
micro-batches held ``global_batch_size / dp_size`` rows. Then the ranks' rows are
gathered (``all_gather_object`` on the ``dp_group`` the engine passes the loss:
``balance_batch`` and the per-rank shuffle spread a group over ranks), the events are
found on the step's rows grouped by ``uid`` (THEORY.md section 4: a monitor judges one
optimizer step and, where the schedule splits a group over steps, M8, the step's part
of the group), and the step's metrics (:mod:`exchange.libraries.step_metrics`, the
TRL callback's definitions) are returned with that last micro-batch's metrics as
``Metric(value, AggregationType.MEAN)``.

**Where they appear.** verl aggregates a loss's metrics over micro-batches, ranks and
mini-batches (``append_to_dict``, ``Metric.aggregate_dp``, ``reduce_metrics``) and the
trainer prefixes the actor's with ``actor/``: each training step logs
``actor/tax/shared_residual``, ``actor/tax/shared_events`` and
``actor/tax/shared_kappa_share``, each the mean over that step's optimizer steps
(``ppo_epochs`` x mini-batches), next to ``actor/pg_loss`` in every ``trainer.logger``
backend.

**Not measured.** Forward-only calls (the loss under ``torch.no_grad``, as in
``infer_batch``) pass through untouched. A micro-batch without ``uid`` or without the
step sizes (``global_batch_size``, ``dp_size``) is trained as usual and the monitor
warns once and logs nothing. The entropy bonus is a whole-distribution term (it does not
go through the sampled tokens' log-probs), outside the coefficient model; a KL loss
(``use_kl_loss``) is in ``kappa`` (M6). Multi-turn rows (``response_mask`` zero on tool
output inside a response): the tool tokens are kept as context of the later tokens with
``kappa = 0`` (the loss masks them) and are not events (``Rollout.mask`` keeps the
holes), so ``tax/shared_events`` counts the policy's tokens only.

verl 0.9.1's FSDP engine asserts CUDA at its first batch, so on CPU the monitor is tested
through ``ppo_loss`` with the ``TensorDict`` the trainer and the engine build (verl's own
``DataProto.to_tensordict``, ``left_right_2_no_padding``, ``make_iterator`` and
``chunk_tensordict``).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.libraries.step_metrics import batch_sums, metrics_from_sums
from exchange.libraries.versions import require

__all__ = ["ENV", "StepMonitor", "install", "step_rollout", "wanted"]

ENV = "EXCHANGE_VERL_MONITOR"
"""Set to ``1`` in the workers' environment: the verl plugin (:mod:`exchange.libraries.verl.plugin`)
calls :func:`install` in every process."""

# The modules that bind verl's ppo_loss by name (verl 0.9.1): where it is defined, the
# actor worker that builds partial(ppo_loss, config=...), the distillation loss that calls it.
_BINDERS = ("verl.workers.utils.losses", "verl.workers.engine_workers", "verl.trainer.distillation.losses")


def _padded(value: Tensor) -> Tensor:
    """A ``[bs, T]`` tensor from verl's padded or nested (jagged) layout."""
    return value.to_padded_tensor(0) if getattr(value, "is_nested", False) else value


def _width(value: Tensor, width: int) -> Tensor:
    """``value [bs, T]`` right-padded with zeros (or cut) to ``width`` columns."""
    if value.shape[1] >= width:
        return value[:, :width]
    return torch.cat([value, value.new_zeros(value.shape[0], width - value.shape[1])], dim=1)  # bool too


def step_rollout(tokens: Tensor, mask: Tensor, uid: list) -> Rollout:
    """The rows of one optimizer step as a :class:`Rollout` for finding events:
    ``tokens``/``mask [N, T]`` (verl's ``responses``/``response_mask``), groups from the
    ``uid`` strings (equal string, same prompt; numbered in order of appearance). A
    multi-turn mask with holes keeps them: the tool tokens stay in the response prefix
    (context of the later tokens) and are not events; rewards and advantages are zeros (the events need
    none; zero advantages let a step hold one row of a group)."""
    mask = mask.bool()
    n, t = mask.shape
    pos = torch.arange(t, device=mask.device)
    last = torch.where(mask, pos[None, :], torch.full_like(mask, -1, dtype=torch.long)).amax(dim=1)  # [N]
    prefix = pos[None, :] <= last[:, None]  # [N, T]: through the last real token
    index: dict[str, int] = {}
    group = torch.tensor([index.setdefault(str(u), len(index)) for u in uid], dtype=torch.long, device=mask.device)
    zeros = torch.zeros(n, dtype=torch.float64, device=mask.device)
    return Rollout(
        tokens=torch.where(prefix, tokens.long(), 0),
        mask=mask,  # holes kept: a tool token is context, not an event (Rollout.mask)
        rewards=zeros,
        group=group,
        old_logprobs=torch.zeros(n, t, dtype=torch.float64, device=mask.device),
        advantages=zeros,
    )


class StepMonitor:
    """verl's actor loss ``loss_fn(config, model_output, data, dp_group=None) -> (loss,
    metrics)`` with the ``tax/*`` metrics of each optimizer step added to the metrics of
    the step's last micro-batch (see the module docstring). The loss and its gradient
    are ``loss_fn``'s, unchanged.

    Attributes:
        loss_fn: the wrapped loss (verl's ``ppo_loss``).
        history: the metrics of every step measured so far, in order (one dict per step).
    """

    def __init__(self, loss_fn: Callable[..., tuple[Tensor, dict]]) -> None:
        self.loss_fn = loss_fn
        self.history: list[dict[str, float]] = []
        self._parts: list[tuple[Tensor, Tensor, Tensor, list]] = []  # (tokens, mask, kappa, uid) per micro-batch
        self._rows = 0
        self._warned: set[str] = set()

    def __call__(self, config, model_output, data, dp_group=None) -> tuple[Tensor, dict[str, Any]]:
        log_probs = model_output["log_probs"]
        flat = log_probs.values() if getattr(log_probs, "is_nested", False) else log_probs
        training = torch.is_grad_enabled() and flat.requires_grad  # forward-only calls are not a step
        step_rows = self._step_rows(data) if training else None
        if step_rows is None:
            return self.loss_fn(config=config, model_output=model_output, data=data, dp_group=dp_group)
        loss, metrics = self.loss_fn(config=config, model_output={**model_output, "log_probs": flat}, data=data,
                                     dp_group=dp_group)
        self._add(loss, flat, data)
        if self._rows < step_rows:
            return loss, metrics
        if self._rows > step_rows:  # defensive: never log a step mixed with the next one
            self._warn("rows", f"the optimizer step held {self._rows} rows on this rank, not global_batch_size/dp_size="
                               f"{step_rows}; its tax/* metrics are not logged.")
            self._parts, self._rows = [], 0
            return loss, metrics
        step = self._close(dp_group)
        from verl.utils.metric import AggregationType, Metric

        metrics = dict(metrics)
        metrics.update({key: Metric(value=value, aggregation=AggregationType.MEAN) for key, value in step.items()})
        return loss, metrics

    # ----------------------------------------------------------------- parts
    def _warn(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(f"exchange verl monitor: {message}", UserWarning, stacklevel=3)

    def _step_rows(self, data) -> int | None:
        """This rank's rows in one optimizer step, ``global_batch_size / dp_size``, or
        ``None`` (with one warning) when the micro-batch lacks what the monitor needs."""
        from verl.utils import tensordict_utils as tu

        size = tu.get_non_tensor_data(data=data, key="global_batch_size", default=None)
        dp = tu.get_non_tensor_data(data=data, key="dp_size", default=None)
        missing = [k for k, v in (("global_batch_size", size), ("dp_size", dp)) if v is None]
        missing += [k for k in ("uid", "responses", "response_mask") if k not in data.keys()]
        if missing:
            self._warn("keys", f"the loss's micro-batch has no {', '.join(missing)}; tax/* is not logged "
                               "(verl's RayPPOTrainer._update_actor and the engine set them).")
            return None
        return int(size) // int(dp)

    def _add(self, loss: Tensor, flat: Tensor, data) -> None:
        """Keep this micro-batch's rows and ``kappa = -d loss / d log_probs`` on the CPU."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        (grad,) = torch.autograd.grad(loss, flat, retain_graph=True, allow_unused=True)
        kappa_flat = torch.zeros_like(flat) if grad is None else -grad.detach()
        kappa = no_padding_2_padding(kappa_flat, data)  # [bs, T]: the response layout of log_prob
        tokens, mask = _padded(data["responses"]), _padded(data["response_mask"])
        width = max(tokens.shape[1], kappa.shape[1])
        mask = _width(mask.bool(), width)
        kappa = torch.where(mask, _width(kappa.double(), width), 0.0)
        uid = [str(u) for u in tu.get(data, "uid")]
        self._parts.append((_width(tokens.long(), width).cpu(), mask.cpu(), kappa.cpu(), uid))
        self._rows += int(mask.shape[0])

    def _close(self, dp_group) -> dict[str, float]:
        """The step's metrics over every rank's rows; the step's rows cleared."""
        parts, self._parts, self._rows = self._parts, [], 0
        if dp_group is not None and torch.distributed.is_available() and torch.distributed.is_initialized() \
                and torch.distributed.get_world_size(group=dp_group) > 1:
            gathered: list = [None] * torch.distributed.get_world_size(group=dp_group)
            torch.distributed.all_gather_object(gathered, parts, group=dp_group)
            parts = [p for rank in gathered for p in rank]
        width = max(p[0].shape[1] for p in parts)
        tokens = torch.cat([_width(p[0], width) for p in parts])
        mask = torch.cat([_width(p[1], width) for p in parts])
        kappa = torch.cat([_width(p[2], width) for p in parts])
        uid = [u for p in parts for u in p[3]]
        keep = mask.any(dim=1)  # a row with no real token holds no event
        rollout = step_rollout(tokens[keep], mask[keep], [u for u, k in zip(uid, keep.tolist()) if k])
        metrics = metrics_from_sums(batch_sums(kappa[keep], rollout))
        self.history.append(metrics)
        return metrics


def install() -> StepMonitor:
    """Wrap verl's ``ppo_loss`` in a :class:`StepMonitor` in this process (the modules of
    ``_BINDERS`` that are imported now, and ``verl.workers.utils.losses`` so that those
    imported later bind the wrapped one). Idempotent: returns the installed monitor."""
    require("verl")
    import importlib
    import sys

    losses = importlib.import_module("verl.workers.utils.losses")
    current = losses.ppo_loss
    monitor = current if isinstance(current, StepMonitor) else StepMonitor(current)
    for name in _BINDERS:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "ppo_loss", None) is not None:
            module.ppo_loss = monitor
    return monitor


def wanted() -> bool:
    """True when :data:`ENV` asks for the monitor (``1``, ``true``, ``yes``)."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes")
