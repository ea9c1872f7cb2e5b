"""Event-consistent one-group rollouts built from plain numbers (shared by the tests).

Token 0 is one shared event (same token id, same behaviour and current log-prob in
every response); every other token is unique to its response.
"""

from __future__ import annotations

import math

import torch

from exchange import Rollout

SHARED_TOKEN = 7


def one_group(rewards, lengths, old_probs, log_ratios, entropies=None):
    """``old_probs[i][t]``, ``log_ratios[i][t]`` and ``entropies[i][t]`` for ``t < lengths[i]``;
    entries at ``t = 0`` are taken from response 0 for every response (the shared event).
    Without ``entropies`` every token's entropy is ``1 + 0.1 t`` (the same at ``t = 0``)."""
    G, T = len(rewards), max(lengths)
    mask = torch.tensor([[t < lengths[i] for t in range(T)] for i in range(G)])
    tokens = torch.tensor([[SHARED_TOKEN if t == 0 else 100 + 10 * i + t for t in range(T)] for i in range(G)])
    old = torch.zeros(G, T, dtype=torch.float64)
    lp = torch.zeros(G, T, dtype=torch.float64)
    ent = torch.zeros(G, T, dtype=torch.float64)
    for i in range(G):
        for t in range(lengths[i]):
            src = 0 if t == 0 else i
            old[i, t] = math.log(old_probs[src][t])
            lp[i, t] = old[i, t] + log_ratios[src][t]
            ent[i, t] = entropies[src][t] if entropies is not None else 1.0 + 0.1 * t
    rollout = Rollout(tokens=tokens * mask, mask=mask, rewards=torch.tensor(rewards, dtype=torch.float64),
                      group=torch.zeros(G, dtype=torch.long), old_logprobs=old, entropy=ent)
    return rollout, lp
