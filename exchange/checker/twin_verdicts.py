"""The verdicts of the float64 twin and of the loss beside it (THEORY.md section 4,
precision rule; the twin: :mod:`exchange.checker.twin`; the comparison and the float64
floor: :mod:`exchange.checker.precision`).

- :func:`on_twin`: every property judged on the twin (float64 tolerances, the float64
  floor); where the loss requests or runs in a lower precision, compared with its twin.
  Within its round-off the twin's verdict stands (a twin break below the loss's
  resolution holds up to its round-off); beyond it the loss itself is judged and a break
  the twin lacks is "BROKEN (precision-induced)".
- :func:`fallback`: an incomplete twin; the loss itself at its precision, one floor.

``judge(engine, properties, precision) -> (results, mechanisms)`` is the checker's probes
and search (:func:`exchange.checker.checking.check`); ``run`` carries its settings.
"""

from __future__ import annotations

from exchange.checker.mechanisms.rule import MechanismSet
from exchange.checker.float64_floor import floored
from exchange.checker.precision import Comparison, PairedEngine, changed_on, compare_on_layout, layout_place
from exchange.checker.properties import PROPERTIES
from exchange.checker.report import PropertyResult
from exchange.checker.tolerances import PRECISIONS, RESOLUTION
from exchange.checker.twin import Float64Twin, float32_twin
from exchange.core.coefficients import Engine, LossFn

__all__ = ["on_twin", "fallback", "twin_line", "COMPARED_CONFIGURATIONS"]

# Configurations of the one layout per property and regime on which the loss is compared
# with its twin beside the probes and every plain evaluation (a batch of the bulk fuzzer's
# size: the comparison costs one extra batch per property and regime, on low-precision
# losses only).
COMPARED_CONFIGURATIONS = 16


def twin_line(twin: Float64Twin) -> str:
    if twin.incomplete:
        return f"incomplete: {twin.incomplete}"
    if twin.rewritten:
        return "float64 twin of the loss's " + ", ".join(sorted(twin.rewritten)) + " requests"
    return ""


def on_twin(judge, run, loss_fn: LossFn, twin: Float64Twin, precision: str):
    """Judge the float64 twin; where the loss requests a lower precision (or runs in one),
    compare it with its twin on the probes, on every example the checker evaluates and on
    one layout per property and regime (THEORY.md section 4, precision rule)."""
    twin_engine = Engine(twin, batched=run.batched)
    floors: dict = {}
    float32_engine = Engine(float32_twin(loss_fn), batched=run.batched)
    props = {n: floored(PROPERTIES[n], floors) for n in run.names}
    compare = bool(twin.rewritten) or precision != "float64"
    comparison = Comparison(precision)
    engine = (PairedEngine(twin_engine, Engine(loss_fn, batched=run.batched), float32_engine, comparison) if compare
              else twin_engine)
    results, mechanisms = judge(engine, props, "float64")
    for (prop_name, regime), found in floors.items():
        res = results[(prop_name, regime)]
        if res.holds and not res.note:
            res.round_off, res.note = "float64", str(found)
    if not compare:
        return results, mechanisms
    for regime in run.regimes:
        for prop_name in run.names:
            compare_on_layout(twin, loss_fn, PROPERTIES[prop_name], regime, run.seed, COMPARED_CONFIGURATIONS, comparison)
    if comparison.changed:
        return _precision_induced(judge, run, loss_fn, precision, results, mechanisms, comparison,
                                  (twin_engine, float32_engine))
    for res in results.values():
        _below_resolution(res, precision, comparison)
    return results, mechanisms


def _below_resolution(res: PropertyResult, precision: str, comparison: Comparison) -> None:
    """THEORY.md's precision rule on a property the twin breaks while the loss stays within
    its round-off of the twin: BROKEN when the exact effect (the twin's residual) exceeds the
    resolution of the loss's precision, else "holds up to <precision> round-off". A break
    found where every advantage is an exact 0 (``exact``) stands at any precision: the
    effect is all the loss computes there, nothing it is rounded against."""
    res.round_off_measured = _measured(comparison, res)
    if res.holds or res.found_by is None or res.found_by.vacuity or res.exact or precision == "float64":
        return
    effect, resolution = res.max_residual, RESOLUTION[precision]
    res.effect, res.resolution = effect, resolution
    if effect <= resolution:
        res.holds, res.round_off = True, precision
        res.note = f"holds up to {precision} round-off (exact effect {effect:.2g} below {precision} resolution {resolution:.2g})"


