"""Token events and event coefficients (THEORY.md section 1).

An occurrence ``(i, t)`` has event ``e(i, t) = (group, o_i[<t], o_i[t])``: two
occurrences are the same event when they share the group, every preceding response
token and the token itself. Occurrences of one event share one gradient vector, so the
update is ``sum_e K_e grad l_e`` with ``K_e = sum_{(i,t) in e} kappa[i, t]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from exchange.core.rollout import Rollout

__all__ = ["Events", "events", "event_coefficients", "shared_events", "event_residuals", "shared_residual"]


@dataclass(frozen=True)
class Events:
    """Event ids of every real token.

    Fields:
        ids: ``LongTensor[N, T]`` event id per occurrence, ``-1`` on padding.
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
    """Assign event ids from the definition: same group, same prefix, same token."""
    tokens = rollout.tokens.tolist()
    lengths = rollout.lengths.tolist()
    gidx = rollout.group_index.tolist()
    n, t_max = rollout.tokens.shape
    # A trie: the event of (i, t) is keyed by (event of (i, t-1), token), so equal keys
    # mean equal group, prefix and token. Roots are keyed by -(group + 1).
    table: dict[tuple[int, int], int] = {}
    ev_group: list[int] = []
    ev_pos: list[int] = []
    rows: list[list[int]] = []
    for i in range(n):
        parent = -(gidx[i] + 1)
        row = [-1] * t_max
        for t in range(lengths[i]):
            key = (parent, tokens[i][t])
            e = table.get(key)
            if e is None:
                e = table[key] = len(ev_group)
                ev_group.append(gidx[i])
                ev_pos.append(t)
            row[t] = parent = e
        rows.append(row)
    ids = torch.tensor(rows, dtype=torch.long).reshape(n, t_max)
    count = len(ev_group)
    flat = ids[rollout.mask]
    occurrences = torch.bincount(flat, minlength=count)
    group = torch.tensor(ev_group, dtype=torch.long)
    sizes = torch.bincount(rollout.group_index, minlength=rollout.n_groups)
    return Events(
        ids=ids,
        count=count,
        group=group,
        position=torch.tensor(ev_pos, dtype=torch.long),
        occurrences=occurrences,
        shared=occurrences == sizes[group],
    )


def event_coefficients(kappa: Tensor, ev: Events) -> Tensor:
    """``K: Tensor[E]``, the sum of the token coefficients over each event's occurrences."""
    valid = ev.ids >= 0
    return torch.zeros(ev.count, dtype=kappa.dtype).index_add(0, ev.ids[valid], kappa[valid])


def shared_events(rollout: Rollout, ev: Events | None = None) -> Tensor:
    """``LongTensor[S]``: ids of the events that occur in every response of their group."""
    ev = events(rollout) if ev is None else ev
    return ev.shared.nonzero().flatten()


def event_residuals(kappa: Tensor, ev: Events, atol: float = 0.0) -> Tensor:
    """``Tensor[E]``: the share of each event's coefficient mass that does not cancel,
    ``|K_e| / (sum_{(i,t) in e} |kappa[i, t]| + atol)``; ``0/0`` (no mass) is 0.

    1 means every occurrence pushes the same way, 0 that they cancel exactly (T1).
    """
    K = event_coefficients(kappa, ev)
    mass = event_coefficients(kappa.abs(), ev)
    out = K.abs() / (mass + atol)
    return torch.where((mass == 0) & (K == 0), torch.zeros_like(out), out)


def shared_residual(kappa: Tensor, rollout: Rollout, ev: Events | None = None) -> float:
    """**The shared residual**: the share of the coefficient mass on shared events that
    does not cancel, ``sum_{e shared} |K_e| / sum_{e shared} sum_{(i,t) in e} |kappa[i, t]|``.

    ``kappa: [N, T]``. It is the mass-weighted mean of :func:`event_residuals` over the
    shared events: 0 under (Z) + (E) (Theorem T1), 1 when no shared event cancels at all,
    and 0 when the batch has no shared event or no mass on one. The checker's (C)
    property, ``exchange inspect``, the training integrations and the lab all report this
    one number (the checker per event, the others per batch).
    """
    ev = events(rollout) if ev is None else ev
    K = event_coefficients(kappa, ev)[ev.shared]
    mass = event_coefficients(kappa.abs(), ev)[ev.shared]
    total = float(mass.sum())
    return float(K.abs().sum()) / total if total > 0 else 0.0
