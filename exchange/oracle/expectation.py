"""Expected event coefficients of an objective over groups drawn from the policy.

For each prompt ``x``, groups of ``G`` responses are drawn from ``pi(. | x)``; in each
group the objective's token coefficients ``kappa = exchange.token_coefficients(loss_fn,
...)`` (on-policy: ``old_logprobs = logprobs``) are summed per event (group, prefix,
token), as in :mod:`exchange.core.events`. Across groups, events are identified by
(prompt, prefix, token), so ``K_e = 0`` in a group where ``e`` does not occur.

Two expectations per event:
- raw ``E[K_e]``: THEORY.md (D) asks it to be 0 for shared and ``null`` events;
- centred ``E[K~_e]``, ``K~_(c,y) = K_(c,y) - pi(y | c) sum_y' K_(c,y')``: the part of the
  update that moves the next-token distribution at ``c`` (for a softmax over ``c`` it
  is the logit gradient, since ``sum_y pi grad log pi = 0``). An unbiased policy-gradient
  estimator has ``E[K~_e] = s * d(c) pi(y | c) (Q - V)`` for one scale ``s``; on a
  zero-credit event any non-zero ``E[K~_e]`` is drift.

``method="exact"`` sums over every multiset of ``G`` responses weighted by its
probability; ``"monte-carlo"`` samples groups and reports standard errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from exchange.core.coefficients import LossFn, token_coefficients_batched
from exchange.errors import InvalidArgument
from exchange.oracle.exact import ExactCredit
from exchange.oracle.groups import count_groups, enumerate_groups, group_rollouts, sample_groups

__all__ = ["ExpectedCoefficients", "expected_coefficients", "METHODS", "QUADRANTS"]

METHODS = ("auto", "exact", "monte-carlo")
QUADRANTS = ("+high", "+low", "-high", "-low")
_BATCH = 4096


@dataclass(frozen=True)
class ExpectedCoefficients:
    """Expected event coefficients of one objective. ``E`` events of ``table``.

    Fields:
        mean, second: ``float64[E]`` ``E[K_e]``, ``E[K_e^2]`` given the event's prompt.
        mean_se: ``float64[E]`` standard error of ``mean`` (0 when exact).
        centred, centred_se: ``float64[E]`` ``E[K~_e]`` and its standard error.
        centred_second: ``float64[E]`` ``E[K~_e^2]`` (the update mass, noise included).
        quadrant_mass: ``float64[4]`` ``E[sum |kappa|]`` over occurrences per quadrant
            (``QUADRANTS``: advantage sign x context entropy above/below threshold),
            prompt-weighted; occurrences with a zero group-centred reward go nowhere.
        quadrant_zero_mass: ``float64[4]`` the part of it on zero-credit events.
        quadrant_credit: ``float64[4]`` ``E[sum |Q - V|]`` over occurrences (objective-free).
        entropy_threshold: the entropy split (nats).
        method, n_groups: how the expectation was taken; groups per prompt (list).
    """

    table: ExactCredit
    objective: str
    g: int
    method: str
    n_groups: tuple[int, ...]
    mean: np.ndarray
    mean_se: np.ndarray
    second: np.ndarray
    centred: np.ndarray
    centred_se: np.ndarray
    centred_second: np.ndarray
    quadrant_mass: np.ndarray
    quadrant_zero_mass: np.ndarray
    quadrant_credit: np.ndarray
    entropy_threshold: float


def _centring(table: ExactCredit) -> np.ndarray:
    """``float64[E, E]`` ``C`` with ``K~ = C @ K``."""
    n = table.n_events
    c = np.eye(n)
    for events in table.ctx_events:
        ids = np.asarray(events)
        c[np.ix_(ids, ids)] -= table.pi[ids][:, None]
    return c


def default_entropy_threshold(table: ExactCredit) -> float:
    """Occurrence-weighted mean of the context entropy (weights ``w_x d pi``): a token is
    "high entropy" when its z-score is positive, as in HAPO's standardised entropy."""
    w = np.asarray(table.env.prompt_weights)[table.prompt] * table.visit
    return float((w * table.entropy).sum() / w.sum())


