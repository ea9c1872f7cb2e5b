"""Token events and event coefficients (THEORY.md section 1).

An occurrence ``(i, t)`` has event ``e(i, t) = (group, o_i[<t], o_i[t])``: two
occurrences are the same event when they share the group, every preceding response
token and the token itself. Only the policy's tokens (``rollout.mask``) are
occurrences; a context token inside a response (a multi-turn rollout's tool output,
mask False before the row's last True) is no event but belongs to ``o_i[<t]`` of every
later token, so it is compared like any other token of the prefix. Occurrences of one
event share one gradient vector, so the update is ``sum_e K_e grad l_e`` with
``K_e = sum_{(i,t) in e} kappa[i, t]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from exchange.core.rollout import Rollout

__all__ = [
    "Events",
    "events",
    "event_coefficients",
    "shared_events",
    "event_residuals",
    "event_residuals_of",
    "shared_event_coefficients",
    "SharedResidual",
    "shared_residual_parts",
    "shared_residual",
]


@dataclass(frozen=True)
class Events:
    """Event ids of every real token.

    Fields:
        ids: ``LongTensor[N, T]`` event id per occurrence, ``-1`` on padding and on
            context (mask False) tokens.
        count: number of distinct events ``E``.
        group: ``LongTensor[E]`` dense group index of each event.
        position: ``LongTensor[E]`` token position ``t`` of each event.
        occurrences: ``LongTensor[E]`` number of occurrences of each event.
        shared: ``BoolTensor[E]`` True when the event occurs in every response of its
            group (the same number of times: an event fixes its position, so at most once
            per response).
    """

    ids: Tensor
    count: int
    group: Tensor
    position: Tensor
    occurrences: Tensor
    shared: Tensor


def events(rollout: Rollout) -> Events:
    """Assign event ids from the definition: same group, same prefix, same token.

    Vectorised, linear in the token count: occurrences ``(i, t)`` and ``(j, t)`` of one
    group are the same event iff ``t`` is below the length of the common prefix of
    responses ``i`` and ``j``. Each occurrence is represented by the smallest row of its
    group that shares its prefix through ``t`` and has an occurrence at ``t`` (mask True:
    a row whose token there is context has none); the representatives' own occurrences
    are the events, numbered in row-major order of first occurrence. Prefixes are
    compared over each row's span (:attr:`Rollout.spans`), context tokens included.
    Only the columns below the longest common prefix of any two responses need the
    pairwise comparison.
    """
    tokens, mask, gidx = rollout.tokens, rollout.mask, rollout.group_index
    n, t_max = tokens.shape
    lengths = rollout.spans  # a multi-turn row's context tokens are part of its prefix
    rows = torch.arange(n, device=tokens.device)
    pairs = ((gidx[:, None] == gidx[None, :]) & (rows[None, :] < rows[:, None])).nonzero()
    i, j = pairs[:, 0], pairs[:, 1]
    shortest = torch.minimum(lengths[i], lengths[j])
    # common[p]: length of the common prefix of responses i[p] and j[p], found chunk by
    # chunk on the still-undecided pairs (real responses diverge early).
    common = shortest.clone()
    active = torch.arange(len(pairs), device=tokens.device)
    start, width = 0, 32
    while len(active) and start < t_max:
        stop = min(start + width, t_max)
        cols = torch.arange(start, stop, device=tokens.device)
        differ = tokens[i[active], start:stop] != tokens[j[active], start:stop]
        differ |= cols[None, :] >= shortest[active, None]
        hit = differ.any(dim=1)
        common[active[hit]] = start + differ[hit].to(torch.uint8).argmax(dim=1)
        active = active[~hit]
        start, width = stop, width * 4
    head = int(common.max()) if len(pairs) else 0  # columns where events can be shared
    # rep[i, t] (t < head): the smallest row j <= i of i's group with the same prefix through t
    pos = torch.arange(head, device=tokens.device)
    rep = rows[:, None].expand(n, head).clone()
    if head:
        # j represents (i, t) only where j has an occurrence at t (mask True)
        cand = torch.where((pos[None, :] < common[:, None]) & mask[j, :head], j[:, None], n)
        rep.scatter_reduce_(0, i[:, None].expand(-1, head), cand, reduce="amin")
    new = mask.clone()
    new[:, :head] &= rep == rows[:, None]
    numbering = torch.cumsum(new.flatten(), 0).reshape(n, t_max) - 1
    ids = numbering.clone()
    ids[:, :head] = numbering[:, :head].gather(0, rep)
    ids[~mask] = -1
    count = int(new.sum())
    first_row, first_pos = new.nonzero(as_tuple=True)  # row-major = id order
    group = gidx[first_row]
    # events past ``head`` occur once; count the occurrences of the others
    head_ids = ids[:, :head]
    occurrences = torch.bincount(head_ids[head_ids >= 0], minlength=count)
    occurrences[first_pos >= head] = 1
    sizes = torch.bincount(gidx, minlength=rollout.n_groups)
    return Events(
        ids=ids,
        count=count,
        group=group,
        position=first_pos,
        occurrences=occurrences,
        # a group of one response compares it with nothing (THEORY.md section 1: G >= 2):
        # its events are not shared (a dumped optimizer step may hold one row of a group)
        shared=(occurrences == sizes[group]) & (sizes[group] >= 2),
    )


def event_coefficients(kappa: Tensor, ev: Events) -> Tensor:
    """``K: Tensor[E]``, the sum of the token coefficients over each event's occurrences."""
    valid = ev.ids >= 0
    return torch.zeros(ev.count, dtype=kappa.dtype, device=kappa.device).index_add(0, ev.ids[valid], kappa[valid])


