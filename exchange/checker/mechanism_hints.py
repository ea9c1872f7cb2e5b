"""Mechanism hints for one inspected batch: which facets of THEORY.md section 4 the
pattern of its shared-event coefficients points to, where it can tell.

A hint is a pattern seen in some groups of the batch (this module's wording) and the
facets that produce it; every mechanism is named by its id and described by its facet's
description from :data:`exchange.core.vocabulary.FACETS`, never reworded here. Hints
are not verdicts: one batch cannot separate every mechanism (``exchange check`` does).
The tolerances are :mod:`exchange.checker.inspection`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from exchange.checker.inspection import CANCEL_TOL, OFF_POLICY_TOL, SPREAD_TOL, ZERO_SUM_TOL, GroupWeights, zero_sum_share
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import FACETS

__all__ = ["Pattern", "PATTERNS", "TIED", "LENGTH_WEIGHTED", "COMMON_NOT_ZERO_SUM", "SPREAD", "hints", "is_off_policy"]


@dataclass(frozen=True)
class Pattern:
    """A pattern of a group's shared-event coefficients and the facets
    (:data:`~exchange.core.vocabulary.FACETS` keys) that produce it."""

    seen: str  # what the groups show, completing "in N group(s) ..."
    on_policy: tuple[str, ...]  # the facets that produce it on an on-policy batch
    off_policy: tuple[str, ...]  # the same off-policy (ratio-dependent facets join)

    def facets(self, off_policy: bool) -> tuple[str, ...]:
        return self.off_policy if off_policy else self.on_policy


# Tied rewards leave no advantage to scale with: the facets that keep shared-event mass
# on such a group are exactly those that break (N) and (C), by the vocabulary's own rule
# (M7's shaping breaks (N) with zero-sum shaped advantages, so its shared events cancel).
_BREAK_N = tuple(key for key, f in FACETS.items()
                 if "null_on_equal_rewards" in f.breaks and "shared_cancellation" in f.breaks)

TIED = Pattern("tied rewards still carry shared-event mass", _BREAK_N, _BREAK_N)
LENGTH_WEIGHTED = Pattern(
    "the common weights are zero-sum only after multiplying by the response lengths",
    ("M3.response_norm",), ("M3.response_norm",),
)
COMMON_NOT_ZERO_SUM = Pattern(
    "every shared event sees one common weight vector that does not sum to zero",
    ("M4.not_zero_sum", "M5.response_statistics"),
    ("M1.sequence_weight", "M4.not_zero_sum", "M5.response_statistics"),
)
# A spread needs a weight that differs between two shared events of one response: token
# statistics (M5) or a per-occurrence term m_e (M6: the vectors A + m_e 1 turn with m_e, a
# KL to a reference on sampled tokens on-policy too), and off-policy a clip of the token's
# ratio tested by the advantage's sign (M2). A sequence weight (M1) is one per response, so
# it shows as a common vector (and is 1 on-policy). Off-policy keeps every on-policy cause.
SPREAD = Pattern(
    "the per-response weights change from one shared event to the next",
    ("M5.response_statistics", "M6.event_term"),
    ("M2.sign_clip", "M5.response_statistics", "M6.event_term"),
)
PATTERNS: tuple[Pattern, ...] = (TIED, LENGTH_WEIGHTED, COMMON_NOT_ZERO_SUM, SPREAD)


def is_off_policy(rollout: Rollout) -> bool:
    """Whether ``rollout.logprobs`` differ from ``old_logprobs`` on a real token (by more
    than :data:`~exchange.checker.inspection.OFF_POLICY_TOL`)."""
    if rollout.logprobs is None:
        return False
    return bool(((rollout.logprobs - rollout.old_logprobs).abs() > OFF_POLICY_TOL)[rollout.mask].any())


def _classify(group: GroupWeights) -> Pattern:
    """The pattern of one group whose shared events do not cancel: tied rewards; else a
    spread above :data:`SPREAD_TOL`; else one common vector, zero-sum once multiplied by
    the lengths ``L_i`` (1/L_i) or not."""
    if max(group.rewards) == min(group.rewards):
        return TIED
    if group.spread > SPREAD_TOL:
        return SPREAD
    scaled = torch.tensor(group.weights, dtype=torch.float64) * torch.tensor(group.lengths, dtype=torch.float64)
    return LENGTH_WEIGHTED if zero_sum_share(scaled) <= ZERO_SUM_TOL else COMMON_NOT_ZERO_SUM


def _text(pattern: Pattern, n_groups: int, off_policy: bool) -> str:
    facets = [FACETS[key] for key in pattern.facets(off_policy)]
    ids = "/".join(dict.fromkeys(f.mechanism for f in facets))
    causes = facets[0].description if len(facets) == 1 else "; or ".join(f"{f.mechanism}: {f.description}" for f in facets)
    regime = " on an off-policy batch" if off_policy and pattern.off_policy != pattern.on_policy else ""
    return f"{ids}: in {n_groups} group(s) {pattern.seen}{regime}: {causes}"


def hints(rollout: Rollout, groups: Sequence[GroupWeights], residual: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(mechanism ids, hint lines)`` for a batch whose (C) residual is ``residual``
    and whose groups are ``groups``, each that does not cancel (its own
    :attr:`~exchange.checker.inspection.GroupWeights.residual` above
    :data:`~exchange.checker.inspection.CANCEL_TOL`) showing one pattern, tested in the
    order of :func:`_classify`; empty when the batch's shared events cancel."""
    if residual <= CANCEL_TOL:
        return (), ()
    off = is_off_policy(rollout)
    counts: dict[Pattern, int] = {}
    for group in groups:
        if group.residual > CANCEL_TOL:
            pattern = _classify(group)
            counts[pattern] = counts.get(pattern, 0) + 1
    found = [p for p in PATTERNS if p in counts]
    ids = tuple(dict.fromkeys(FACETS[key].mechanism for p in found for key in p.facets(off)))
    return ids, tuple(_text(p, counts[p], off) for p in found)