def _precision_induced(judge, run, loss_fn: LossFn, precision: str, twin_results, twin_mechanisms, comparison,
                       engines):
    """Precision changed what the loss computes (a clip or a mask decided on rounded
    values): the loss itself is judged at its precision (:func:`_fallback`'s floor); a
    property it breaks while the twin holds is "BROKEN (precision-induced)", the twin's
    verdict beside it, when precision changed what the loss computes on that property's own
    counterexample (:func:`~exchange.checker.precision.changed_on`; ``engines``: the twin's
    and the float32 twin's). Where the loss stays within its round-off of the twin there,
    its residual is that round-off and the twin's verdict stands (a tie that bf16 rounds
    apart in one layout does not make a rounded sum of z-scores in another a break)."""
    engine = Engine(loss_fn, batched=run.batched)
    engine.precision = precision
    props = {n: PROPERTIES[n] for n in run.names}
    results, mechanisms = judge(engine, props, precision)
    settled: dict[int, PropertyResult] = {}  # a regime-free property's one result serves both regimes
    for key, res in results.items():
        if id(res) in settled:
            results[key] = settled[id(res)]
            continue
        there = twin_results[key]
        res.twin_holds = there.holds
        res.round_off_measured = _measured(comparison, res)
        if not res.holds and there.holds and not res.found_by.vacuity:
            pairs = [(r, k) for r, k in ((res.counterexample, res.kappa), (res.variant, res.variant_kappa))
                     if r is not None and k is not None]
            here = Comparison(precision)  # this property's own counterexample, not another's layout
            if pairs and not changed_on(*engines, pairs, precision, here):
                there.round_off_measured = max(_measured(comparison, there) or 0.0, here.worst)
                there.note = (f"the loss's {precision} residual {res.max_residual:.2g} on its counterexample is within "
                              f"its round-off of the float64 twin there" + (f"; {there.note}" if there.note else ""))
                results[key] = settled[id(res)] = there
                continue
            res.precision_induced = True
            shown, place = ((here.worst, "on this counterexample") if pairs else
                            (res.round_off_measured or 0.0, f"on its layout, {layout_place(res.name, res.regime)}"))
            res.round_off_measured = max(res.round_off_measured or 0.0, shown)
            res.note = (f"precision-induced: the loss's {precision} coefficients differ from its float64 twin's by "
                        f"{shown:.2g} of their scale {place}, beyond the {precision} "
                        f"resolution; the float64 twin holds (max residual {there.max_residual:.2g})"
                        + (f"; {res.note}" if res.note else ""))
        elif res.holds and not there.holds:  # the twin's break stands: precision does not repair it
            results[key] = there
        settled[id(res)] = results[key]
    # the loss's own mechanisms explain its precision-induced breaks; in a regime without
    # one, every break of the loss was its round-off or the twin's, and so are the causes
    induced = {r for (_, r), res in results.items() if res.precision_induced}
    merged = {r: MechanismSet.merged(mechanisms[r], twin_mechanisms[r]) if r in induced else twin_mechanisms[r]
              for r in run.regimes}
    return results, merged


def _measured(comparison: Comparison, res: PropertyResult) -> float | None:
    """The loss's round-off measured on ``res``'s own property and regime (its layout's
    comparison), never another property's: ``None`` where nothing of it was compared."""
    return comparison.at.get(layout_place(res.name, res.regime))


def fallback(judge, run, loss_fn: LossFn, twin: Float64Twin, precision: str):
    """The twin is incomplete (a low-precision tensor reached an op inside it, or the loss
    raised under it): the loss itself is judged at the coarser of its detected precision and
    the precision that reached the op, against one noise floor (the property's tolerance
    at that precision, :func:`~exchange.checker.tolerances.at_precision`), the raw residual
    and the floor printed side by side."""
    coarser = twin.incomplete_precision if twin.incomplete_precision in PRECISIONS else precision
    if PRECISIONS.index(coarser) < PRECISIONS.index(precision):
        coarser = precision
    engine = Engine(loss_fn, batched=run.batched)
    engine.precision = coarser
    results, mechanisms = judge(engine, {n: PROPERTIES[n] for n in run.names}, coarser)
    for res in results.values():
        floor = res.tolerance
        line = (f"incomplete twin ({twin.incomplete}): judged at {coarser}, residual {res.max_residual:.2g} "
                f"against the {coarser} floor {floor:.2g}")
        res.note = line + (f"; {res.note}" if res.note else "")
        if res.holds and res.max_residual > PROPERTIES[res.name].tolerance:
            res.round_off = coarser
    return results, mechanisms
