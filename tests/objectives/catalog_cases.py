"""Hand-built, event-consistent rollouts and direct property probes for the catalog tests.

Every occurrence of an event (group, prefix, token) gets the same old log-prob, current
log-prob and entropy, drawn from a table keyed by the event, so the probes below test the
objectives exactly as THEORY.md section 2 defines the properties. Tolerances are relative
to the largest coefficient in the rollout (float64 throughout).
"""

from __future__ import annotations

import hashlib

import torch

from exchange import Rollout, token_coefficients
from exchange.core.events import events
from exchange.core.events import shared_residual as events_shared_residual

REL_TOL = 1e-9


def _event_value(key: tuple, salt: str, low: float, high: float) -> float:
    digest = hashlib.sha256((salt + repr(key)).encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return low + (high - low) * u


def make_rollout(
    groups: list[list[list[int]]],
    rewards: list[list[float]],
    *,
    off_policy: bool = False,
    seed: int = 0,
    max_shift: float = 0.6,
    baseline_rewards: list[list[float]] | None = None,
    overrides: dict[tuple, float] | None = None,
) -> tuple[torch.Tensor, Rollout]:
    """``(logprobs [N, T], rollout)`` for groups of token lists, event-consistent.

    ``off_policy`` shifts each event's current log-prob by up to ``max_shift`` (ratios in
    about ``[0.55, 1.8]``, across every clip boundary in the catalog); ``overrides`` maps an
    event key ``(group, *prefix_and_token)`` to a fixed log-ratio.
    """
    rows = [(g, resp, r) for g, (resps, rs) in enumerate(zip(groups, rewards)) for resp, r in zip(resps, rs)]
    t_max = max(len(resp) for _, resp, _ in rows)
    n = len(rows)
    tokens = torch.zeros(n, t_max, dtype=torch.long)
    mask = torch.zeros(n, t_max, dtype=torch.bool)
    # float64 explicitly: a global set_default_dtype would leak into every later test.
    old = torch.zeros(n, t_max, dtype=torch.float64)
    cur = torch.zeros(n, t_max, dtype=torch.float64)
    ent = torch.zeros(n, t_max, dtype=torch.float64)
    for i, (g, resp, _) in enumerate(rows):
        for t, tok in enumerate(resp):
            key = (g, *resp[: t + 1])
            tokens[i, t] = tok
            mask[i, t] = True
            old[i, t] = _event_value(key, f"old{seed}", -3.5, -0.7)
            ent[i, t] = _event_value(key, f"ent{seed}", 0.05, 2.5)
            shift = _event_value(key, f"shift{seed}", -max_shift, max_shift) if off_policy else 0.0
            if overrides and key in overrides:
                shift = overrides[key]
            cur[i, t] = old[i, t] + shift
    base = None
    if baseline_rewards is not None:
        base = torch.tensor([b for bs in baseline_rewards for b in bs], dtype=torch.float64)
    rollout = Rollout(
        tokens=tokens,
        mask=mask,
        rewards=torch.tensor([r for _, _, r in rows], dtype=torch.float64),
        group=torch.tensor([g for g, _, _ in rows], dtype=torch.long),
        old_logprobs=old,
        entropy=ent,
        logprobs=cur,
        baseline_rewards=base,
    )
    return cur, rollout


def shared_vectors(kappa: torch.Tensor, rollout: Rollout) -> list[torch.Tensor]:
    """For each shared event, its coefficients across the responses of its group, ``[G]``."""
    ev = events(rollout)
    out = []
    for e in ev.shared.nonzero().flatten().tolist():
        rows = (ev.ids == e).any(dim=1).nonzero().flatten()
        out.append(torch.stack([kappa[i][ev.ids[i] == e].sum() for i in rows.tolist()]))
    return out


def scale(kappa: torch.Tensor) -> float:
    return float(kappa.abs().max()) or 1.0


def shared_residual(loss_fn, logprobs, rollout) -> float:
    """The shared residual (exchange.core.events) of ``loss_fn``'s coefficients (0 = (C) holds)."""
    return events_shared_residual(token_coefficients(loss_fn, logprobs, rollout), rollout)


def direction(v: torch.Tensor) -> torch.Tensor | None:
    norm = v.norm()
    if norm <= 1e-12:
        return None
    d = v / norm
    nz = d.abs() > 1e-9
    first = d[nz.nonzero()[0, 0]]
    return d * torch.sign(first)


def directions_agree(vectors: list[torch.Tensor], tol: float = 1e-7) -> bool:
    """All non-zero vectors point the same way (up to sign and scale)."""
    dirs = [d for d in (direction(v) for v in vectors) if d is not None]
    return all(torch.allclose(dirs[0], d, atol=tol, rtol=0) for d in dirs[1:])


def exchangeable_on(loss_fn, cases) -> bool:
    """(E), observably: across every shared event of every case (same rewards, same
    group layout, different suffixes), the per-response coefficient vector has one
    direction. Cases must share rewards and response order."""
    vectors = []
    for lp, r in cases:
        kappa = token_coefficients(loss_fn, lp, r)
        vectors += [v / scale(kappa) for v in shared_vectors(kappa, r)]
    return directions_agree(vectors)
