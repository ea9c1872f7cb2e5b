"""Closed-form expected drift on reward-independent events (THEORY.md T3 and section 6).

T3: with GRPO's per-sequence mean on-policy, a shared event gets
``K_shared = 1/G sum_i A_i / L_i`` (``kappa_i = A_i / (G L_i)``, the 1/G from the
mean over responses), ``A_i = (R_i - mean R) / (std R + eps)`` with Bessel's std.
An event ``e`` whose occurrence is independent of the response's (reward, length)
(kind ``shared`` or ``null``) then has, for i.i.d. responses,

    E[K_e] = sum_i E[1(e in y_i) A_i / (G L_i)] = P(e in y) * E[K_shared],

and ``E[K_shared]`` depends only on the law of (R, L) under ``pi(. | x)``: a finite sum
over multisets of G (reward, length) classes, computed here without any objective code.

HAPO (section 6): on a shared event whose entropy z-score is ``z`` and whose clip is
inactive, ``K_e = scale * alpha * z * (n_pos - n_neg)``: see :func:`hapo_shared_coefficient`.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from exchange.oracle.exact import Responses

__all__ = ["outcome_classes", "grpo_expected_shared_drift", "grpo_shared_coefficient", "hapo_shared_coefficient"]


def outcome_classes(resp: Responses) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The law of (reward, length) under ``pi(. | x)``: ``(reward[K], length[K], prob[K])``."""
    keys = np.stack([resp.reward, resp.lengths.astype(np.float64)])
    uniq, inverse = np.unique(keys, axis=1, return_inverse=True)
    prob = np.bincount(inverse.reshape(-1), weights=resp.prob, minlength=uniq.shape[1])
    return uniq[0], uniq[1], prob


def grpo_shared_coefficient(rewards: np.ndarray, lengths: np.ndarray, eps: float = 1e-4) -> float:
    """T3: ``1/G sum_i A_i / L_i`` for one group (GRPO advantages, Bessel std + eps)."""
    r = np.asarray(rewards, dtype=np.float64)
    a = (r - r.mean()) / (r.std(ddof=1) + eps)
    return float((a / np.asarray(lengths, dtype=np.float64)).sum() / len(r))


def grpo_expected_shared_drift(resp: Responses, g: int, eps: float = 1e-4) -> float:
    """``E[K_shared]`` over groups of ``g`` i.i.d. responses, by enumerating multisets of
    (reward, length) classes with multinomial weights."""
    reward, length, prob = outcome_classes(resp)
    total = 0.0
    for combo in itertools.combinations_with_replacement(range(len(prob)), g):
        counts = np.bincount(combo, minlength=len(prob))
        weight = math.factorial(g) / math.prod(math.factorial(int(c)) for c in counts)
        weight *= float(np.prod(prob[list(combo)]))
        total += weight * grpo_shared_coefficient(reward[list(combo)], length[list(combo)], eps)
    return total


def hapo_shared_coefficient(advantages: np.ndarray, z: float, alpha: float = 0.2, phi: float = 2.0) -> float:
    """THEORY.md section 6: the entropy term's contribution to a shared event,
    ``alpha * sum_i sign(A_i) * clip(z, -|A_i|/phi, |A_i|/phi)``; with the clip inactive
    this is ``alpha * z * (n_pos - n_neg)`` (to be multiplied by the objective's
    per-token scale)."""
    a = np.asarray(advantages, dtype=np.float64)
    bound = np.abs(a) / phi
    return float(alpha * (np.sign(a) * np.clip(z, -bound, bound)).sum())
