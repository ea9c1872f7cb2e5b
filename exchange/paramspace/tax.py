"""The learning tax: the share of an update carried by zero-credit occurrences.

THEORY.md sections 1, 4c (Prop. 3.1) and 5 (P1). The update of ``J = -loss`` is

    g = grad_theta J = sum_{i,t} kappa[i,t] grad l[i,t],     kappa = -d loss / d l.

Split the occurrences into zero-credit ones ``Z`` (occurrences of shared events, plus
any occurrence of a token id the user marks as weak-credit) and the rest ``R``. Then
``g = g_Z + g_R`` with ``g_Z = sum_{(i,t) in Z} kappa[i,t] grad l[i,t]``: one backward
pass of ``l(theta)`` with the cotangent ``kappa * 1_Z``. Because every occurrence of an
event has the same ``grad l_e``, the shared part is ``sum_{e shared} K_e grad l_e``
(event coefficients ``K_e``): exactly zero when (C) holds.

    learning tax = ||g_Z|| / ||g||

Cost, whatever the number of occurrences: one forward and one backward pass for ``g``;
``g_shared`` from a second forward/backward on the rows that hold shared events, cut
after the last shared position (a causal model reads nothing later: for a shared
prefix this is a small fraction of a pass); one more masked backward for ``g_weak``
when weak token ids are given; ``g_rest = g - g_shared - g_weak``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch
from torch import Tensor, nn

from exchange.core.coefficients import LossFn, token_coefficients
from exchange.core.events import Events, event_coefficients, events
from exchange.models import prefix_logits, response_logprobs
from exchange.paramspace import params as P
from exchange.core.rollout import Rollout

__all__ = ["LearningTax", "ZeroCredit", "zero_credit_occurrences", "learning_tax"]


@dataclass(frozen=True)
class ZeroCredit:
    """Which occurrences carry zero true credit (``BoolTensor[N, T]`` each, disjoint).

    Fields:
        shared: occurrences of shared events (in every response of the group).
        weak: occurrences of the weak-credit token ids that are not already shared.
        rest: every other real token.
    """

    shared: Tensor
    weak: Tensor
    rest: Tensor

    @property
    def any(self) -> Tensor:
        return self.shared | self.weak


def zero_credit_occurrences(
    rollout: Rollout, weak_token_ids: Iterable[int] = (), ev: Events | None = None
) -> ZeroCredit:
    """Partition the real tokens of ``rollout`` into shared / weak / rest masks ``[N, T]``."""
    ev = events(rollout) if ev is None else ev
    weak_ids = torch.as_tensor(sorted({int(v) for v in weak_token_ids}), dtype=torch.long)
    shared = rollout.mask & ev.shared[ev.ids.clamp(min=0)]
    weak = rollout.mask & torch.isin(rollout.tokens, weak_ids) & ~shared
    return ZeroCredit(shared=shared, weak=weak, rest=rollout.mask & ~shared & ~weak)


@dataclass(frozen=True)
class LearningTax:
    """Result of :func:`learning_tax`. Norms are Euclidean over the selected parameters.

    Fields:
        tax: ``||g_shared + g_weak|| / ||g||`` (NaN when ``g == 0``). May exceed 1 when the
            zero-credit part and the rest point against each other.
        shared_tax: ``||g_shared|| / ||g||``; 0 up to round-off for objectives with (C).
        weak_tax: ``||g_weak|| / ||g||``.
        update_norm, residual_norm, shared_norm, weak_norm: the norms themselves.
        cosine: cosine between the zero-credit part and the whole update.
        kappa_share: ``sum_Z |kappa| / sum |kappa|``, the same split in coefficient space.
        n_tokens, n_shared, n_weak: occurrence counts; n_shared_events: shared events.
        shared_event_coefficients: ``K_e`` of the shared events, ``Tensor[S]`` float64.
        update, residual, shared_update, weak_update: ``dict[name, Tensor]``, ``g``,
            ``g_shared + g_weak``, ``g_shared``, ``g_weak`` (pass ``residual`` to
            :func:`~exchange.paramspace.kl_prediction`).
        by_parameter: ``{name: ||residual[name]|| / ||update[name]||}``.
        kappa: the token coefficients ``[N, T]`` used; occurrences: the :class:`ZeroCredit`.
    """

    tax: float
    shared_tax: float
    weak_tax: float
    update_norm: float
    residual_norm: float
    shared_norm: float
    weak_norm: float
    cosine: float
    kappa_share: float
    n_tokens: int
    n_shared: int
    n_weak: int
    n_shared_events: int
    shared_event_coefficients: Tensor
    update: dict[str, Tensor] = field(repr=False)
    residual: dict[str, Tensor] = field(repr=False)
    shared_update: dict[str, Tensor] = field(repr=False)
    weak_update: dict[str, Tensor] = field(repr=False)
    by_parameter: dict[str, float] = field(repr=False)
    kappa: Tensor = field(repr=False)
    occurrences: ZeroCredit = field(repr=False)

    def to_dict(self, prefix: str = "paramspace/") -> dict[str, float]:
        """Scalars for a metrics logger, keys namespaced with ``prefix``."""
        keys = (
            "tax", "shared_tax", "weak_tax", "update_norm", "residual_norm", "shared_norm",
            "weak_norm", "cosine", "kappa_share", "n_tokens", "n_shared", "n_weak", "n_shared_events",
        )
        return {f"{prefix}{k}": float(getattr(self, k)) for k in keys}


def learning_tax(
    model: nn.Module,
    loss_fn: LossFn,
    rollout: Rollout,
    weak_token_ids: Iterable[int] = (),
    *,
    params: Sequence[str] | None = None,
) -> LearningTax:
    """Measure the learning tax of ``loss_fn`` on ``rollout`` at the model's parameters.

    ``rollout`` needs ``prompt_tokens`` (see :func:`~exchange.paramspace.sample_rollout`).
    ``kappa`` is taken at the model's current log-probs ``l(theta)`` with the rollout's
    ``old_logprobs``; ``g`` equals ``-grad loss_fn(l(theta), rollout)`` (the chain rule,
    checked in the tests). ``params`` restricts ``theta`` to some parameter names
    (default: every parameter with ``requires_grad``).
    """
    theta = P.select_params(model, params)
    with torch.enable_grad():
        l = response_logprobs(model, rollout, params=theta)  # [N, T]
        kappa = token_coefficients(loss_fn, l.detach(), rollout)  # [N, T] float64
        ev = events(rollout)
        z = zero_credit_occurrences(rollout, weak_token_ids, ev)
        update = P.masked_backward(l, theta, kappa * rollout.mask)
        # no weak-credit token: skip a backward pass (a harness logs this every step)
        g_weak = P.masked_backward(l, theta, kappa * z.weak) if z.weak.any() else P.zeros_like(theta)
        g_shared = _shared_update(model, rollout, theta, kappa, z.shared)
    residual = P.add(g_shared, g_weak)

    update_norm, residual_norm = P.norm(update), P.norm(residual)
    shared_norm, weak_norm = P.norm(g_shared), P.norm(g_weak)
    K = event_coefficients(kappa, ev)
    abs_k = kappa.abs()
    return LearningTax(
        tax=P.ratio(residual_norm, update_norm),
        shared_tax=P.ratio(shared_norm, update_norm),
        weak_tax=P.ratio(weak_norm, update_norm),
        update_norm=update_norm,
        residual_norm=residual_norm,
        shared_norm=shared_norm,
        weak_norm=weak_norm,
        cosine=P.ratio(P.dot(residual, update), residual_norm * update_norm),
        kappa_share=P.ratio(float(abs_k[z.any].sum()), float(abs_k.sum())),
        n_tokens=int(rollout.mask.sum()),
        n_shared=int(z.shared.sum()),
        n_weak=int(z.weak.sum()),
        n_shared_events=int(ev.shared.sum()),
        shared_event_coefficients=K[ev.shared],
        update=update,
        residual=residual,
        shared_update=g_shared,
        weak_update=g_weak,
        by_parameter={n: P.ratio(P.norm({n: residual[n]}), P.norm({n: update[n]})) for n in update},
        kappa=kappa,
        occurrences=z,
    )


def _shared_update(model: nn.Module, rollout: Rollout, theta: P.ParamDict, kappa: Tensor, shared: Tensor) -> P.ParamDict:
    """``sum_{(i,t) shared} kappa[i,t] grad l[i,t]`` on the causal cut: rows holding shared
    occurrences, response positions up to the last shared one."""
    if not shared.any():
        return P.zeros_like(theta)
    rows = shared.any(dim=1).nonzero().flatten()
    t_end = int(shared.nonzero()[:, 1].max()) + 1
    logp = torch.log_softmax(prefix_logits(model, rollout, rows, t_end, params=theta), dim=-1)
    l = logp.gather(-1, rollout.tokens[rows, :t_end].clamp(min=0)[..., None]).squeeze(-1)  # [R, t_end]
    return P.masked_backward(l, theta, (kappa * shared)[rows, :t_end])
