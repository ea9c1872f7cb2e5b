"""M1, sequence coupling (THEORY.md section 4): a per-response weight built from all of
the response's token ratios (a product or geometric mean, GSPO), clipped or not.

Evidence: moving one response's suffix ratios (events no other response has) turns the
direction of the group's shared-event coefficients on an exchangeable base (the caller
checks it): only a weight of that response, read from its own ratios, changed.
"""

from __future__ import annotations

from exchange.checker.mechanisms.evidence import Evidence, above

__all__ = ["suffix_ratios_turn"]


def suffix_ratios_turn(turned: float, tolerance: float, moved: str = "") -> list[Evidence]:
    """M1 when the sine ``turned`` of (E)'s direction test exceeds ``tolerance``."""
    return above("M1", moved, "the shared-event direction turned when one response's own ratios moved",
                 turned, tolerance)
