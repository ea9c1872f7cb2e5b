"""What :func:`exchange.inspect` reports about one batch (:class:`Inspection`), and the
tolerances its readings are judged by, defined once.

The analysis is :mod:`exchange.checker.batch_analysis`, the mechanism hints
:mod:`exchange.checker.mechanism_hints`; both judge with the tolerances below.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from torch import Tensor

from exchange.core.events import SharedResidual

__all__ = ["Inspection", "GroupWeights", "OffendingEvent", "zero_sum_share", "CANCEL_TOL", "ZERO_SUM_TOL", "SPREAD_TOL",
           "OFF_POLICY_TOL", "TOP", "PREFIX_TAIL"]

# ------------------------------------------------------------------ tolerances
# A real batch carries float32 log-probs and float32 training arithmetic, so these are
# looser than the checker's (docs/properties.md); they only decide what a report calls
# zero, never a verdict.
CANCEL_TOL = 1e-6
"""(C)'s residual (of the batch, a group or one event: the checker's definition,
:mod:`exchange.checker.properties.shared_cancellation`) at or below this cancels:
:attr:`Inspection.cancels`, the groups the hints look at, the offending list."""

ZERO_SUM_TOL = 1e-6
"""A weight vector ``w`` whose :func:`zero_sum_share` is at or below this sums to zero."""

SPREAD_TOL = 1e-6
"""A group whose :attr:`GroupWeights.spread` (largest sine of the angle between a shared
event's coefficient vector and the common direction) is at or below this has one common
weight vector (THEORY.md (E) on this batch)."""

OFF_POLICY_TOL = 1e-9
"""A batch is off-policy when ``|logprobs - old_logprobs|`` exceeds this on a real token."""

TOP = 10
"""Offending events listed (``inspect(top=...)``), and groups printed, by default."""

PREFIX_TAIL = 8
"""Prefix tokens kept per offending event (:attr:`OffendingEvent.prefix_tail`)."""


def zero_sum_share(w: Tensor) -> float:
    """``|sum w| / sum |w|`` (0 for a zero vector): 0 when ``w`` sums to zero, 1 when
    every entry has one sign."""
    total = float(w.abs().sum())
    return abs(float(w.sum())) / total if total > 0 else 0.0


@dataclass(frozen=True)
class GroupWeights:
    """One group's per-response weight vector on its shared events."""

    group: int  # the group id as given in ``rollout.group``
    rows: tuple[int, ...]
    shared_events: int
    weights: tuple[float, ...]  # unit common direction alpha (sign: positive on the best reward)
    spread: float  # max sin angle of a shared event's vector to alpha; 0 = one common vector
    zero_sum: float  # zero_sum_share(alpha) = |sum alpha| / sum |alpha|
    residual: float  # (C)'s residual over this group's shared events (its worst event's |K_e| / M_e)
    shared_residual: float  # this group's shared residual (SharedResidual.value over its shared events)
    rewards: tuple[float, ...]
    lengths: tuple[int, ...]


@dataclass(frozen=True)
class OffendingEvent:
    """A shared event whose coefficients do not cancel."""

    event: int
    group: int
    position: int
    token: int
    prefix_tail: tuple[int, ...]  # the last tokens of the prefix, ending with ``token``
    K: float
    mass: float  # sum |kappa| over the occurrences
    residual: float  # the event's (C) residual |K_e| / M_e (shared_cancellation.event_residuals)


@dataclass(frozen=True)
class Inspection:
    """What :func:`exchange.inspect` found; ``str()`` is a readable report, :meth:`to_dict` JSON."""

    loss: float
    n_responses: int
    n_groups: int
    n_tokens: int
    n_events: int
    shared: SharedResidual  # the batch's shared residual with its parts (the mass-weighted mean)
    max_residual: float  # (C)'s residual: the checker's, max over shared events of |K_e| / M_e
    shared_K: Tensor = field(repr=False)  # [S] K_e of every shared event
    shared_mass: Tensor = field(repr=False)  # [S]
    shared_ids: Tensor = field(repr=False)  # [S] event ids (Events numbering)
    groups: tuple[GroupWeights, ...]
    top: tuple[OffendingEvent, ...]
    mechanisms: tuple[str, ...]  # M-ids the pattern points to (hints, not verdicts)
    hints: tuple[str, ...]

    @property
    def shared_residual(self) -> float:
        """:func:`exchange.core.events.shared_residual` of the batch."""
        return self.shared.value

    @property
    def n_shared(self) -> int:
        return self.shared.events

    @property
    def cancels(self) -> bool:
        """Every shared event cancels: (C)'s residual (:attr:`max_residual`) at or below
        :data:`CANCEL_TOL`."""
        return self.max_residual <= CANCEL_TOL

    def to_dict(self) -> dict:
        return {
            "loss": self.loss,
            "n_responses": self.n_responses,
            "n_groups": self.n_groups,
            "n_tokens": self.n_tokens,
            "n_events": self.n_events,
            "n_shared": self.n_shared,
            "shared_residual": self.shared_residual,
            "shared_residual_parts": asdict(self.shared),  # abs_K, mass, events
            "max_residual": self.max_residual,
            "shared_events": {
                "id": self.shared_ids.tolist(),
                "K": self.shared_K.tolist(),
                "mass": self.shared_mass.tolist(),
            },
            "groups": [asdict(g) for g in self.groups],
            "top": [asdict(e) for e in self.top],
            "mechanisms": list(self.mechanisms),
            "hints": list(self.hints),
        }

    def to_json(self) -> str:
        def clean(x):
            if isinstance(x, float) and not math.isfinite(x):
                return str(x)
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [clean(v) for v in x]
            return x

        return json.dumps(clean(self.to_dict()), indent=2)

    def __str__(self) -> str:
        lines = [
            f"batch: {self.n_responses} responses in {self.n_groups} groups, {self.n_tokens} tokens, "
            f"{self.n_events} events ({self.n_shared} shared); loss {self.loss:.6g}",
            f"(C) residual: {self.max_residual:.3g} "
            + ("(shared events cancel)" if self.cancels else "(worst shared event: |K_e| over its coefficient mass)"),
            f"shared residual: {self.shared_residual:.3g} (share of all shared-event mass that does not cancel)",
        ]
        worst = sorted(self.groups, key=lambda g: -g.residual)[:TOP]
        if worst:
            lines.append("groups (worst first): group  shared  residual  spread  zero_sum  weights")
            for g in worst:
                w = ", ".join(f"{x:+.3f}" for x in g.weights[:8]) + (", ..." if len(g.weights) > 8 else "")
                lines.append(
                    f"  {g.group:>5}  {g.shared_events:>6}  {g.residual:8.3g}  {g.spread:6.3g}  {g.zero_sum:8.3g}  ({w})"
                )
        if self.top:
            lines.append("top offending shared events:")
            for e in self.top:
                lines.append(
                    f"  group={e.group} t={e.position} token={e.token} ...{list(e.prefix_tail)}: "
                    f"K_e={e.K:.4g} sum|kappa|={e.mass:.4g} residual={e.residual:.3g}"
                )
        for h in self.hints:
            lines.append(f"hint: {h}")
        return "\n".join(lines)
