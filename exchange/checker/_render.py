"""Rich rendering of a :class:`~exchange.checker.report.Report` (kept apart from the data)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from exchange.checker.properties import finite
from exchange.core.formatting import rollout_table
from exchange.core.vocabulary import MECHANISMS, REGIME_LABELS

if TYPE_CHECKING:
    from exchange.checker.report import Report


def _cell(res) -> str:
    if res.holds and res.round_off:
        return f"[green]holds[/green] up to {res.round_off} round-off ({res.examples} ex)"
    if res.holds:
        return f"[green]holds[/green] ({res.examples} ex)"
    if res.precision_induced:
        return f"[red]BROKEN[/red] (precision-induced; {res.found_by})"
    return f"[red]BROKEN[/red] ({res.found_by})"


def render_report(report: "Report", console: Console | None = None, verbose: bool = False) -> None:
    console = console or Console()
    table = Table(title=f"exchange check: {report.objective}", show_lines=False)
    table.add_column("property")
    for r in report.regimes:
        table.add_column(REGIME_LABELS.get(r, r))
    table.add_column("max residual")
    table.add_column("theorem")
    for name in report.properties:
        per = [report.results[(name, r)] for r in report.regimes]
        worst = max(p.max_residual for p in per)
        theorems = ", ".join(per[0].theorems[:2]) + (" ..." if len(per[0].theorems) > 2 else "") or "-"
        table.add_row(name, *[_cell(p) for p in per], f"{worst:.2e}", theorems)
    console.print(table)
    if report.precision != "float64":
        how = "detected: every coefficient is an exact " + report.precision + " value" if report.precision_detected else "as told"
        console.print(f"precision: {report.precision} ({how}); residuals at that level are round-off")
    if report.twin:
        console.print(f"twin: {report.twin}")
    if report.mechanisms:
        console.print("mechanisms:")
        for m in report.mechanisms:
            where = [REGIME_LABELS.get(r, r) for r in report.regimes if m in report.mechanisms_by_regime.get(r, [])]
            console.print(f"  {m} ({', '.join(where)}): {MECHANISMS[m].description if m in MECHANISMS else ''}")
            if verbose:  # which evidence supports each name (THEORY.md section 4)
                for line in dict.fromkeys(x for r in report.regimes for x in report.evidence_in(r).get(m, [])):
                    console.print(f"      evidence: {line}")
    elif not report.all_hold:
        if finite.NAME in report.properties and not report.holds(finite.NAME):
            console.print("mechanisms: none attributed: the loss or its gradient is not finite (fix that first)")
        else:
            console.print("mechanisms: none attributed by the probes (see the counterexamples)")
    for note in dict.fromkeys(n for r in report.regimes for n in report.probe_notes(r)):
        console.print(f"not evidence: {note}")
    if report.regularizer is not None:
        reg = report.regularizer
        console.print(
            f"regularizer channel: max|kappa|={reg.max_abs:.3g}, event-consistent={reg.event_consistent}, "
            f"reward-independent={reg.reward_independent}"
        )
    shown: dict[tuple, str] = {}
    for name in report.properties:
        for r in report.regimes:
            res = report.results[(name, r)]
            if res.holds or res.counterexample is None:
                continue
            key = (name, res.found_by, tuple(res.mismatches))
            if key in shown:  # same failure in both regimes (e.g. an on-policy probe)
                console.print(f"\n[bold]{name}[/bold] broken ({REGIME_LABELS.get(r, r)}): same counterexample as {shown[key]}")
                continue
            shown[key] = REGIME_LABELS.get(r, r)
            console.print(f"\n[bold]{name}[/bold] broken ({REGIME_LABELS.get(r, r)}), found by {res.found_by}:")
            if res.note:
                console.print(f"  {res.note}", markup=False)
            for m in res.mismatches:
                console.print(f"  - {m}", markup=False)
            console.print(rollout_table(res.counterexample, res.kappa), markup=False, highlight=False)
            if verbose:
                console.print(res.counterexample.to_code(), markup=False, highlight=False)
    if report.reproduce:
        console.print(f"\nreproduce: {report.reproduce}", markup=False)
