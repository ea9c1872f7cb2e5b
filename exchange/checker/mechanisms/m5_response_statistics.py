"""M5, token weights from response-level statistics (THEORY.md section 4): within-response
entropy standardisation (HAPO/EAPO-style), per-response quantile or top-k masks of token
statistics.

Evidence: moving one response's suffix entropies (events no other response has) turns
the direction of the group's shared-event coefficients on an exchangeable base (the
caller checks it): a shared event's weight depends on statistics of its response. A
per-response normaliser of token statistics (``h_t / sum_t h_t``) fits M3 as well; the
report lists each mechanism's evidence, so it says which probe supports which name.
"""

from __future__ import annotations

from exchange.checker.mechanisms.evidence import Evidence, above

__all__ = ["suffix_statistics_turn"]


def suffix_statistics_turn(turned: float, tolerance: float, moved: str = "") -> list[Evidence]:
    """M5 when the sine ``turned`` of (E)'s direction test exceeds ``tolerance``."""
    return above("M5", moved, "the shared-event direction turned when one response's own token statistics moved",
                 turned, tolerance)
