"""The residuals the properties share, written once for batches (``K`` configurations).

A plain evaluation is a batch of one: the oracle and the bulk fuzzer compute the same
numbers with the same code (tolerances: :mod:`exchange.checker.tolerances`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from exchange.checker.tolerances import ATOL_REL, MAX_MISMATCHES, SECOND_REWARDS_STEP, TINY, ZERO_COLUMN
from exchange.core.events import Events, event_residuals_of
from exchange.core.rollout import Rollout

__all__ = ["as_residual", "per_event", "cancellation_mismatches", "Spread", "direction_spread", "tied_groups",
           "fmt", "reference_rewards", "with_reference_rewards", "second_rewards"]


def as_residual(x: Tensor) -> Tensor:
    """NaN -> inf: a NaN never "holds"."""
    return torch.where(torch.isnan(x), torch.full_like(x, float("inf")), x)


def per_event(kappa: Tensor, ev: Events, reference: Tensor | None = None,
              shared: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """``(K [K, E], mass [K, E], per-event residual [K, E])`` of ``kappa [K, N, T]``:
    ``|K_e| / (sum |kappa| + ATOL_REL * max|kappa|)``, 0/0 = 0. ``shared``: the shared
    events only (``[K, S]``, in :func:`exchange.core.events.shared_events` order), summing
    only the columns up to the last shared position (a real batch's responses diverge
    early; ``exchange.inspect`` pays for no more). ``reference``: the same layout's
    coefficients at :func:`reference_rewards` (``[K, N, T]``); the mass and the scale are
    then the larger of the two, so that a group whose rewards tie, and whose coefficients
    are only round-off of advantages that are 0 in exact arithmetic, is judged against the
    magnitude of what the loss sums for that event when its rewards differ (THEORY.md
    section 2: round-off per event). NaN reads as inf (never "holds")."""
    ids = ev.shared.nonzero().flatten()
    head = (int(ev.position[ids].max()) + 1 if ids.numel() else 0) if shared else kappa.shape[-1]
    sub = ev.ids[:, :head]
    valid = sub >= 0
    kv = kappa[:, :, :head][:, valid]  # [K, occurrences in the summed columns]
    zeros = torch.zeros(kappa.shape[0], ev.count, dtype=kappa.dtype, device=kappa.device)
    K, mass = zeros.index_add(1, sub[valid], kv), zeros.index_add(1, sub[valid], kv.abs())
    if shared:
        K, mass = K[:, ids], mass[:, ids]
    scale = _scale(kappa)
    if reference is not None:  # the reference only bounds round-off: its NaN/inf never count
        mass = torch.maximum(mass, torch.nan_to_num(per_event(reference, ev, shared=shared)[1], nan=0.0, posinf=0.0))
        scale = torch.maximum(scale, torch.nan_to_num(_scale(reference), nan=0.0, posinf=0.0))
    return K, mass, as_residual(event_residuals_of(K, mass, (ATOL_REL * scale + TINY)[:, None]))


def _scale(kappa: Tensor) -> Tensor:
    """``[K]``: the largest ``|kappa|`` of each configuration (0 for an empty one)."""
    flat = kappa.abs().flatten(1)
    return flat.amax(1) if flat.shape[1] else flat.sum(1)


def reference_rewards(rewards: Tensor, rollout: Rollout) -> Tensor:
    """``rewards [K, N]`` with 1 added to each group's first response: every group mixed
    (the reference magnitudes of :func:`per_event`)."""
    gi = rollout.group_index.to(rewards.device)
    rows = torch.arange(rollout.n, device=rewards.device)
    # each group's smallest row (rows of a group need not be contiguous); one pass, not a loop over rows
    firsts = torch.full((rollout.n_groups,), rollout.n, device=rewards.device).scatter_reduce(0, gi, rows, "amin")
    return rewards + (rows == firsts[gi]).to(rewards.dtype)[None]


def second_rewards(rewards: Tensor, rollout: Rollout) -> Tensor:
    """``rewards [N]`` moved by ``0.2 * spread_g * (1 + j / G)`` for the ``j``-th response
    of every group whose rewards differ (``spread_g`` = max - min): every response moves
    (an uncentred estimator's advantages change everywhere), by amounts that are not an
    affine function of the rewards (a std-scaled estimator is not blind to it as it is to
    a shift or a scale), small enough that the sign of every centred advantage stays
    (at most 0.15 spread from the centre's move, against at least 0.25 spread for a
    group with one reward apart). Tied groups stay tied."""
    gi = rollout.group_index.to(rewards.device)
    out = rewards.clone()
    for g in range(rollout.n_groups):
        rows = (gi == g).nonzero().flatten()
        r = rewards[rows]
        spread = r.max() - r.min()
        j = torch.arange(rows.numel(), dtype=rewards.dtype, device=rewards.device)
        out[rows] = r + SECOND_REWARDS_STEP * spread * (1.0 + j / rows.numel())
    return out


def with_reference_rewards(rollout: Rollout) -> Rollout:
    """``rollout`` at :func:`reference_rewards` (every group mixed)."""
    return rollout.with_fields({"rewards": reference_rewards(rollout.rewards[None], rollout)[0]})


def cancellation_mismatches(rollout: Rollout, kappa: Tensor, ev: Events, which: Tensor, rtol: float) -> list[str]:
    """One line per event of ``which`` whose residual exceeds ``rtol`` (``kappa [N, T]``)."""
    if not bool(which.any()):
        return []
    K, mass, res = (x[0] for x in per_event(kappa[None], ev))
    lines = []
    for e in ((res > rtol) & which).nonzero().flatten().tolist()[:MAX_MISMATCHES]:
        i, t = (ev.ids == e).nonzero()[0].tolist()  # the event's first occurrence
        lines.append(f"event group={int(rollout.group[i])} t={t} tokens={tuple(rollout.tokens[i, : t + 1].tolist())}: "
                     f"K_e={float(K[e]):.6g} with sum|kappa|={float(mass[e]):.6g} (occurrences={int(ev.occurrences[e])})")
    return lines


class Spread(NamedTuple):
    """:func:`direction_spread` of ``K`` configurations."""

    residual: Tensor  # [K] the largest sine of a kept column's angle to the principal direction
    worst: Tensor  # [K] the index of that column
    used: Tensor  # [K] the columns kept (fewer than two: residual 0)
    direction: Tensor  # [K, G] the principal direction, a unit vector (0 where no column is kept)


def direction_spread(mat: Tensor) -> Spread:
    """How far the columns of ``mat [K, k, G]`` (k shared-event vectors across G
    responses, per configuration) are from one common direction, THEORY.md (E): the
    principal direction of the normalised columns and the largest sine of a column's
    angle to it (:class:`Spread`). The one definition of (E)'s spread: the property's
    residual (:mod:`~exchange.checker.properties.exchangeable`) and ``exchange inspect``'s
    weight vectors and spread (:mod:`~exchange.checker.batch_analysis`).

    Columns are normalised first; those shorter than ``ZERO_COLUMN`` x the longest are
    dropped (their direction is round-off); fewer than two give 0. Non-finite gives inf
    (and no direction)."""
    kb, k, g = mat.shape
    zeros = torch.zeros(kb, dtype=mat.dtype, device=mat.device)
    if k == 0:
        none = torch.zeros(kb, dtype=torch.long, device=mat.device)
        return Spread(zeros, none - 1, none, torch.zeros(kb, g, dtype=mat.dtype, device=mat.device))
    finite = torch.isfinite(mat).flatten(1).all(1)
    m = torch.where(finite[:, None, None], mat, torch.zeros_like(mat))
    peak = m.abs().flatten(1).amax(1)[:, None, None]
    # scale-free: huge (but finite) coefficients must not overflow the norms
    m = torch.where(peak > 0, m / torch.where(peak > 0, peak, torch.ones_like(peak)), m)
    norms = m.norm(dim=2)
    keep = norms > ZERO_COLUMN * norms.amax(1, keepdim=True)
    used = keep.sum(1)
    unit = torch.where(keep[..., None], m / torch.where(keep, norms, torch.ones_like(norms))[..., None], torch.zeros_like(m))
    direction = torch.linalg.svd(unit, full_matrices=False).Vh[:, 0]  # [K, G]
    direction = torch.where((used > 0)[:, None], direction, torch.zeros_like(direction))
    proj = (unit @ direction[..., None])[..., 0]
    sin = torch.where(keep, torch.sqrt(torch.clamp(1 - proj * proj, min=0.0)), torch.zeros_like(proj))
    worst = sin.argmax(1)
    res = torch.where(used < 2, zeros, sin.amax(1))
    res = torch.where(finite, res, torch.full_like(res, float("inf")))
    used = torch.where(finite, used, torch.full_like(used, k))
    return Spread(res, torch.where(finite, worst, torch.zeros_like(worst)), used, direction)


def tied_groups(rewards: Tensor, rollout: Rollout) -> Tensor:
    """``[K, n_groups]``: the groups of ``rollout``'s layout whose rewards (``[K, N]``) are
    all equal, per configuration."""
    return _group_max(rewards, rollout) == -_group_max(-rewards, rollout)


def _group_max(values: Tensor, rollout: Rollout) -> Tensor:
    """``[K, n_groups]``: the largest of ``values [K, N]`` over each group's rows (the
    batched, unbroadcast form of :meth:`Rollout.group_max`)."""
    k, g = values.shape[0], rollout.n_groups
    idx = rollout.group_index.to(values.device)[None].expand(k, -1)
    return torch.full((k, g), -float("inf"), dtype=values.dtype, device=values.device).scatter_reduce(1, idx, values, "amax")


def fmt(v: Tensor) -> str:
    return "(" + ", ".join(f"{float(x):.4g}" for x in v) + ")"
