"""Inspect one real batch exactly, without fuzzing: ``exchange.inspect(loss_fn, rollout)``
(:func:`inspect`; its result, :class:`~exchange.checker.inspection.Inspection`). One
backward pass gives every token coefficient ``kappa``, the events of the batch every
shared event's ``K_e`` and mass (:func:`exchange.core.events.shared_event_coefficients`).
A group's **response weight vector** ``alpha`` is the common direction of its shared-event
coefficient vectors ``(kappa[1, e], ..., kappa[G, e])`` (THEORY.md (E)). Batch files
(``exchange inspect BATCH TARGET``) are read by :func:`exchange.core.batch_io.load_batch`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.checker.inspection import (
    CANCEL_TOL, PREFIX_TAIL, TOP, GroupWeights, Inspection, OffendingEvent, zero_sum_share,
)
from exchange.checker.mechanism_hints import hints
from exchange.checker.properties import shared_cancellation
from exchange.checker.properties.residuals import direction_spread, tied_groups, with_reference_rewards
from exchange.core.coefficients import LossFn, loss_and_coefficients
from exchange.core.events import Events, SharedResidual, events, shared_event_coefficients
from exchange.core.rollout import Rollout

__all__ = ["inspect"]


def _groups(rollout: Rollout, kappa: Tensor, ev: Events, shared_ids: Tensor, sK: Tensor,
            smass: Tensor, sres: Tensor) -> list[GroupWeights]:
    """Each group's weight vector, (C) residual (the largest of ``sres [S]``, the shared
    events' residuals, over its own) and shared residual."""
    n_groups, device = rollout.n_groups, kappa.device
    gidx = rollout.group_index
    rewards = rollout.rewards.to(torch.float64)
    # group g's shared events are the events core's definition marks shared (ev.shared):
    # its common prefix, less the context columns of a mask with holes (tool tokens), which
    # are no events (exchange.core.events)
    owner = ev.group[shared_ids]
    gres = torch.zeros(n_groups, dtype=kappa.dtype, device=device)
    if len(shared_ids):
        gres.scatter_reduce_(0, owner, sres, reduce="amax")
    order = torch.argsort(gidx, stable=True)
    sizes = torch.bincount(gidx, minlength=n_groups).tolist()
    group_ids = rollout.group.tolist()
    out: list[GroupWeights] = []
    start = 0
    for g, size in enumerate(sizes):
        rows = order[start : start + size]
        start += size
        mine = owner == g
        parts = SharedResidual.of(sK[mine], smass[mine])  # its shared events, counted and summed once
        found = direction_spread(kappa[rows][:, ev.position[shared_ids[mine]]].T[None])  # [1, S_g, G]
        direction, spread = found.direction[0], float(found.residual[0])
        centred = rewards[rows] - rewards[rows].mean()
        lean = float(direction @ centred)
        if lean < 0 or (lean == 0 and float(direction.sum()) < 0):
            direction = -direction
        out.append(GroupWeights(
            group=int(group_ids[int(rows[0])]),
            rows=tuple(rows.tolist()),
            shared_events=parts.events,
            weights=tuple(direction.tolist()),
            spread=spread,
            zero_sum=zero_sum_share(direction),
            residual=float(gres[g]),
            shared_residual=parts.value,
            rewards=tuple(rewards[rows].tolist()),
            lengths=tuple(rollout.lengths[rows].tolist()),
        ))
    return out


def inspect(loss_fn: LossFn, rollout: Rollout, logprobs: Tensor | None = None, *, top: int = TOP,
            ev: Events | None = None) -> Inspection:
    """Report exactly, without fuzzing, how ``loss_fn`` treats the shared events of one
    real batch: every shared event's ``K_e``, (C)'s residual (the checker's:
    :mod:`~exchange.checker.properties.shared_cancellation`) and the shared residual, each group's
    per-response weight vector and its distance from a common vector, the top offending
    events with their tokens, and a mechanism hint where the pattern tells one.

    ``logprobs`` defaults to ``rollout.logprobs`` (else ``rollout.old_logprobs``: on-policy).
    Everything runs in float64. The loss runs once more, at mixed rewards, only where a
    tied group's shared event does not cancel (the magnitude (C)'s residual judges it by).
    """
    if logprobs is None:
        logprobs = rollout.logprobs if rollout.logprobs is not None else rollout.old_logprobs
    loss, kappa = loss_and_coefficients(loss_fn, logprobs, rollout)
    ev = events(rollout) if ev is None else ev
    shared_ids, sK, smass = shared_event_coefficients(kappa, ev)
    shared = SharedResidual.of(sK, smass)

    tied = tied_groups(rollout.rewards[None].to(kappa.dtype), rollout)
    res = shared_cancellation.event_residuals(kappa[None], rollout, ev, tied, lambda rows: loss_and_coefficients(
        loss_fn, logprobs, with_reference_rewards(rollout))[1][None])
    per_event = res[0]  # [S], in shared_ids' order
    groups = _groups(rollout, kappa, ev, shared_ids, sK, smass, per_event)

    offending: list[OffendingEvent] = []
    group_ids = rollout.group.tolist()
    above = (per_event > CANCEL_TOL).nonzero().flatten()
    for k in above[torch.argsort(sK[above].abs(), descending=True)][:top].tolist():
        e = int(shared_ids[k])
        t = int(ev.position[e])
        row = int((rollout.group_index == ev.group[e]).nonzero()[0])  # a row of the group: the prefix is shared
        tail = tuple(rollout.tokens[row, max(0, t + 1 - PREFIX_TAIL) : t + 1].tolist())
        offending.append(OffendingEvent(
            event=e, group=int(group_ids[row]), position=t, token=tail[-1], prefix_tail=tail,
            K=float(sK[k]), mass=float(smass[k]), residual=float(per_event[k]),
        ))
    max_residual = float(shared_cancellation.residual(res)[0])
    mechanisms, lines = hints(rollout, groups, max_residual)
    return Inspection(
        loss=float(loss),
        n_responses=rollout.n,
        n_groups=rollout.n_groups,
        n_tokens=int(rollout.mask.sum()),
        n_events=ev.count,
        shared=shared,
        max_residual=max_residual,
        shared_K=sK,
        shared_mass=smass,
        shared_ids=shared_ids,
        groups=tuple(groups),
        top=tuple(offending),
        mechanisms=mechanisms,
        hints=lines,
    )
