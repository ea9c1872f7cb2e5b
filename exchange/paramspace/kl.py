"""Prop. 3.1 check: the KL a step moves a context's next-token distribution.

THEORY.md section 4c. For a step ``theta -> theta + eta g`` and one context ``c`` with
logits ``z_c(theta)`` and distribution ``p = softmax(z_c)``,

    KL(p_theta || p_{theta + eta g}) = 1/2 eta^2 g^T F_c g + O(eta^3),
    g^T F_c g = Var_{y ~ p}( dz_{c,y} ),     dz_c = J_c g   (the logits' directional derivative)

(softmax Fisher ``F = J^T (diag p - p p^T) J``). One forward-mode pass
(``torch.func.jvp`` through ``functional_call``) gives ``dz`` at every context at once;
the measured KL needs one forward pass per ``eta``. The ratio measured / predicted
tends to 1 with error ``O(eta)``. Causality lets both run on the rows that hold a
selected context, cut after the last selected position: for shared contexts (a
group's common prefix) that is a small fraction of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch
from torch import Tensor, nn

from exchange.errors import InvalidArgument
from exchange.core.events import events
from exchange.models import prefix_logits
from exchange.paramspace import params as P
from exchange.core.rollout import Rollout

__all__ = ["KLPrediction", "context_mask", "kl_prediction"]


@dataclass(frozen=True)
class KLPrediction:
    """Predicted and measured KL, averaged over the selected contexts.

    Fields:
        etas: ``Tensor[K]`` step sizes.
        predicted: ``Tensor[K]``, ``1/2 eta^2 mean_c g^T F_c g``.
        measured: ``Tensor[K]``, ``mean_c KL(p_theta(.|c) || p_{theta+eta g}(.|c))``.
        fisher: ``Tensor[C]``, ``g^T F_c g`` per selected context (``C`` contexts).
        contexts: ``BoolTensor[N, T]``, the occurrences whose contexts were used.
    """

    etas: Tensor
    predicted: Tensor
    measured: Tensor
    fisher: Tensor = field(repr=False)
    contexts: Tensor = field(repr=False)

    @property
    def ratio(self) -> Tensor:
        """``measured / predicted`` per eta (NaN where the prediction is 0)."""
        return self.measured / torch.where(self.predicted > 0, self.predicted, torch.nan)

    @property
    def rel_error(self) -> Tensor:
        """``|ratio - 1|``: ``O(eta)`` when Prop. 3.1 holds."""
        return (self.ratio - 1).abs()


def context_mask(rollout: Rollout, contexts: str | Tensor = "shared") -> Tensor:
    """``BoolTensor[N, T]``: one occurrence per selected context.

    ``"shared"``: the first occurrence of each shared event (a shared event fixes its
    context, so this is one row per shared context); ``"all"``: every real token (each
    occurrence's context, duplicates included); or a ``BoolTensor[N, T]`` of your own.
    """
    if isinstance(contexts, Tensor):
        if contexts.dtype != torch.bool or tuple(contexts.shape) != tuple(rollout.mask.shape):
            raise InvalidArgument(
                f"contexts dtype={contexts.dtype} shape={list(contexts.shape)}: pass a BoolTensor "
                f"shaped like rollout.mask {list(rollout.mask.shape)}."
            )
        return contexts & rollout.mask
    if contexts == "all":
        return rollout.mask.clone()
    if contexts == "shared":
        ev = events(rollout)
        first = torch.zeros_like(rollout.mask)
        seen: set[int] = set()
        for i, t in rollout.mask.nonzero().tolist():
            e = int(ev.ids[i, t])
            if bool(ev.shared[e]) and e not in seen:
                seen.add(e)
                first[i, t] = True
        return first
    raise InvalidArgument(f"contexts={contexts!r} is not 'shared', 'all' or a BoolTensor[N, T].")


def kl_prediction(
    model: nn.Module,
    rollout: Rollout,
    direction: Mapping[str, Tensor],
    etas: Sequence[float] = (1e-1, 3e-2, 1e-2),
    *,
    contexts: str | Tensor = "shared",
) -> KLPrediction:
    """Compare ``1/2 eta^2 g^T F g`` (one JVP) with the KL after the step ``theta + eta g``.

    ``direction``: ``dict[name, Tensor]`` over some of the model's parameters (e.g.
    ``learning_tax(...).residual`` or ``.update``); other parameters stay fixed.
    ``contexts``: see :func:`context_mask`. Raises InvalidArgument when no context is
    selected (e.g. a rollout without shared events and ``contexts="shared"``).
    """
    g = P.check_direction(model, direction)
    sel = context_mask(rollout, contexts)
    if not sel.any():
        raise InvalidArgument(
            f"contexts={contexts if isinstance(contexts, str) else 'mask'!r} selects no context in "
            "this rollout (no shared events?); pass contexts='all' or a response_prefix when sampling."
        )
    eta_t = torch.as_tensor(list(etas), dtype=torch.float64)
    if eta_t.numel() == 0 or not torch.isfinite(eta_t).all():
        raise InvalidArgument(f"etas={list(etas)} must be a non-empty list of finite step sizes.")
    theta = {n: p.detach() for n, p in model.named_parameters() if n in g}
    rows = sel.any(dim=1).nonzero().flatten()
    t_end = int(sel.nonzero()[:, 1].max()) + 1
    sub_sel = sel[rows, :t_end]  # [R, t_end]

    def logits_at(params: dict[str, Tensor]) -> Tensor:
        return prefix_logits(model, rollout, rows, t_end, params)  # [R, t_end, V]

    with torch.no_grad():
        z, dz = torch.func.jvp(logits_at, (theta,), (g,))
        z, dz = z[sub_sel].double(), dz[sub_sel].double()  # [C, V]
        logp = torch.log_softmax(z, dim=-1)
        p = logp.exp()
        mean_dz = (p * dz).sum(-1, keepdim=True)
        fisher = (p * (dz - mean_dz) ** 2).sum(-1)  # [C]: Var_p(dz) = g^T F_c g
        measured = []
        for eta in eta_t.tolist():
            stepped = {n: theta[n] + eta * g[n] for n in theta}
            logq = torch.log_softmax(logits_at(stepped)[sub_sel].double(), dim=-1)
            measured.append((p * (logp - logq)).sum(-1).mean())
    return KLPrediction(
        etas=eta_t,
        predicted=0.5 * eta_t**2 * fisher.mean(),
        measured=torch.stack(measured),
        fisher=fisher,
        contexts=sel,
    )

