"""Per-occurrence gradients ``grad_theta l[i,t]`` and gradient-similarity analyses.

THEORY.md section 6 ("shared token space"). For each response row ``i`` one forward
pass builds ``l[i, :]`` and ``torch.func.vjp`` its pullback; ``torch.func.vmap`` then
pulls back the one-hot cotangents of the row's occurrences at once, ``chunk_size`` at a
time to bound memory. Cost: one forward per row plus one (vectorised) backward per
occurrence, against a forward *and* a backward per occurrence for a Python loop. The
result is an ``[M, D]`` matrix (``M`` occurrences, ``D`` selected parameters), so
restrict ``params`` on large models.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch
from torch import Tensor, nn

from exchange.errors import InvalidArgument
from exchange.core.events import events
from exchange.models import response_logprobs
from exchange.paramspace import params as P
from exchange.core.rollout import Rollout

__all__ = [
    "OccurrenceGrads",
    "per_occurrence_grads",
    "per_occurrence_grads_loop",
    "same_token_cosines",
    "cosine_histogram",
    "plot_cosine_histogram",
]


@dataclass(frozen=True)
class OccurrenceGrads:
    """``grad_theta l[i,t]`` for ``M`` occurrences, flattened over the parameters.

    Fields:
        grads: ``Tensor[M, D]`` one row per occurrence (parameters in ``names`` order).
        rows, positions: ``LongTensor[M]``, the occurrence ``(i, t)``.
        token_ids: ``LongTensor[M]``, ``o_i[t]``.
        event_ids: ``LongTensor[M]``, the event of each occurrence (see exchange.core.events).
        names: parameter names; shapes: their shapes (to unflatten a row).
    """

    grads: Tensor
    rows: Tensor
    positions: Tensor
    token_ids: Tensor
    event_ids: Tensor
    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...] = field(repr=False)

    def weighted(self, kappa: Tensor) -> Tensor:
        """``kappa[i,t] * grad l[i,t]``: ``Tensor[M, D]`` (the occurrences' update terms)."""
        return kappa[self.rows, self.positions].to(self.grads.dtype)[:, None] * self.grads

    def unflatten(self, vector: Tensor) -> dict[str, Tensor]:
        """A ``[D]`` vector back to ``dict[name, Tensor]``."""
        sizes = [s.numel() for s in self.shapes]
        return {n: v.reshape(s) for n, v, s in zip(self.names, vector.split(sizes), self.shapes)}


def _occurrence_mask(rollout: Rollout, occurrences: Tensor | None) -> Tensor:
    if occurrences is None:
        return rollout.mask
    if occurrences.dtype != torch.bool or tuple(occurrences.shape) != tuple(rollout.mask.shape):
        raise InvalidArgument(
            f"occurrences dtype={occurrences.dtype} shape={list(occurrences.shape)}: pass a "
            f"BoolTensor shaped like rollout.mask {list(rollout.mask.shape)}."
        )
    return occurrences & rollout.mask


def _finish(rollout: Rollout, sel: Tensor, grads: Tensor, theta: P.ParamDict) -> OccurrenceGrads:
    idx = sel.nonzero()
    ev = events(rollout)
    return OccurrenceGrads(
        grads=grads,
        rows=idx[:, 0],
        positions=idx[:, 1],
        token_ids=rollout.tokens[idx[:, 0], idx[:, 1]],
        event_ids=ev.ids[idx[:, 0], idx[:, 1]],
        names=tuple(theta),
        shapes=tuple(v.shape for v in theta.values()),
    )


def _empty_rows(sel: Tensor, theta: P.ParamDict) -> Tensor:
    """Preallocated ``[M, D]`` output (filled in place: no second copy at the end)."""
    first = next(iter(theta.values()))
    return torch.empty(int(sel.sum()), sum(v.numel() for v in theta.values()), dtype=first.dtype)


def per_occurrence_grads(
    model: nn.Module,
    rollout: Rollout,
    *,
    occurrences: Tensor | None = None,
    params: Sequence[str] | None = None,
    chunk_size: int | None = 64,
) -> OccurrenceGrads:
    """``grad_theta l[i,t]`` for every selected occurrence, vectorised with torch.func.

    ``occurrences``: ``BoolTensor[N, T]`` (default every real token), ordered row-major.
    ``params``: parameter names (default every parameter with ``requires_grad``).
    ``chunk_size``: occurrences pulled back per vmap chunk (None = a row at once).
    """
    sel = _occurrence_mask(rollout, occurrences)
    theta = {n: v.detach() for n, v in P.select_params(model, params).items()}
    out = _empty_rows(sel, theta)
    start = 0
    for i in sel.any(dim=1).nonzero().flatten().tolist():
        one = rollout.select([i, i])  # a valid 2-row rollout; row 0 is response i
        _, pullback = torch.func.vjp(lambda th: response_logprobs(model, one, params=th)[0], theta)
        positions = sel[i].nonzero().flatten()
        cot = torch.zeros(len(positions), rollout.tokens.shape[1], dtype=next(iter(theta.values())).dtype)
        cot[torch.arange(len(positions)), positions] = 1.0  # [M_i, T] one-hot cotangents
        (g,) = torch.func.vmap(pullback, chunk_size=chunk_size)(cot)
        col = 0
        for v in g.values():  # [M_i, *shape] -> columns of the output
            out[start : start + len(positions), col : col + v[0].numel()] = v.reshape(len(positions), -1)
            col += v[0].numel()
        start += len(positions)
    return _finish(rollout, sel, out, theta)


def per_occurrence_grads_loop(
    model: nn.Module,
    rollout: Rollout,
    *,
    occurrences: Tensor | None = None,
    params: Sequence[str] | None = None,
) -> OccurrenceGrads:
    """The slow oracle: one forward and one backward pass per occurrence."""
    sel = _occurrence_mask(rollout, occurrences)
    theta = P.select_params(model, params)
    out = _empty_rows(sel, theta)
    for m, (i, t) in enumerate(sel.nonzero().tolist()):
        one = rollout.select([i, i])
        l = response_logprobs(model, one, params=theta)[0, t]
        grads = torch.autograd.grad(l, list(theta.values()), allow_unused=True)
        out[m] = torch.cat([(torch.zeros_like(v) if g is None else g).reshape(-1) for g, v in zip(grads, theta.values())])
    return _finish(rollout, sel, out, theta)


def same_token_cosines(
    occ: OccurrenceGrads, token_ids: Iterable[int] | None = None, *, kappa: Tensor | None = None
) -> dict[int, Tensor]:
    """Cosines between occurrences of one token id in *different* contexts.

    For each token id (default: every id with at least two events), the cosine of every
    pair of occurrences ``a < b`` whose events differ (pairs of the same event have equal
    gradients, cosine 1, and are left out). With ``kappa [N, T]`` the vectors are the
    update terms ``kappa grad l``. Returns ``{token_id: Tensor[pairs]}`` (float64).
    """
    vectors = (occ.weighted(kappa) if kappa is not None else occ.grads).double()
    unit = vectors / vectors.norm(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    wanted = sorted(set(occ.token_ids.tolist())) if token_ids is None else [int(v) for v in token_ids]
    out: dict[int, Tensor] = {}
    for v in wanted:
        idx = (occ.token_ids == v).nonzero().flatten()
        if idx.numel() < 2:
            continue
        cos = unit[idx] @ unit[idx].T  # [m, m]
        a, b = torch.triu_indices(len(idx), len(idx), offset=1)
        keep = occ.event_ids[idx[a]] != occ.event_ids[idx[b]]
        if keep.any():
            out[v] = cos[a[keep], b[keep]]
    return out


def cosine_histogram(cosines: Tensor | dict[int, Tensor], bins: int = 20):
    """``(counts, edges)`` of the cosines on ``[-1, 1]`` (``numpy.histogram``)."""
    import numpy as np

    values = torch.cat(list(cosines.values())) if isinstance(cosines, dict) else cosines
    return np.histogram(values.double().clamp(-1, 1).numpy(), bins=bins, range=(-1.0, 1.0))


def plot_cosine_histogram(cosines: Tensor | dict[int, Tensor], path: str | os.PathLike, bins: int = 20) -> None:
    """Save a histogram of the cosines to ``path`` (matplotlib, written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts, edges = cosine_histogram(cosines, bins)
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.stairs(counts, edges, fill=True)
    ax.set_xlabel("cosine(grad l_a, grad l_b), same token, different contexts")
    ax.set_ylabel("pairs")
    fig.tight_layout()
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1] or ".png"
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    try:
        fig.savefig(tmp)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)