def shared_events(rollout: Rollout, ev: Events | None = None) -> Tensor:
    """``LongTensor[S]``: ids of the events that occur in every response of their group."""
    ev = events(rollout) if ev is None else ev
    return ev.shared.nonzero().flatten()


def event_residuals(kappa: Tensor, ev: Events, atol: float = 0.0) -> Tensor:
    """``Tensor[E]``: the share of each event's coefficient mass that does not cancel,
    ``|K_e| / (sum_{(i,t) in e} |kappa[i, t]| + atol)``; ``0/0`` (no mass) is 0.

    1 means every occurrence pushes the same way, 0 that they cancel exactly (T1).
    """
    return event_residuals_of(event_coefficients(kappa, ev), event_coefficients(kappa.abs(), ev), atol)


def event_residuals_of(K: Tensor, mass: Tensor, atol: float = 0.0) -> Tensor:
    """:func:`event_residuals` from events' ``K_e`` and coefficient masses (any shape,
    e.g. the ``[S]`` of :func:`shared_event_coefficients`): ``|K| / (mass + atol)``,
    ``0/0`` is 0."""
    out = K.abs() / (mass + atol)
    return torch.where((mass == 0) & (K == 0), torch.zeros_like(out), out)


def shared_event_coefficients(kappa: Tensor, ev: Events) -> tuple[Tensor, Tensor, Tensor]:
    """``(ids, K, mass)`` of the shared events, each ``[S]``: their ids (as
    :func:`shared_events`), ``K_e`` and coefficient mass ``sum_{(i,t) in e} |kappa[i, t]|``.

    ``kappa: [N, T]``. Shared events lie in their group's common prefix, so only the
    columns up to the last shared position are summed (a real batch's responses diverge
    early). The result follows ``kappa``'s device and dtype.
    """
    ids = ev.shared.nonzero().flatten()
    head = int(ev.position[ids].max()) + 1 if ids.numel() else 0
    sub = ev.ids[:, :head]
    valid = sub >= 0
    occ, k = sub[valid], kappa[:, :head][valid]
    zeros = torch.zeros(ev.count, dtype=kappa.dtype, device=kappa.device)
    K = zeros.index_add(0, occ, k)
    mass = zeros.index_add(0, occ, k.abs())
    return ids, K[ids], mass[ids]


@dataclass(frozen=True)
class SharedResidual:
    """**The shared residual** and its parts, over a set of shared events.

    Fields:
        abs_K: ``sum_{e shared} |K_e|``, the coefficient mass that does not cancel.
        mass: ``sum_{e shared} sum_{(i,t) in e} |kappa[i, t]|``, the coefficient mass on
            the shared events' occurrences (their P1 share's numerator, too).
        events: the number of shared events ``S``.

    ``abs_K`` and ``mass`` are additive over groups, batches and processes: a distributed
    integration sums them and takes :attr:`value` of the sums. It is a dose (how much of
    the shared mass an update keeps), not the size of a (C) break: that is the worst
    event's residual (:mod:`exchange.checker.properties.shared_cancellation`).
    """

    abs_K: float
    mass: float
    events: int

    @property
    def value(self) -> float:
        """``abs_K / mass``: 0 under (Z) + (E) (Theorem T1), 1 when no shared event
        cancels at all, and 0 when there is no mass (no shared event, or zero
        coefficients on them)."""
        return self.abs_K / self.mass if self.mass > 0 else 0.0

    @classmethod
    def of(cls, K: Tensor, mass: Tensor) -> "SharedResidual":
        """The parts of the shared events whose ``K_e`` and masses are ``K``, ``mass`` (``[S]``)."""
        return cls(abs_K=float(K.abs().sum()), mass=float(mass.sum()), events=int(K.numel()))


def shared_residual_parts(kappa: Tensor, rollout: Rollout, ev: Events | None = None) -> SharedResidual:
    """The shared residual of ``kappa: [N, T]`` on ``rollout`` with its parts
    (:class:`SharedResidual`); ``.value`` is :func:`shared_residual`."""
    ev = events(rollout) if ev is None else ev
    _, K, mass = shared_event_coefficients(kappa, ev)
    return SharedResidual.of(K, mass)


def shared_residual(kappa: Tensor, rollout: Rollout, ev: Events | None = None) -> float:
    """**The shared residual**: the share of the coefficient mass on shared events that
    does not cancel, ``sum_{e shared} |K_e| / sum_{e shared} sum_{(i,t) in e} |kappa[i, t]|``.

    ``kappa: [N, T]``. It is the mass-weighted mean of :func:`event_residuals` over the
    shared events: 0 under (Z) + (E) (Theorem T1), 1 when no shared event cancels at all,
    and 0 when the batch has no shared event or no mass on one. The training
    integrations and the lab log it, ``exchange inspect`` reports it beside (C)'s
    residual; (C)'s residual, what the checker and ``inspect`` judge (C) by, is the
    largest of the per-event residuals instead (THEORY.md states (C) for every shared
    event; :mod:`exchange.checker.properties.shared_cancellation`). Its parts (the two
    sums and the number of shared events): :func:`shared_residual_parts`.
    """
    return shared_residual_parts(kappa, rollout, ev).value
