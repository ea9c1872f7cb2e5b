"""Information quantities of one context ``c``, in nats, float64 (THEORY.md section 6).

Inputs are the next-token distribution ``pi = pi(. | c)``: ``[Y]`` and the reward
distribution after each token ``p_r = P(R = r | c, y)``: ``[Y, K]`` over the ``K``
reward values. The companion paper (arXiv 2604.11056, HAPO/EAPO) defines a token's
hindsight credit as the expected shift from the policy to the hindsight posterior,

    Credit(c) = E_{R | c} KL(p(. | c, R) || pi(. | c)) = I(y; R | c) <= H(y | c),

the reconstruction in ../shared/reference/objectives.md section 15.
"""

from __future__ import annotations

import numpy as np

__all__ = ["entropy", "hindsight_posterior", "conditional_mutual_information", "reward_given_context"]


def entropy(pi: np.ndarray) -> float:
    """``H(y | c) = -sum_y pi log pi`` (zero-probability tokens contribute 0)."""
    p = np.asarray(pi, dtype=np.float64)
    nz = p > 0
    return float(-(p[nz] * np.log(p[nz])).sum()) + 0.0  # + 0.0: no -0.0 for forced tokens


def reward_given_context(pi: np.ndarray, p_r: np.ndarray) -> np.ndarray:
    """``P(R = r | c) = sum_y pi(y) P(r | c, y)``: ``[K]``."""
    return np.asarray(pi, dtype=np.float64) @ np.asarray(p_r, dtype=np.float64)


def hindsight_posterior(pi: np.ndarray, p_r: np.ndarray) -> np.ndarray:
    """``p(y | c, R = r) = pi(y) P(r | c, y) / P(r | c)``: ``[K, Y]``.

    Rows of rewards that cannot occur from ``c`` (``P(r | c) = 0``) are all zero.
    """
    pi = np.asarray(pi, dtype=np.float64)
    joint = (pi[:, None] * np.asarray(p_r, dtype=np.float64)).T  # [K, Y] = P(r, y | c)
    marginal = joint.sum(axis=1, keepdims=True)  # [K, 1] = P(r | c)
    return np.divide(joint, marginal, out=np.zeros_like(joint), where=marginal > 0)


def conditional_mutual_information(pi: np.ndarray, p_r: np.ndarray) -> float:
    """``I(y; R | c) = sum_{y, r} pi(y) P(r|c,y) log(P(r|c,y) / P(r|c))``, in nats.

    Equal to ``E_{R|c} KL(hindsight_posterior || pi)``; never above ``entropy(pi)``.
    """
    pi = np.asarray(pi, dtype=np.float64)
    p_r = np.asarray(p_r, dtype=np.float64)
    marginal = reward_given_context(pi, p_r)  # [K]
    joint = pi[:, None] * p_r  # [Y, K]
    nz = joint > 0
    ratio = p_r[nz] / np.broadcast_to(marginal, p_r.shape)[nz]
    return float(max((joint[nz] * np.log(ratio)).sum(), 0.0))
