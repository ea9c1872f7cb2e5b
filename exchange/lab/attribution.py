"""First-order attribution of a probe's change to a part of the update (issue 31).

The cancellation pathway's effect on a probe ``f(theta)`` (``log p(S)`` at the fixed
probe contexts, their entropy) is predicted from a run's own trajectory: the shared
events' part of the loss gradient, ``d_t = -sum_{e shared} K_e grad l_e`` (the part the
surgical transform removes, :mod:`exchange.objectives.surgical`), is sent through the
optimiser's own update and the result is dotted with ``grad f`` along the path:

    delta_hat = sum_t  <grad f (path midpoint of step t), dtheta_t>

For Adam, ``dtheta_t`` is computed by a **shadow optimiser** (``mode="shadow"``, the
default): a second set of Adam moments fed ``g_t - d_t`` (the gradient without the
shared part) along the *same* trajectory, with the same lr, betas, eps and bias
corrections; ``dtheta_t`` is the real step minus the shadow's step. The shared part
thereby goes through the optimiser's own normalisation and momentum, exactly, and only
its effect on later gradients (through the changed trajectory) is dropped: first order
in the trajectory, not in Adam.

``mode="tangent"`` is the forward-mode derivative of Adam's recursion in direction
``d`` (``dm = b1 dm + (1-b1) d``, ``dv = b2 dv + 2(1-b2) g d``, chain rule through
``m / (sqrt(v / bc2) + eps)``). It is exact as a derivative (tested against finite
differences) but not a valid attribution of a *removal*: where the shared part
dominates a coordinate, Adam's step is ~``sign(g)`` and its derivative ~0, so the
tangent misses the removal (on the test's small run it has the wrong sign; the shadow
is within 2-16% of the measured baseline-minus-surgical difference at lr 1e-3).
For SGD both modes are ``-lr d_t``. The same bookkeeping with the real step
``theta_{t+1} - theta_t`` gives the **path integral** ``sum_t <grad f, Delta theta_t>``
(trapezoid rule), which reproduces the probe's actual change.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from exchange.core import metric_keys as mk
from exchange.errors import InvalidArgument

__all__ = ["AdamTangent", "ProbeAttribution"]


class AdamTangent:
    """The change of an optimiser's update due to a part of its gradient (see the module:
    ``mode="shadow"`` real step minus a shadow Adam's, or ``"tangent"``, the derivative).

    ``opt``: ``torch.optim.Adam`` (no weight decay, amsgrad, maximize or foreach-only
    state) or ``torch.optim.SGD`` (no momentum). Call :meth:`step` right **after**
    ``opt.step()`` with that step's gradients and the part to attribute."""

    def __init__(self, opt: torch.optim.Optimizer, mode: str = "shadow") -> None:
        if mode not in ("tangent", "shadow"):
            raise InvalidArgument(f"mode={mode!r}; choose 'tangent' or 'shadow'.")
        self.mode = mode
        if isinstance(opt, torch.optim.Adam):
            for g in opt.param_groups:
                if g.get("weight_decay", 0) or g.get("amsgrad") or g.get("maximize"):
                    raise InvalidArgument("AdamTangent supports Adam without weight_decay, amsgrad or maximize.")
            self.kind = "adam"
        elif isinstance(opt, torch.optim.SGD):
            if any(g.get("momentum", 0) or g.get("weight_decay", 0) for g in opt.param_groups):
                raise InvalidArgument("AdamTangent supports SGD without momentum or weight_decay.")
            self.kind = "sgd"
        else:
            raise InvalidArgument(f"optimizer={type(opt).__name__}: the tangent is derived for Adam and SGD only.")
        self.opt = opt
        self._dm: dict[int, Tensor] = {}  # keyed by the parameter's index in opt
        self._dv: dict[int, Tensor] = {}
        self.shift: list[Tensor] | None = None
        """``sum`` of every :meth:`step`'s ``dtheta`` so far: to first order, how far the part's
        removal would have moved the parameters (None before the first step)."""

    def state_dict(self) -> dict:
        return {"dm": dict(self._dm), "dv": dict(self._dv), "shift": self.shift}

    def load_state_dict(self, state: dict) -> None:
        self._dm, self._dv = dict(state["dm"]), dict(state["dv"])
        self.shift = state.get("shift")  # checkpoints written before the shift was kept: restart it at None

    @torch.no_grad()
    def step(self, part: list[Tensor | None]) -> list[Tensor]:
        """``dtheta`` per parameter (the order of ``opt``'s parameters) for the gradient
        part ``part`` (loss-gradient units, ``None`` = 0) of the step just taken. Reads the
        gradient of that step from ``p.grad``."""
        out = []
        k = 0
        for group in self.opt.param_groups:
            lr = float(group["lr"])
            for p in group["params"]:
                d = part[k] if k < len(part) and part[k] is not None else torch.zeros_like(p)
                k += 1
                if self.kind == "sgd":
                    out.append(-lr * d)
                    continue
                st = self.opt.state.get(p, {})
                if "exp_avg" not in st or p.grad is None:
                    out.append(torch.zeros_like(p))
                    continue
                b1, b2 = group["betas"]
                eps = float(group["eps"])
                t = float(st["step"])
                bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
                m, v, g = st["exp_avg"], st["exp_avg_sq"], p.grad
                key = k - 1
                if self.mode == "shadow":
                    out.append(self._shadow(key, group, st, g, d, bc1, bc2))
                    continue
                dm = b1 * self._dm.get(key, torch.zeros_like(p)) + (1 - b1) * d
                dv = b2 * self._dv.get(key, torch.zeros_like(p)) + 2 * (1 - b2) * g * d
                self._dm[key], self._dv[key] = dm, dv
                root = (v / bc2).sqrt()
                denom = root + eps
                ddenom = torch.where(root > 0, dv / bc2 / (2 * root.clamp(min=1e-300)), torch.zeros_like(v))
                out.append(-lr / bc1 * (dm / denom - m * ddenom / denom ** 2))
        self.shift = [o.clone() for o in out] if self.shift is None else [a + o for a, o in zip(self.shift, out)]
        return out


    def _shadow(self, key, group, st, g, d, bc1, bc2) -> Tensor:
        """Real step minus the step of a shadow Adam fed ``g - d`` along the same path."""
        b1, b2 = group["betas"]
        eps, lr = float(group["eps"]), float(group["lr"])
        m_s = b1 * self._dm.get(key, torch.zeros_like(g)) + (1 - b1) * (g - d)
        v_s = b2 * self._dv.get(key, torch.zeros_like(g)) + (1 - b2) * (g - d) ** 2
        self._dm[key], self._dv[key] = m_s, v_s
        real = st["exp_avg"] / ((st["exp_avg_sq"] / bc2).sqrt() + eps)
        shadow = m_s / ((v_s / bc2).sqrt() + eps)
        return -lr / bc1 * (real - shadow)


