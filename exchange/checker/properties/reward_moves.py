"""The reward vectors (Z) is judged over, the permutations it averages over, and the
residual it reads from them (THEORY.md section 2, "Testing these on a black box"), for
:mod:`~exchange.checker.properties.zero_sum` and the truncation probe of
:mod:`exchange.checker.mechanisms.m4_not_zero_sum`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from exchange.checker.properties.residuals import as_residual, per_event
from exchange.checker.tolerances import ATOL_REL, TINY
from exchange.core.events import event_residuals_of
from exchange.core.rollout import Rollout

__all__ = ["reward_vectors", "cyclic_shifts", "reward_dependent"]


def reward_vectors(rewards: Tensor, rollout: Rollout) -> list[Tensor]:
    """``rewards [K, N]`` first, then three more reward vectors of its shape, each group at
    its own level ``1 + g`` (a centre that is not the group's own moves with it): the drawn
    rewards shifted, a one-hot pattern (the group's first response 1) and a ramp
    (``0, 1/(G-1), ..., 1``). Advantages that are not zero-sum change their sum with the
    pattern, even when they are invariant to shifts and scales, as std-normalised ones
    are; two patterns, because the drawn rewards may be one of them. None ties a group
    (the drawn rewards are mixed in every group), so filters of tied groups (DAPO's
    dynamic sampling) keep the same groups under all four."""
    gi = rollout.group_index.to(rewards.device)
    level = (1.0 + gi.to(rewards.dtype))[None]
    starts = torch.ones(rollout.n, dtype=torch.bool, device=rewards.device)
    starts[1:] = gi[1:] != gi[:-1]
    first = starts.to(rewards.dtype)
    # position of each response in its group (rows of a group are contiguous or not: count)
    position = torch.zeros(rollout.n, dtype=rewards.dtype, device=rewards.device)
    for g in range(rollout.n_groups):
        rows = (gi == g).nonzero().flatten()
        position[rows] = torch.arange(len(rows), dtype=rewards.dtype, device=rewards.device) / max(len(rows) - 1, 1)
    return [rewards, rewards + level, (first[None] + level).expand_as(rewards), (position[None] + level).expand_as(rewards)]


def cyclic_shifts(rollout: Rollout, update: Tensor | None = None) -> list[Tensor]:
    """Index permutations ``[N]``: for ``k`` in ``range(lcm of the group sizes)``, each
    response takes the reward of the one ``k`` places later in its group. With the rows
    of an optimizer step ``update [N]`` (:func:`~exchange.checker.properties.update_rows.update_rows`),
    each group's rows in the step are shifted among themselves and the others stay: the
    permutations of THEORY.md section 2's average, read on the step (its average is then
    ``mean_S(w) sum_{i in S} A_i``, the step's (Z))."""
    _, dense = torch.unique(rollout.group_index.cpu(), return_inverse=True)
    if update is not None:  # a part of a group outside the step keeps its rewards: no class of its own
        dense = torch.where(update.cpu(), dense, torch.full_like(dense, -1))
    rows = [r for c in range(int(dense.max()) + 1) if (r := torch.nonzero(dense == c).flatten()).numel()]
    period = math.lcm(*(len(r) for r in rows))
    out = []
    for k in range(period):
        perm = torch.arange(rollout.n)
        for r in rows:
            perm[r] = r.roll(-k)
        out.append(perm.to(rollout.rewards.device))
    return out


def reward_dependent(kappas: list[Tensor], ev, which: Tensor, scales: list[Tensor] | None = None) -> Tensor:
    """``[K]``: max over the events in ``which`` of ``max_v |K_e(v) - K_e(r)|`` over the
    per-event mass (``sum |kappa|`` of the occurrences, the largest over ``v``), for
    ``kappas``: one ``[K, N, T]`` per reward vector, the drawn one ``r`` first.
    ``scales``: the coefficients that set the mass and the absolute floor, when
    ``kappas`` are averages that cancel (default ``kappas``)."""
    scales = kappas if scales is None else scales
    if not bool(which.any()):
        return torch.zeros(kappas[0].shape[0], dtype=kappas[0].dtype, device=kappas[0].device)
    Ks = [per_event(k, ev)[0] for k in kappas]
    mass = torch.stack([per_event(k, ev)[1] for k in scales]).amax(0)  # [K, E]
    spread = torch.stack([(K - Ks[0]).abs() for K in Ks[1:]]).amax(0)
    scale = torch.stack([k.abs().flatten(1).amax(1) for k in scales]).amax(0)
    res = as_residual(event_residuals_of(spread, mass, (ATOL_REL * scale + TINY)[:, None]))
    return torch.where(which[None], res, torch.zeros_like(res)).amax(1)

