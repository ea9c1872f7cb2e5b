"""Markdown for issue 42's parts of an experiment report: each arm's own drift (both
halves of a prediction) and the dose rule's table. Pure formatting of typed results
(:class:`exchange.lab.verdict.OwnDrift`, :class:`exchange.lab.dose_rule.DoseDecision`)."""

from __future__ import annotations

import math

from exchange.lab.verdict import NO_CLAIM

__all__ = ["cell", "dose_lines", "fmt", "own_drift_cell", "own_drift_lines"]


def fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"


def cell(text: str) -> str:
    """``text`` as one markdown table cell (its ``|`` escaped)."""
    return text.replace("|", "\\|")


def own_drift_lines(rows) -> list[str]:
    """One table of every P2/P3 primary row's per-arm own drift (``final - initial``,
    unoriented, 95% interval) with "flat" = inside ±SESOI of that prediction."""
    out = []
    for r in rows:
        if not r.own or not r.prediction.primary:
            continue
        if not out:
            out = ["Both halves (issue 42): each arm's own drift against its own start (final - initial, not "
                   "oriented; 95% interval over the test seeds). THEORY.md's P2 says the exchangeable arms stay "
                   "flat: **flat** means the interval lies inside ±SESOI of the same prediction.", "",
                   "| pred. | arm | own drift | 95% CI | ±SESOI | flat? |", "|---|---|---|---|---|---|"]
        for o in r.own:
            out.append(f"| {r.prediction.key} | {o.role} | {fmt(o.mean)} | [{fmt(o.low)}, {fmt(o.high)}] | "
                       f"{fmt(o.sesoi)} | {o.flat} |")
    return out + [""] if out else []


def own_drift_cell(own) -> str:
    """The claims table's text for each arm's own drift (issue 42's other half): "own drift:
    baseline A [lo, hi]; surgical B [lo, hi] flat (±SESOI)", the flat claim only for the
    exchangeable arms; "" without own drifts."""
    parts = [f"{o.role} {fmt(o.mean)} [{fmt(o.low)}, {fmt(o.high)}]"
             + ("" if o.flat == NO_CLAIM else f" {o.flat}" + (f" (±{fmt(o.sesoi)})" if o.sesoi else ""))
             for o in own]
    return "own drift: " + "; ".join(parts) if parts else ""


def dose_lines(rows) -> list[str]:
    """The dose rule's table (P2): per dose the share of the full effect, the residual
    ``d_f - f d_1`` with its interval against ±SESOI, and the intercept fit."""
    r = next((r for r in rows if r.dose is not None), None)
    if r is None:
        return []
    d = r.dose
    out = [f"**Dose rule** ({r.prediction.key}, issue 42): first order says an arm keeping a fraction f of the shared "
           f"residual moves the probe by f times the full arm's effect against the surgical arm (full effect "
           f"{fmt(d.full)}); each dose's own paired residual d_f - f d_1 must lie inside ±SESOI = ±{fmt(d.sesoi)}.", "",
           "| keep f | effect d_f | share of the full effect | d_f - f d_1 | 95% CI | verdict |",
           "|---|---|---|---|---|---|"]
    for row in d.rows:
        out.append(f"| {row.keep:g} | {fmt(row.effect)} | {100 * row.share:.1f}% | {fmt(row.residual)} | "
                   f"[{fmt(row.low)}, {fmt(row.high)}] | {row.verdict} |")
    fit = d.fit
    if "intercept" in fit:
        out += ["", f"Intercept fit d = a + b f mean(d_1): a = {fmt(fit['intercept'])} [{fmt(fit['intercept_low'])}, "
                    f"{fmt(fit['intercept_high'])}], b = {fmt(fit['slope'])} [{fmt(fit['slope_low'])}, "
                    f"{fmt(fit['slope_high'])}]: {'supports' if fit['supports'] else 'does not support'} first order."]
    out += ["", f"Dose verdict: **{d.label}**.", ""]
    return out
