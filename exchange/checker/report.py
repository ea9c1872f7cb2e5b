"""``Report``: the verdict of one objective, per property and regime.

A report holds, for each (regime, property): whether it holds, the largest normalised
residual seen, how many examples were tried (and how many could have failed), and for
a broken property a minimal counterexample with every disagreeing event. It renders as
a table (``str(report)``) and as JSON (``report.to_json()``).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from exchange.errors import InvalidArgument
from exchange.core.rollout import Rollout

__all__ = ["PropertyResult", "RegularizerReport", "Report", "REPORT_SCHEMA", "summary"]

# Version of the JSON report (``Report.to_dict``, ``exchange check --json``); bumped on
# any incompatible change. Documented in docs/properties.md ("JSON report").
REPORT_SCHEMA = 1


@dataclass(frozen=True)
class FoundBy:
    """How a broken property was found: by ``probe`` (its name), by the fuzzer
    (``fuzzer``: "bulk" or "per_example"; ``shrunk`` or not), or by the vacuity guard
    (no example could have failed). ``str()`` is the report's wording."""

    probe: str = ""
    fuzzer: str = ""
    shrunk: bool = False
    vacuity: bool = False

    def __str__(self) -> str:
        if self.probe:
            return f"probe {self.probe}"
        if self.vacuity:
            return "vacuity guard"
        return f"fuzz ({'bulk, ' if self.fuzzer == 'bulk' else ''}{'shrunk' if self.shrunk else 'not shrunk'})"


@dataclass
class PropertyResult:
    name: str
    regime: str
    holds: bool
    max_residual: float
    examples: int
    informative: int
    tolerance: float
    found_by: FoundBy | None = None  # None while the property holds
    counterexample: Rollout | None = None
    kappa: Tensor | None = None
    variant: Rollout | None = None
    variant_kappa: Tensor | None = None
    mismatches: list[str] = field(default_factory=list)
    note: str = ""
    theorems: tuple[str, ...] = ()
    round_off: str = ""  # the precision whose round-off the residual reaches ("" for none)
    # THEORY.md section 4, precision rule (exchange.checker.precision): the twin's exact
    # effect and the resolution of the loss's precision, where a twin's break was judged
    # against it; the loss's measured round-off (max|kappa_loss - kappa_twin| over the
    # scale, where compared); a break the loss has and its float64 twin has not
    effect: float | None = None
    resolution: float | None = None
    round_off_measured: float | None = None
    precision_induced: bool = False
    twin_holds: bool | None = None
    # the break was found where the property's value is 0 in every precision (every
    # advantage an exact 0: tied rewards of exactly 0): no round-off can produce it, so the
    # resolution of the loss's precision does not bound what it can show
    exact: bool = False

    @property
    def verdict(self) -> str:
        """The report's label: "holds", "holds up to float32 round-off", "BROKEN" or
        "BROKEN (precision-induced)"."""
        if not self.holds:
            return "BROKEN (precision-induced)" if self.precision_induced else "BROKEN"
        return f"holds up to {self.round_off} round-off" if self.round_off else "holds"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "holds": self.holds,
            "max_residual": _finite(self.max_residual),
            "examples": self.examples,
            "informative": self.informative,
            "tolerance": self.tolerance,
            "counterexample": None,
            "theorems": list(self.theorems),
        }
        if self.counterexample is not None:
            cx = {"rollout": self.counterexample.to_dict(), "found_by": str(self.found_by), "mismatches": self.mismatches}
            if self.kappa is not None:
                cx["kappa"] = self.kappa.tolist()
            if self.variant is not None:
                cx["variant"] = self.variant.to_dict()
                cx["variant_kappa"] = None if self.variant_kappa is None else self.variant_kappa.tolist()
            out["counterexample"] = cx
        if self.note:
            out["note"] = self.note
        out["verdict"] = self.verdict
        for key in ("effect", "resolution", "round_off_measured", "twin_holds"):
            if getattr(self, key) is not None:
                out[key] = _finite(getattr(self, key)) if key != "twin_holds" else self.twin_holds
        if self.precision_induced:
            out["precision_induced"] = True
        return out


@dataclass
class RegularizerReport:
    """The KL / entropy channel, kept apart from the reward-driven coefficients."""

    max_abs: float
    event_consistent: bool  # identical events get identical coefficients
    reward_independent: bool  # changing the rewards does not change it

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_abs_coefficient": self.max_abs,
            "event_consistent": self.event_consistent,
            "reward_independent": self.reward_independent,
        }


def _finite(x: float) -> float | str:
    return x if x == x and abs(x) != float("inf") else str(x)


def _rank(res: PropertyResult) -> int:
    """Which regime's verdict a property's summary states: a break of the float64 twin
    (BROKEN) before a break precision made (BROKEN (precision-induced): the twin holds
    there), before a property that holds up to round-off, before a plain hold."""
    if not res.holds:
        return 1 if res.precision_induced else 0
    return 2 if res.round_off else 3


