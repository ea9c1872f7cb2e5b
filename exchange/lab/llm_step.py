"""The KL-normalised step and the attribution instrument on the TRL engine (issue 31).

The CPU harness (:mod:`exchange.lab.trainer`) calls :func:`exchange.lab.klstep.normalise_step`
after each rollout's updates and feeds :class:`exchange.lab.attribution.ProbeAttribution`
around each optimiser step. :class:`RolloutStep` does the same, with the same functions,
inside ``exchange.lab.llm_run``'s TRL trainer, where the loop belongs to TRL:

- a **rollout** is TRL's generation batch, reused for ``steps_per_generation x
  num_iterations`` micro-batches (``generate_every``); it starts when TRL's micro-batch
  counter ``_step`` is a multiple of ``generate_every`` and ends after the optimizer step
  that brings it to the next multiple;
- at its start the parameters ``theta0`` are kept (and the attribution's running sums,
  for the rescale); its distinct micro-batches (the first ``steps_per_generation``) are
  kept for the KL;
- at its end the KL on the **control contexts** (:func:`exchange.lab.klstep.control_contexts`)
  between ``theta0`` and now is brought to ``kl_target`` by rescaling the rollout's whole
  change (same optimiser state, same lr);
- the attribution's shared part is the micro-batches' ``-sum_{e shared} K_e grad l_e``
  (the harness's :func:`~exchange.lab.trainer.measure_minibatch`), scaled as TRL scaled
  the loss gradient it stepped with (gradient accumulation, gradient clipping): the scale
  ``s`` is fitted from ``p.grad = -s * sum kappa grad l`` at the optimizer's pre-step hook,
  and the fit's relative residual is logged (``attr/grad_match``: ~1e-7 when the loss TRL
  stepped on is the objective's, as it must be).

One process only (several would each rescale by their own slice's KL); the pilot,
the KL target and the attribution are refused with several processes.

Precision: under ``--bf16`` accelerate wraps the model's ``forward`` in a bf16 autocast,
so every forward (the probes, their gradients, the KL) carries bf16 rounding whatever
the caller asks: measured on the CPU-scale test, the path integral then missed the
probe's change by up to 2x, the KL target by 7%, and ``init.json`` (evaluated before
the trainer wraps the model) differed from the probes at the start of training by 6e-4
nats. With ``--bf16 false`` the path integral reproduces the change to 1e-5 relative
(0.4% with the KL-normalised step) and the KL target is met to 0.03%. The probes'
values where training starts are logged (``attr/<probe>/start``) so a run can check it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from exchange.core import metric_keys as mk
from exchange.lab.attribution import ProbeAttribution
from exchange.lab.instruments import context_kl
from exchange.lab.klstep import normalise_step

__all__ = ["RolloutStep"]


def _dot(a: list[Tensor], b: list[Tensor]) -> float:
    return float(sum((x.double() * y.double()).sum() for x, y in zip(a, b)))


class RolloutStep:
    """Per-rollout bookkeeping of one TRL trainer (see the module).

    ``context_logp(inputs) -> [n, T, V]`` float64 log-probs at a micro-batch's response
    contexts at the current parameters (the trainer's KL instrument); ``probes``:
    ``{name: f(model) -> scalar}`` for the attribution (None: off); ``model`` the unwrapped
    policy (``probe_model`` what the probes are evaluated on, e.g. ``LogitsOnly(model)``)."""

    def __init__(self, model: torch.nn.Module, context_logp, generate_every: int, steps_per_generation: int,
                 kl_target: float = 0.0, probes: dict[str, Any] | None = None,
                 probe_model: torch.nn.Module | None = None) -> None:
        self.model, self.context_logp = model, context_logp
        self.generate_every, self.spg = generate_every, steps_per_generation
        self.kl_target = kl_target
        self.probes, self.probe_model = probes, probe_model
        self.att: ProbeAttribution | None = None
        self.theta0: list[Tensor] | None = None
        self.shared_since: dict[str, float] | None = None
        self.kept: list[tuple[Any, Tensor]] = []  # (inputs, control mask) of the rollout's micro-batches
        self._shared: list[Tensor] | None = None  # sum over the step's micro-batches of g_shared
        self._total: list[Tensor] | None = None  # ... of -grad(objective) = sum kappa grad l
        self._before: list[Tensor] | None = None
        self._match: list[float] = []
        self._order: list[int] = []
        self._start: dict[str, float] = {}
        self.cumulative_kl = 0.0

    # ----------------------------------------------------------- set-up
    def begin(self, optimizer: torch.optim.Optimizer) -> None:
        """Once the trainer has its optimizer (``on_train_begin``): the attribution and its hooks."""
        inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it
        if self.probes is not None and self.att is None:
            self.att = ProbeAttribution(self.probe_model, inner, self.probes)
            # the optimizer's parameter order (HF groups decay / no-decay) -> model.parameters() order
            where = {id(p): k for k, p in enumerate(self.model.parameters())}
            self._order = [where[id(p)] for p in self.att.params]
            with torch.no_grad():  # the probes where training starts (the path integral's origin)
                self._start = {mk.attr_start(k): float(f(self.probe_model)) for k, f in self.probes.items()}
            inner.register_step_pre_hook(lambda *_: self._pre_step())
            inner.register_step_post_hook(lambda *_: self._post_step())

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must add to TRL's: the attribution's shadow moments (a
        rollout always ends at a checkpoint, so nothing else is mid-flight)."""
        return {"shadow": None if self.att is None else self.att.tangent.state_dict(),
                "cumulative_kl": self.cumulative_kl}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.att is not None and state.get("shadow") is not None:
            self.att.tangent.load_state_dict(state["shadow"])
        self.cumulative_kl = float(state.get("cumulative_kl", 0.0))

    # ------------------------------------------------------ per micro-batch
    def micro_batch(self, step: int, inputs: Any, control: Tensor, g_shared: list[Tensor] | None,
                    g_total: list[Tensor] | None) -> None:
        """Before the micro-batch's backward. ``step``: TRL's micro-batch counter
        (``trainer._step``); ``g_shared``/``g_total`` its ``sum_shared K grad l`` and
        ``sum kappa grad l`` (for the attribution), one tensor per ``model.parameters()``."""
        if step % self.generate_every == 0:  # a new rollout: parameters still at theta0
            self.theta0 = [p.detach().clone() for p in self.model.parameters()]
            self.shared_since = self.att.peek() if self.att is not None else None
            self.kept = []
        if self.kl_target > 0 and step % self.generate_every < self.spg:
            self.kept.append((inputs, control))
        if self.att is not None:
            if g_shared is None or g_total is None:
                raise RuntimeError("the attribution needs g_shared and g_total of every micro-batch")
            self._shared = g_shared if self._shared is None else [a + b for a, b in zip(self._shared, g_shared)]
            self._total = g_total if self._total is None else [a + b for a, b in zip(self._total, g_total)]

    # -------------------------------------------------- around opt.step()
    def _pre_step(self) -> None:
        self._before = self.att.before_step()

    def _post_step(self) -> None:
        params = self.att.params
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        total = [self._total[k] for k in self._order]
        shared = [self._shared[k] for k in self._order]
        # p.grad = -s * g_total (TRL's loss scaling and clipping): fit s, keep the residual
        gg = _dot(total, total)
        s = -_dot(grads, total) / gg if gg > 0 else 0.0
        res = sum(float((g.double() + s * t.double()).pow(2).sum()) for g, t in zip(grads, total))
        norm = _dot(grads, grads)
        self._match.append((res / norm) ** 0.5 if norm > 0 else 0.0)
        self.att.after_step(self._before, [-s * g for g in shared])  # loss-gradient units
        self._shared = self._total = self._before = None

    # ------------------------------------------------------- per TRL step
    def end_step(self, step: int) -> dict[str, Any]:
        """After the optimizer step (``on_step_end``); ``step``: TRL's micro-batch counter.
        At a rollout's end: the KL-normalised step, then the attribution's sums."""
        row: dict[str, Any] = dict(self._start)  # logged once, in the first row of this (re)start
        self._start = {}
        if self._match:
            row[mk.ATTR_GRAD_MATCH] = max(self._match)
            self._match = []
        if step % self.generate_every != 0 or self.theta0 is None:
            return row
        if self.kl_target > 0 and self.kept:
            theta1 = [p.detach().clone() for p in self.model.parameters()]
            with torch.no_grad():  # the rollout's contexts under theta0, then back to theta1
                for p, a in zip(self.model.parameters(), self.theta0):
                    p.copy_(a)
                before = [self.context_logp(inputs) for inputs, _ in self.kept]
                for p, b in zip(self.model.parameters(), theta1):
                    p.copy_(b)

            def kl_now() -> float | None:
                pairs = []
                with torch.no_grad():
                    for (inputs, control), b in zip(self.kept, before):
                        v = context_kl(b, self.context_logp(inputs), control)
                        if v is not None:
                            pairs.append((v, int(control.sum())))
                n = sum(c for _, c in pairs)
                return sum(v * c for v, c in pairs) / n if n else None

            scale, achieved = normalise_step(self.model, self.theta0, kl_now, self.kl_target)
            row[mk.KL_SCALE], row[mk.KL_ROLLOUT_CONTROL] = scale, achieved
            self.cumulative_kl += achieved or 0.0
            row[mk.KL_CUMULATIVE] = self.cumulative_kl
            if self.att is not None:  # in the optimizer's parameter order
                self.att.rescale(scale, self.shared_since, [self.theta0[k] for k in self._order],
                                 [theta1[k] for k in self._order])
        if self.att is not None:
            row.update(self.att.take())
        self.theta0, self.kept = None, []
        return row