def _dot(a: list[Tensor], b: list[Tensor]) -> float:
    return float(sum((x.double() * y.double()).sum() for x, y in zip(a, b)))


class ProbeAttribution:
    """Accumulates, per probe, the first-order change of the whole path and of one part.

    ``probes``: ``{name: f(model) -> scalar Tensor}`` (differentiable). Use::

        att = ProbeAttribution(model, opt, probes)
        ...  loss.backward(); before = att.before_step(); opt.step(); att.after_step(before, part)
        ...  att.rescale(c, theta_before_rollout)   # a KL-normalised step, if any
        att.take() -> {"attr/<name>/path": ..., "attr/<name>/shared": ...} since the last take

    ``path`` is the trapezoid sum of ``<grad f, Delta theta>`` over the real steps (it must
    reproduce ``f``'s actual change); ``shared`` the same with the Adam tangent of
    ``part`` sent through the optimiser (:class:`AdamTangent`) in place of ``Delta theta``.
    """

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, probes: dict[str, Callable[[nn.Module], Tensor]],
                 mode: str = "shadow"):
        self.model, self.probes = model, probes
        self.params = [p for g in opt.param_groups for p in g["params"]]
        self.tangent = AdamTangent(opt, mode)
        self._grad: dict[str, list[Tensor]] | None = None
        self._acc = {key(k): 0.0 for k in probes for key in (mk.attr_path, mk.attr_shared)}
        self._shift_at_peek: list[Tensor] | None = None  # the tangent's shift at the rollout's start

    def _grads(self) -> dict[str, list[Tensor]]:
        out = {}
        for name, f in self.probes.items():
            with torch.enable_grad():
                val = f(self.model)
                gs = torch.autograd.grad(val, self.params, allow_unused=True)
            out[name] = [torch.zeros_like(p) if g is None else g.detach() for p, g in zip(self.params, gs)]
        return out

    def before_step(self) -> list[Tensor]:
        """Call before ``opt.step()``: the parameters it starts from (probe gradients cached)."""
        if self._grad is None:
            self._grad = self._grads()
        return [p.detach().clone() for p in self.params]

    def after_step(self, before: list[Tensor], part: list[Tensor | None]) -> None:
        """Call after ``opt.step()``: ``part`` is the loss-gradient part to attribute."""
        d_part = self.tangent.step(part)
        step = [p.detach() - b for p, b in zip(self.params, before)]
        self._advance(step, d_part)

    def _advance(self, step: list[Tensor], d_part: list[Tensor] | None) -> None:
        g0 = self._grad
        g1 = self._grads()
        for name in self.probes:
            mid = [0.5 * (a + b) for a, b in zip(g0[name], g1[name])]
            self._acc[mk.attr_path(name)] += _dot(mid, step)
            if d_part is not None:
                self._acc[mk.attr_shared(name)] += _dot(mid, d_part)
        self._grad = g1

    def rescale(self, c: float, shared_since: dict[str, float], theta0: list[Tensor], theta1: list[Tensor]) -> None:
        """A rescale of the rollout's whole change ``theta1 - theta0`` by ``c`` (the
        KL-normalised step, already applied to the model): the shared part accumulated
        over the rollout (``shared_since``, from :meth:`peek` at the rollout's start)
        scales by ``c`` too, and the extra real step ``(c - 1)(theta1 - theta0)`` enters the path."""
        for name in self.probes:
            key = mk.attr_shared(name)
            self._acc[key] = shared_since[key] + c * (self._acc[key] - shared_since[key])
        shift = self.tangent.shift
        if shift is not None:  # the rollout's share of the cumulative shift scales by c as well
            start = self._shift_at_peek or [torch.zeros_like(x) for x in shift]
            self.tangent.shift = [a + c * (x - a) for a, x in zip(start, shift)]
        self._advance([(c - 1) * (b - a) for a, b in zip(theta0, theta1)], None)

    def at_contexts(self, f: Callable[[nn.Module], Tensor]) -> float:
        """``<grad f(theta), shift>``: the first-order change of ``f`` (a probe defined on
        **this** step's contexts, e.g. the entropy at the weak-credit positions of the
        rollout just sampled) caused by the part attributed over every earlier step
        (:attr:`AdamTangent.shift`). Called before the step's update, it predicts ``f``
        under this run's parameters minus ``f`` under the parameters of a run without that
        part, at the same contexts: along the baseline's path the baseline-minus-surgical
        gap (issue 42's P3 at the sampled contexts, ``delta_hat``'s per-step term). 0.0
        before any step."""
        shift = self.tangent.shift
        if shift is None:
            return 0.0
        with torch.enable_grad():
            val = f(self.model)
            gs = torch.autograd.grad(val, self.params, allow_unused=True)
        return _dot([torch.zeros_like(p) if g is None else g.detach() for p, g in zip(self.params, gs)], shift)

    def peek(self) -> dict[str, float]:
        """The sums so far; marks the rollout's start for :meth:`rescale` (call it there)."""
        self._shift_at_peek = None if self.tangent.shift is None else [x.clone() for x in self.tangent.shift]
        return dict(self._acc)

    def take(self) -> dict[str, float]:
        out = dict(self._acc)
        self._acc = {k: 0.0 for k in self._acc}
        return out
