"""The dose arms of issue 42: keep a fraction ``f`` of the shared residual.

A one-parameter extension of the surgical transform (:mod:`exchange.objectives.surgical`):

    kappa_f[i, t] = kappa[i, t] - (1 - f) * K_e / n_e     at occurrences of a shared event e
    kappa_f[i, t] = kappa[i, t]                           otherwise

so ``f = 0`` is the surgical arm and ``f = 1`` the baseline, and every shared event keeps
``K'_e = f * K_e``. First order (THEORY.md section 5, "what a design must survive") says
the probe's drift against the surgical arm scales with ``f``: the dose arm's effect is
``f`` times the full arm's. Under Adam a parameter reached only by the residual breaks
that (its step is ~lr whatever the gradient's size); the dose rule
(:func:`exchange.lab.dose_rule.decide_dose`) tests it on each dose's own interval.

Like the surgical transform it works on any ``loss_fn(logprobs [N, T], rollout)``: one
extra backward gives ``kappa`` (float64), the correction ``(1 - f) * c`` is added as
``sum c'[i, t] * (l - sg(l))``, so the loss value is unchanged and only its gradient
moves.

A dose keeps ``f`` of what **its design's** surgical arm removes (:func:`dose_arm`): the
whole shared residual ``K_e`` above when that arm is ``"<objective>+surgical"``, only the
coupling residual ``D_e`` when it is ``"<objective>+coupling_surgical"`` (issue 42's M1
design; :func:`exchange.objectives.coupling.coupling_surgical` with ``keep = f``). Either
way ``kappa_f = f * kappa + (1 - f) * kappa_surgical`` at every token.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping

from torch import Tensor

from exchange.core.coefficients import LossFn, token_coefficients
from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.objectives import get, resolve
from exchange.objectives.coupling import coupling_surgical
from exchange.objectives.surgical import SURGICAL, shared_correction

__all__ = ["COUPLING", "dose_arm", "dose_family", "dosed"]

COUPLING = "coupling_surgical"
"""The dose family of a design whose surgical arm is ``"<objective>+coupling_surgical"``
(:attr:`exchange.lab.config.Arm.dose_of`); ``None`` is the whole residual's ("+surgical")."""


def _check_keep(keep: Any, residual: str, surgical: str) -> None:
    """A dose arm's ``keep``: a number strictly between 0 (the ``surgical`` arm) and 1 (the
    baseline), the fraction of the ``residual`` it keeps."""
    if keep is None or isinstance(keep, bool) or not isinstance(keep, (int, float)) or not math.isfinite(keep) \
            or not 0 < keep < 1:
        raise InvalidArgument(f"keep={keep!r}: a dose arm keeps a fraction 0 < keep < 1 of the {residual} "
                              f"(keep = 0 is the {surgical}, 1 the baseline); set [[arms]] keep = 0.1.")


def dosed(loss_fn: LossFn, keep: float | None) -> LossFn:
    """``loss_fn`` keeping a fraction ``keep`` (0 < keep < 1) of its shared-event residual.

    Returns a ``loss_fn(logprobs [N, T], rollout) -> scalar`` with the same value and
    coefficients ``kappa - (1 - keep) K_e / n_e`` on shared-event occurrences; tensors
    follow ``logprobs``' device and dtype."""
    _check_keep(keep, "shared residual", "surgical arm")
    drop = 1.0 - float(keep)

    @functools.wraps(loss_fn)
    def wrapped(logprobs: Tensor, rollout: Rollout) -> Tensor:
        loss = loss_fn(logprobs, rollout)
        kappa = token_coefficients(loss_fn, logprobs.detach(), rollout)  # [N, T] float64
        c = drop * shared_correction(kappa, rollout).to(device=logprobs.device, dtype=logprobs.dtype)
        return loss + (c * (logprobs - logprobs.detach())).sum()  # kappa = -dloss/dl: subtracts c

    base = getattr(loss_fn, "__name__", None) or type(loss_fn).__name__
    wrapped.__name__ = f"{base}+dose{keep:g}"  # type: ignore[attr-defined]
    wrapped.surgical_base = loss_fn  # type: ignore[attr-defined]
    wrapped.keep = float(keep)  # type: ignore[attr-defined]
    return wrapped


def dose_family(baseline: str, surgical: str) -> str | None:
    """The family of a design's dose arms from its surgical arm's objective ``surgical``:
    ``None`` (the whole shared residual) for ``baseline + "+surgical"``, :data:`COUPLING`
    for ``baseline + "+coupling_surgical"``. Raises :class:`InvalidArgument` for any other
    (a dose of it would be ambiguous)."""
    if surgical == f"{baseline}+{SURGICAL}":
        return None
    if surgical == f"{baseline}+{COUPLING}":
        return COUPLING
    raise InvalidArgument(f"surgical objective={surgical!r}: a dose arm keeps a fraction of what the design's surgical "
                          f"arm removes, which must be {baseline!r} + '+surgical' or '+{COUPLING}'.")


def dose_arm(objective: str, params: Mapping[str, Any], keep: float | None, family: str | None = None,
             bound: LossFn | None = None) -> LossFn:
    """The dose arm keeping ``keep`` (0 < keep < 1) of what its design's surgical arm removes:
    ``family`` None, :func:`dosed` of ``objective`` bound with ``params`` (or of ``bound``,
    the caller's own binding of it: the TRL trainer binds with its GRPOConfig's params);
    :data:`COUPLING`, ``coupling_surgical(get(objective), keep=keep, **params)``. Both the
    CPU trainer (:meth:`exchange.lab.config.Arm.loss_fn`) and the TRL run
    (exchange.lab.llm_run) build their dose arms here."""
    if family is None:
        return dosed(bound if bound is not None else resolve(objective, **params), keep)
    if family != COUPLING:
        raise InvalidArgument(f"dose_of={family!r}: choose {COUPLING!r} (the coupling residual) or leave it unset "
                              "(the whole shared residual).")
    _check_keep(keep, "coupling residual", "coupling-surgical arm")
    return coupling_surgical(get(objective), keep=float(keep), **params)
