"""The one rule that combines the probes' evidence into a report's mechanism set
(THEORY.md section 4, attribution rules): the evidence that explains a property asked
for (:func:`counted`), and a design choice where nothing else explains an (E) break
(:func:`design_choice`). A probe whose group the loss drops whole is not evidence
(:mod:`exchange.checker.probes`; :func:`dropped_notes`).
"""

from __future__ import annotations

from exchange.checker.mechanisms.evidence import Evidence
from exchange.checker.tolerances import at_precision

__all__ = ["MechanismSet", "counted", "design_choice", "evidence_lines", "dropped_notes"]

_E, _C, _Z, _N, _F = "exchangeable", "shared_cancellation", "zero_sum", "null_on_equal_rewards", "finite"
# The mechanisms that make per-response weights unequal (THEORY.md section 4, M1/M3/M5):
# what a projection restoring (C) over unequal weights leaves to name (attribution rules).
_WEIGHTS = frozenset({"M1", "M3", "M5"})


class MechanismSet(frozenset):
    """A report's mechanism set for one regime: the ids, with the evidence behind each
    (``evidence``: ``{id: [lines]}``) and the probes that were no evidence (``notes``).
    JSON writes the ids as a sorted list."""

    def __new__(cls, evidence=(), notes=(), ids=()):
        evidence = tuple(evidence)
        out = super().__new__(cls, {e.mechanism for e in evidence} | set(ids))
        out.found, out.notes = evidence, tuple(notes)
        return out

    @property
    def evidence(self) -> dict[str, list[str]]:
        return evidence_lines(list(self.found))

    @classmethod
    def merged(cls, *sets) -> "MechanismSet":
        """The union of mechanism sets (or plain collections of ids), evidence kept."""
        return cls(tuple(e for m in sets for e in getattr(m, "found", ())),
                   dict.fromkeys(n for m in sets for n in getattr(m, "notes", ())),
                   {i for m in sets for i in m})

    def __or__(self, other) -> "MechanismSet":
        return MechanismSet.merged(self, other)

    def __reduce__(self):
        return MechanismSet, (self.found, self.notes, tuple(self))


def _broke(ev, name: str, tolerances: dict[str, float], precision: str) -> bool:
    return ev is not None and ev.residual > at_precision(tolerances[name], precision, ev.exact)


def counted(results, names, tolerances: dict[str, float], precision: str) -> list[Evidence]:
    """The evidence of every probe whose break explains a property that was asked for:
    the probe's own property broken beyond the loss's round-off, or (C) broken by the
    probe (an additive term that (Z)'s probe reads through (C) while the reward-dependent
    part cancels). ``tolerances``: each property's float64 tolerance."""
    out: list[Evidence] = []
    for r in results:
        if not r.found:
            continue
        own_name = r.probe.property_name
        own = r.decided_on or r.evaluations.get(own_name)
        cancel_broke = _broke(r.evaluations.get(_C), _C, tolerances, precision)
        if own is not None and not _broke(own, own_name, tolerances, precision) \
                and not (cancel_broke and r.through_cancellation):
            continue
        if own_name in names or (_C in names and cancel_broke):
            out += r.found
    return out


def design_choice(probe_results, names, results, regime, found: frozenset[str], tolerances: dict[str, float],
                  precision: str) -> list[Evidence]:
    """The evidence for an (E) break that (C) and (Z) survive, on every probe and in the
    search, with no defect mechanism found (THEORY.md section 4): under M7 a tied group
    keeps coefficients that follow the response features, under a projection every
    ``A_i = 0`` leaves none. With null tied groups, the probes whose one change (a
    response's length, its token statistics) turned the direction name the mechanism
    that made the weights unequal (their target); otherwise M7, where nothing already
    explains the break."""
    ex = results[(_E, regime)] if _E in names else None
    if ex is None or ex.holds or ex.counterexample is None:  # a vacuity verdict explains nothing
        return []
    if _F in names and not results[(_F, regime)].holds:
        return []
    for prop in (_Z, _C):
        if prop in names and not results[(prop, regime)].holds:
            return []
        if any(_broke(r.evaluations.get(prop), prop, tolerances, precision) for r in probe_results):
            return []
    n_null = not (_N in names and not results[(_N, regime)].holds) and not any(
        _broke(r.evaluations.get(_N), _N, tolerances, precision) for r in probe_results)
    if "M7" not in found and n_null:
        turned = [r for r in probe_results if r.probe.mechanism in _WEIGHTS - found
                  and _broke(r.evaluations.get(_E), _E, tolerances, precision)]
        out = [Evidence(r.probe.mechanism, f"probe {r.probe.name}: {r.probe.description}",
                        "the direction turned while (C) holds and tied groups keep nothing: (C) restored by a "
                        "projection over unequal weights", r.evaluations[_E].residual,
                        at_precision(tolerances[_E], precision)) for r in turned]
        if out:
            return out[:1]
    if found:
        return []
    return [Evidence("M7", f"{ex.found_by}", "(E) broken while (C) and (Z) hold: a design choice (shaping by "
                                             "response features)", ex.max_residual, ex.tolerance)]


def evidence_lines(evidence: list[Evidence]) -> dict[str, list[str]]:
    """``{mechanism: [one line per piece of evidence]}``, sorted by mechanism."""
    out: dict[str, list[str]] = {}
    for e in sorted(evidence, key=lambda e: e.mechanism):
        line = str(e)
        if line not in out.setdefault(e.mechanism, []):
            out[e.mechanism].append(line)
    return out


def dropped_notes(probe_results) -> list[str]:
    """One line per probe whose group the loss dropped whole at every reward vector tried."""
    return [f"probe {r.probe.name}: {r.dropped}" for r in probe_results if r.dropped]
