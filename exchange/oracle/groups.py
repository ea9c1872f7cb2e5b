"""Groups of ``G`` responses drawn i.i.d. from ``pi(. | x)``: exact enumeration or sampling.

Exact: every multiset of ``G`` responses once, weighted by its multinomial probability
``G! / prod(n_m!) * prod_m p_m^{n_m}``. Objectives are permutation invariant within a
group (the checker's ``permutation_invariant`` property), so the multiset stands for
all its orderings; ``ordered=True`` enumerates the ``M^G`` ordered tuples instead.
Monte Carlo: ``n`` groups drawn with a seeded generator, each of weight ``1/n``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from exchange.errors import InvalidArgument
from exchange.oracle.exact import Responses
from exchange.core.rollout import Rollout

__all__ = ["count_groups", "enumerate_groups", "sample_groups", "group_rollouts"]


def count_groups(m: int, g: int, ordered: bool = False) -> int:
    """Number of distinct groups: ``M^G`` ordered, ``C(M+G-1, G)`` as multisets."""
    return m**g if ordered else math.comb(m + g - 1, g)


def enumerate_groups(prob: np.ndarray, g: int, ordered: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Every group: ``(idx int64[B, G], weight float64[B])``; the weights sum to 1."""
    if g < 2:
        raise InvalidArgument(f"G={g}: group-relative objectives need G >= 2.")
    m = len(prob)
    if ordered:
        idx = np.array(list(itertools.product(range(m), repeat=g)), dtype=np.int64)
        return idx, np.prod(prob[idx], axis=1)
    idx = np.array(list(itertools.combinations_with_replacement(range(m), g)), dtype=np.int64)
    counts = np.stack([(idx == j).sum(axis=1) for j in range(m)], axis=1)  # [B, M]
    log_multi = math.lgamma(g + 1) - np.vectorize(math.lgamma)(counts + 1).sum(axis=1)
    return idx, np.exp(log_multi) * np.prod(prob[idx], axis=1)


def sample_groups(prob: np.ndarray, g: int, n: int, seed: int = 0) -> np.ndarray:
    """``int64[n, G]``: ``n`` groups of ``G`` i.i.d. draws from ``prob``."""
    if g < 2:
        raise InvalidArgument(f"G={g}: group-relative objectives need G >= 2.")
    if n < 2:
        raise InvalidArgument(f"samples={n}: need at least 2 groups for a confidence interval.")
    rng = np.random.default_rng(seed)
    return rng.choice(len(prob), size=(n, g), p=prob / prob.sum())


def group_rollouts(resp: Responses, idx: np.ndarray) -> list[Rollout]:
    """One on-policy :class:`Rollout` per row of ``idx`` (``[B, G]`` response ids).

    ``old_logprobs = logprobs = log pi`` (ratio 1), ``entropy`` = the exact context
    entropies, ``T = env.horizon``.
    """
    out = []
    t = resp.tokens.shape[1]
    arange = np.arange(t)
    for row in idx:
        lengths = resp.lengths[row]
        lp = torch.from_numpy(resp.logprobs[row])
        out.append(
            Rollout(
                tokens=torch.from_numpy(resp.tokens[row]),
                mask=torch.from_numpy(arange[None, :] < lengths[:, None]),
                rewards=torch.from_numpy(resp.reward[row]),
                group=torch.zeros(len(row), dtype=torch.long),
                old_logprobs=lp,
                logprobs=lp,
                entropy=torch.from_numpy(resp.entropy[row]),
            )
        )
    return out
