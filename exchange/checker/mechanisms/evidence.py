"""What a mechanism's evidence is, and the small readings the mechanism modules share.

An :class:`Evidence` says what a probe moved, what pattern the coefficients showed and
how large that pattern was next to the tolerance it was judged by; the rule
(:mod:`exchange.checker.mechanisms.rule`) turns a list of them into a mechanism set.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Evidence", "plain", "second_singular_ratio", "directions", "above"]


@dataclass(frozen=True)
class Evidence:
    """One mechanism's evidence from one probe.

    Fields:
        mechanism: the id, ``"M1"`` .. ``"M7"`` (:data:`exchange.core.vocabulary.MECHANISMS`).
        moved: what the probe changed ("one response's suffix made longer").
        pattern: what the coefficients showed ("two equal-reward responses weighted 2:1").
        size: the pattern's measure (a sine, a share, a quotient's distance from 1).
        tolerance: what ``size`` was judged against (its round-off floor included).
    """

    mechanism: str
    moved: str
    pattern: str
    size: float
    tolerance: float

    @property
    def excess(self) -> float:
        """``size / tolerance``: how far above its tolerance the pattern was."""
        return self.size / self.tolerance if self.tolerance > 0 else float("inf")

    def __str__(self) -> str:
        return f"{self.mechanism}: {self.moved}: {self.pattern} ({self.size:.3g} against {self.tolerance:.3g})"


def above(mechanism: str, moved: str, pattern: str, size: float, tolerance: float) -> list[Evidence]:
    """``[Evidence]`` when ``size > tolerance``, else ``[]`` (the one comparison every
    mechanism module makes)."""
    return [Evidence(mechanism, moved, pattern, float(size), float(tolerance))] if size > tolerance else []


def plain(engine):
    """The engine of the real coefficients (a probe may hand a mechanism its
    reward-dependent engine, :class:`exchange.checker.probes.RewardDependent`, whose
    ``engine`` is the plain one); a mechanism that builds its own batches evaluates
    them with this one."""
    return getattr(engine, "engine", engine)


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