def expected_coefficients(
    loss_fn: LossFn,
    table: ExactCredit,
    g: int,
    *,
    method: str = "auto",
    max_groups: int = 20_000,
    samples: int = 20_000,
    seed: int = 0,
    entropy_threshold: float | None = None,
    ordered: bool = False,
    name: str | None = None,
) -> ExpectedCoefficients:
    """Expected event coefficients of ``loss_fn`` over on-policy groups of size ``g``.

    ``method="auto"`` enumerates exactly when every prompt has at most ``max_groups``
    distinct groups, otherwise samples ``samples`` groups per prompt (seeded).
    ``ordered=True`` enumerates ordered tuples instead of multisets (the slow check
    that the multiset shortcut is exact for a permutation-invariant objective).
    """
    if method not in METHODS:
        raise InvalidArgument(f"method={method!r} is not one of {METHODS}.")
    if g < 2:
        raise InvalidArgument(f"G={g}: group-relative objectives need G >= 2.")
    sizes = [count_groups(r.m, g, ordered) for r in table.responses]
    if method == "auto":
        method = "exact" if max(sizes) <= max_groups else "monte-carlo"
    if method == "exact" and max(sizes) > 50 * max_groups:
        raise InvalidArgument(
            f"G={g} gives {max(sizes)} distinct groups per prompt; use method='monte-carlo' or a smaller G."
        )
    threshold = default_entropy_threshold(table) if entropy_threshold is None else float(entropy_threshold)
    cmat = _centring(table)
    zero = np.abs(table.credit) <= 1e-10 * max(1.0, np.ptp(table.reward_values))
    n_e = table.n_events
    mean, second, mean_se, centred, centred_se, centred_second = (np.zeros(n_e) for _ in range(6))
    q_mass, q_zero, q_credit = np.zeros(4), np.zeros(4), np.zeros(4)
    n_groups = []
    for resp in table.responses:
        x = resp.prompt
        w_x = table.env.prompt_weights[x]
        if method == "exact":
            idx, weight = enumerate_groups(resp.prob, g, ordered)
        else:
            idx = sample_groups(resp.prob, g, samples, seed=seed + x)
            weight = np.full(len(idx), 1.0 / len(idx))
        n_groups.append(len(idx))
        s1, s2, c1, c2 = (np.zeros(n_e) for _ in range(4))
        for start in range(0, len(idx), _BATCH):
            rows, wts = idx[start : start + _BATCH], weight[start : start + _BATCH]
            kappa = _kappa(loss_fn, resp, rows)  # [B, G, T]
            ev = resp.event[rows]  # [B, G, T]
            k = np.zeros((len(rows), n_e))
            b_ix = np.broadcast_to(np.arange(len(rows))[:, None, None], ev.shape)
            valid = ev >= 0
            np.add.at(k, (b_ix[valid], ev[valid]), kappa[valid])  # K_e per group, [B, E]
            kt = k @ cmat.T  # centred, [B, E]
            s1 += wts @ k
            s2 += wts @ (k * k)
            c1 += wts @ kt
            c2 += wts @ (kt * kt)
            _quadrants(resp, rows, wts * w_x, kappa, table, zero, threshold, q_mass, q_zero, q_credit)
        here = table.prompt == x
        mean[here], second[here], centred[here], centred_second[here] = s1[here], s2[here], c1[here], c2[here]
        if method == "monte-carlo":
            n = len(idx)
            mean_se[here] = np.sqrt(np.maximum(s2[here] - s1[here] ** 2, 0.0) / (n - 1))
            centred_se[here] = np.sqrt(np.maximum(c2[here] - c1[here] ** 2, 0.0) / (n - 1))
    return ExpectedCoefficients(
        table=table, objective=name or getattr(loss_fn, "__name__", "loss_fn"), g=g, method=method,
        n_groups=tuple(n_groups), mean=mean, mean_se=mean_se, second=second, centred=centred,
        centred_se=centred_se, centred_second=centred_second, quadrant_mass=q_mass, quadrant_zero_mass=q_zero, quadrant_credit=q_credit,
        entropy_threshold=threshold,
    )


def _kappa(loss_fn: LossFn, resp, rows: np.ndarray) -> np.ndarray:
    """``float64[B, G, T]`` token coefficients of each group (batched, vmapped if possible)."""
    rollouts = group_rollouts(resp, rows)
    kappas = token_coefficients_batched(loss_fn, [r.old_logprobs for r in rollouts], rollouts)
    return torch.stack(kappas).numpy()


def _quadrants(resp, rows, wts, kappa, table, zero, threshold, q_mass, q_zero, q_credit) -> None:
    """Accumulate quadrant masses in place (see :class:`ExpectedCoefficients`)."""
    r = resp.reward[rows]  # [B, G]
    sign = np.sign(r - r.mean(axis=1, keepdims=True))[:, :, None]  # [B, G, 1]
    ev = resp.event[rows]  # [B, G, T]
    valid = ev >= 0
    high = resp.entropy[rows] > threshold  # [B, G, T]
    abs_k = np.abs(kappa) * wts[:, None, None]
    cred = np.where(valid, np.abs(table.credit[np.maximum(ev, 0)]), 0.0) * wts[:, None, None]
    zmask = valid & zero[np.maximum(ev, 0)]
    for q, (s, h) in enumerate(((1, True), (1, False), (-1, True), (-1, False))):
        sel = valid & (sign == s) & (high == h)
        q_mass[q] += abs_k[sel].sum()
        q_zero[q] += abs_k[sel & zmask].sum()
        q_credit[q] += cred[sel].sum()
