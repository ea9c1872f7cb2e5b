"""Which mechanisms a report names (THEORY.md section 4, attribution rules).

The probes' own signatures (:mod:`exchange.checker.signatures`) decide which mechanism a
break has; here :func:`attributed` keeps those that explain a property that was asked
for, beyond the loss's round-off, and :func:`design_choice` decides M7, whose rule
combines properties: (E) broken while (C) and (Z) hold.
"""

from __future__ import annotations

from exchange.checker.properties import exchangeable, finite, null_on_equal_rewards, shared_cancellation, zero_sum
from exchange.checker.tolerances import at_precision

__all__ = ["attributed", "design_choice"]


def attributed(results, names, tolerances: dict[str, float], precision: str) -> list[str]:
    """Mechanisms the probes named, kept only where they explain a property that was
    asked for (the probe's own property, or (C) when the probe broke it) beyond the
    loss's round-off. ``tolerances``: each property's float64 tolerance."""
    out = set()
    for r in results:
        if not r.mechanism:
            continue
        own_name = r.probe.property_name
        own = r.evidence or r.evaluations.get(own_name)
        cancel = r.evaluations.get(shared_cancellation.NAME)
        cancel_broke = cancel is not None and cancel.residual > at_precision(
            tolerances[shared_cancellation.NAME], precision, cancel.exact)
        # a probe may name a mechanism through (C) while its own property holds: (Z)'s
        # probe names an additive term (M6) whose K_e every reward vector shares; its own
        # mechanism needs its own property broken beyond the loss's round-off
        if own is not None and own.residual <= at_precision(tolerances[own_name], precision, own.exact) \
                and not (cancel_broke and r.through_cancellation):
            continue
        if own_name in names or (shared_cancellation.NAME in names and cancel_broke):
            out.update(r.mechanism.split("+"))  # a probe may name several, "M6+M7"
    return sorted(out)


def design_choice(probe_results, names, results, regime, found, tolerances: dict[str, float], precision: str) -> str:
    """The mechanism of an (E) break that (C) and (Z) survive, with zero-sum coefficients
    and no defect mechanism named (THEORY.md section 4): M7 (shaping by response
    features), or a projection that restored (C) over unequal weights, for which the
    mechanism that made the weights unequal is named. Tied groups tell them apart: under
    M7 a tied group keeps coefficients that follow the response features ((N) breaks),
    under a projection every ``A_i = 0`` leaves none. Then M3 when a longer suffix moved
    the reward-dependent coefficients (``suffix_length``), M5 when higher suffix entropies
    did. ``""`` when the rule does not apply."""
    ex = results[(exchangeable.NAME, regime)] if exchangeable.NAME in names else None
    if ex is None or ex.holds or ex.counterexample is None:  # a vacuity verdict explains nothing
        return ""
    if finite.NAME in names and not results[(finite.NAME, regime)].holds:
        return ""
    for prop in (zero_sum.NAME, shared_cancellation.NAME):
        if prop in names and not results[(prop, regime)].holds:
            return ""
        tol = at_precision(tolerances[prop], precision)
        if any(prop in r.evaluations and not r.evaluations[prop].residual <= tol for r in probe_results):
            return ""
    # a projection is told from M7 by tied groups (THEORY.md section 4); once a shaping has
    # been found (the features probe), null tied groups mean dropped ones, not a projection
    if "M7" not in found and _tied_groups_null(probe_results, names, results, regime, tolerances, precision):
        tol = at_precision(tolerances[exchangeable.NAME], precision)
        moved = {r.probe.name for r in probe_results
                 if exchangeable.NAME in r.evaluations and r.evaluations[exchangeable.NAME].residual > tol}
        for probe_name, mechanism in (("suffix_length", "M3"), ("suffix_entropy", "M5")):
            if probe_name in moved and mechanism not in found:
                return mechanism
    # M7 only where no defect mechanism already explains the (E) break
    return "" if found else "M7"


def _tied_groups_null(probe_results, names, results, regime, tolerances, precision) -> bool:
    """Whether every tied group the checker saw had no coefficient left ((N) held on the
    search and on every tied-group probe)."""
    n = null_on_equal_rewards.NAME
    if n in names and not results[(n, regime)].holds:
        return False
    tol = at_precision(tolerances[n], precision)
    return all(r.evaluations[n].residual <= tol for r in probe_results if n in r.evaluations)
