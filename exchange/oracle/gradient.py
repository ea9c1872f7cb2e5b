"""The exact policy gradient as a sum over events (policy-gradient theorem, per event).

    grad J = sum_x w_x sum_e d(c) pi(y | c) A(c, y) grad log pi(y | c),   A = Q - V

For the tabular softmax, ``grad_{theta[s]} log pi(y | c) = onehot(y) - pi(. | c)`` on the
row ``s = key(c)`` (zero elsewhere). tests/oracle checks this against autograd of
:func:`~exchange.oracle.exact.expected_reward`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from exchange.oracle.exact import ExactCredit
from exchange.oracle.policy import TabularPolicy

__all__ = ["event_policy_gradient", "policy_gradient_coefficients"]


def policy_gradient_coefficients(table: ExactCredit) -> np.ndarray:
    """``float64[E]``: ``w_x d(c) pi(y | c) A(c, y)``, each event's weight in ``grad J``."""
    w = np.asarray(table.env.prompt_weights)[table.prompt]
    return w * table.visit * table.credit


def event_policy_gradient(table: ExactCredit, policy: TabularPolicy, coefficients: np.ndarray | None = None) -> Tensor:
    """``Tensor[S, V]``: ``sum_e K_e grad_theta log pi(y_e | c_e)`` for a tabular policy.

    ``coefficients`` ``[E]`` defaults to :func:`policy_gradient_coefficients` (the exact
    gradient); pass an objective's expected event coefficients to get its expected update.
    """
    k = policy_gradient_coefficients(table) if coefficients is None else np.asarray(coefficients, dtype=np.float64)
    grad = torch.zeros(policy.logits.shape, dtype=torch.float64)
    for c, events in enumerate(table.ctx_events):
        x, prefix = int(table.ctx_prompt[c]), table.ctx_prefix[c]
        s = policy.row(x, prefix)
        pi = policy.probs(x, prefix).detach()
        for e in events:
            onehot = torch.zeros(policy.logits.shape[1], dtype=torch.float64)
            onehot[table.token[e]] = 1.0
            grad[s] += float(k[e]) * (onehot - pi)
    return grad