def summary(per: dict[str, PropertyResult]) -> dict[str, Any]:
    """A property's JSON entry, a function of its per-regime results ``{regime: result}``
    only (never set apart from them): the verdict, note, counterexample, tolerance, twin
    fields and ``precision_induced`` of the regime whose verdict is the strongest claim
    (:func:`_rank`, the first such regime in order), with ``holds`` (every regime),
    ``max_residual`` and ``round_off_measured`` (the largest), ``examples`` (the sum) and
    each regime's own ``holds``, ``max_residual`` and ``examples`` under ``regimes``. So a
    summary never says "precision-induced" where the twin breaks in another regime, nor
    "holds" beside a residual that only round-off explains."""
    shown = min(per.values(), key=_rank)
    entry = shown.to_dict()
    entry["holds"] = all(p.holds for p in per.values())
    entry["max_residual"] = _finite(max(p.max_residual for p in per.values()))
    entry["examples"] = sum(p.examples for p in per.values())
    measured = [p.round_off_measured for p in per.values() if p.round_off_measured is not None]
    if measured:
        entry["round_off_measured"] = _finite(max(measured))
    entry["regimes"] = {r: {"holds": p.holds, "max_residual": _finite(p.max_residual), "examples": p.examples}
                        for r, p in per.items()}
    return entry


@dataclass
class Report:
    objective: str
    regimes: tuple[str, ...]
    properties: tuple[str, ...]
    results: dict[tuple[str, str], PropertyResult]  # keyed (property, regime), like result(name, regime)
    # per regime, a set of mechanism ids (exchange.checker.mechanisms.rule.MechanismSet carries
    # the evidence behind each); JSON writes sorted lists
    mechanisms_by_regime: dict[str, frozenset[str]]
    seed: int
    max_examples: int
    regularizer: RegularizerReport | None = None
    reproduce: str = ""
    precision: str = "float64"  # the loss's effective precision (THEORY.md section 4)
    precision_detected: bool = False
    twin: str = ""  # what the float64 twin was ("" when the loss requests no lower precision)

    # ------------------------------------------------------------------ API
    def _check_name(self, name: str, regime: str | None) -> None:
        if name not in self.properties:
            raise InvalidArgument(f"property={name!r} was not checked; checked: {', '.join(self.properties)}.")
        if regime is not None and regime not in self.regimes:
            raise InvalidArgument(f"regime={regime!r} was not checked; checked: {', '.join(self.regimes)}.")

    def result(self, name: str, regime: str) -> PropertyResult:
        self._check_name(name, regime)
        return self.results[(name, regime)]

    def holds(self, name: str, regime: str | None = None) -> bool:
        """Whether ``name`` held in ``regime`` (``None``: in every checked regime)."""
        self._check_name(name, regime)
        regimes = self.regimes if regime is None else (regime,)
        return all(self.results[(name, r)].holds for r in regimes)

    def counterexample(self, name: str, regime: str | None = None) -> Rollout | None:
        """The minimal failing rollout (its ``logprobs`` field holds the current log-probs)."""
        self._check_name(name, regime)
        for r in self.regimes if regime is None else (regime,):
            res = self.results[(name, r)]
            if not res.holds and res.counterexample is not None:
                return res.counterexample
        return None

    @property
    def mechanisms(self) -> list[str]:
        """Mechanism ids ("M1".."M5") found in any regime, sorted."""
        return sorted({m for ms in self.mechanisms_by_regime.values() for m in ms})

    def mechanisms_in(self, regime: str) -> list[str]:
        if regime not in self.regimes:
            raise InvalidArgument(f"regime={regime!r} was not checked; checked: {', '.join(self.regimes)}.")
        return sorted(self.mechanisms_by_regime.get(regime, ()))

    def evidence_in(self, regime: str) -> dict[str, list[str]]:
        """``{mechanism: [the evidence lines behind it]}`` in ``regime`` (THEORY.md section 4:
        where two names both fit, which evidence supports each)."""
        self.mechanisms_in(regime)
        return dict(getattr(self.mechanisms_by_regime.get(regime), "evidence", {}))

    def probe_notes(self, regime: str) -> list[str]:
        """The probes that were no evidence in ``regime`` (a group the loss drops whole)."""
        self.mechanisms_in(regime)
        return list(getattr(self.mechanisms_by_regime.get(regime), "notes", ()))

    @property
    def all_hold(self) -> bool:
        return all(r.holds for r in self.results.values())

    # -------------------------------------------------------------- output
    def to_dict(self) -> dict[str, Any]:
        props = {name: summary({r: self.results[(name, r)] for r in self.regimes}) for name in self.properties}
        out: dict[str, Any] = {
            "schema": REPORT_SCHEMA,
            "objective": self.objective,
            "properties": props,
            "mechanisms": self.mechanisms,
            "mechanisms_by_regime": {r: self.mechanisms_in(r) for r in self.regimes},
            "mechanism_evidence": {r: self.evidence_in(r) for r in self.regimes},
            "probe_notes": {r: self.probe_notes(r) for r in self.regimes},
            "seed": self.seed,
            "max_examples": self.max_examples,
            "reproduce": self.reproduce,
            "precision": self.precision,
            "precision_detected": self.precision_detected,
            "twin": self.twin,
        }
        if self.regularizer is not None:
            out["regularizer"] = self.regularizer.to_dict()
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def render(self, console=None, verbose: bool = False) -> None:
        """Print the verdict table, mechanisms and counterexamples (rich)."""
        from exchange.checker._render import render_report

        render_report(self, console, verbose)

    def __str__(self) -> str:
        from rich.console import Console

        buf = io.StringIO()
        self.render(Console(file=buf, width=120, force_terminal=False, color_system=None))
        return buf.getvalue()

    def __repr__(self) -> str:
        broken = sorted({n for (n, _), r in self.results.items() if not r.holds})
        return f"Report(objective={self.objective!r}, broken={broken}, mechanisms={self.mechanisms})"
