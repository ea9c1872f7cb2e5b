"""What a mechanism's evidence is (:class:`Evidence`; the rule,
:mod:`exchange.checker.mechanisms.rule`, turns a list of them into a mechanism set), and
the small readings the mechanism modules share."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Evidence", "second_singular_ratio", "directions", "above"]


@dataclass(frozen=True)
class Evidence:
    """One mechanism's evidence from one probe."""

    mechanism: str  # the id, "M1" .. "M7" (exchange.core.vocabulary.MECHANISMS)
    moved: str  # what the probe changed ("one response's suffix made longer")
    pattern: str  # what the coefficients showed ("two equal-reward responses weighted 2:1")
    size: float  # the pattern's measure (a sine, a share, a quotient's distance from 1)
    tolerance: float  # what size was judged against (its round-off floor included)

    def __str__(self) -> str:
        return f"{self.mechanism}: {self.moved}: {self.pattern} ({self.size:.3g} against {self.tolerance:.3g})"


def above(mechanism: str, moved: str, pattern: str, size: float, tolerance: float) -> list[Evidence]:
    """``[Evidence]`` when ``size > tolerance``, else ``[]`` (the one comparison every
    mechanism module makes)."""
    return [Evidence(mechanism, moved, pattern, float(size), float(tolerance))] if size > tolerance else []


def directions(m: torch.Tensor):
    """``(u [k, r], s [r], vh [r, n], second)``: the SVD of ``m [k, n]`` and its relative
    second singular value (0 with one row or column); ``None`` for an empty or all-zero
    matrix, which has no direction."""
    if min(m.shape) < 1 or float(m.abs().max()) == 0:
        return None
    u, s, vh = torch.linalg.svd(m)
    return u, s, vh, float(s[1] / s[0]) if s.numel() > 1 else 0.0


def second_singular_ratio(m: torch.Tensor) -> float:
    """The relative second singular value of ``m [k, n]``: how far its rows are from one
    direction (0 for a zero matrix, or with fewer than two rows or columns)."""
    if min(m.shape) < 2:
        return 0.0
    sv = torch.linalg.svdvals(m)
    return float(sv[1] / sv[0]) if float(sv[0]) > 0 else 0.0
