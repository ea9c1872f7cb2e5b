"""Rich tables for ``exchange credit`` (rich is imported lazily)."""

from __future__ import annotations

from exchange.oracle.exact import EVENT_KINDS, ExactCredit
from exchange.oracle.expectation import QUADRANTS, ExpectedCoefficients
from exchange.oracle.summary import summarize, t3_check

__all__ = ["event_table", "summary_table", "quadrant_table", "t3_lines"]


def _num(x: float, ci: float = 0.0) -> str:
    s = f"{x:+.2e}" if x != 0 else "0"
    return s + (f"±{ci:.0e}" if ci > 0 else "")


def event_table(table: ExactCredit, results: list[ExpectedCoefficients], limit: int = 40):
    """One row per event: P(e), Q - V, H, I(y;R|c), then E[K] and E[K~] per objective."""
    from rich.table import Table

    t = Table(title=f"events of {table.env.name} (first {min(limit, table.n_events)} of {table.n_events})")
    for col in ("prompt|prefix|token", "kind", "P(e)", "Q−V", "H(y|c)", "I(y;R|c)"):
        left = col.startswith("prompt")
        t.add_column(col, justify="left" if left else "right", no_wrap=left)
    for ec in results:
        t.add_column(f"{ec.objective}\nE[K]", justify="right")
        t.add_column(f"{ec.objective}\nE[K̃]", justify="right")
    for e in range(min(limit, table.n_events)):
        row = [table.label(e), EVENT_KINDS[table.kind[e]], f"{table.visit[e]:.3f}", f"{table.credit[e]:+.4f}",
               f"{table.entropy[e]:.3f}", f"{table.cmi[e]:.3f}"]
        for ec in results:
            row += [_num(ec.mean[e], 1.96 * ec.mean_se[e]), _num(ec.centred[e], 1.96 * ec.centred_se[e])]
        t.add_row(*row)
    return t


def summary_table(results: list[ExpectedCoefficients]):
    from rich.table import Table

    t = Table(title="objective vs exact credit (drifts relative to max |E[K̃]|)")
    for col in ("objective", "method", "groups", "shared/null drift E[K]", "zero-credit drift E[K̃]",
                "corr(E[K̃], dπ(Q−V))", "tax (E[K̃²] on zero credit)"):
        t.add_column(col, justify="right")
    for ec in results:
        s = summarize(ec)
        t.add_row(ec.objective, ec.method, "/".join(str(n) for n in ec.n_groups), _num(s.shared_drift, s.shared_drift_ci),
                  _num(s.zero_drift, s.zero_drift_ci), f"{s.corr:.4f}", f"{s.tax:.3f}")
    return t


def quadrant_table(results: list[ExpectedCoefficients]):
    """Share of E[sum |kappa|] per quadrant (zero-credit part in brackets), and the true
    credit mass E[sum |Q - V|] per quadrant."""
    from rich.table import Table

    thr = results[0].entropy_threshold if results else 0.0
    t = Table(title=f"four quadrants: sign(R − mean R) × entropy > {thr:.3f} nats "
                    "(share of update mass \\[zero-credit part of it])")
    t.add_column("objective")
    for q in QUADRANTS:
        t.add_column(q, justify="right")
    for ec in results:
        s = summarize(ec)
        t.add_row(ec.objective, *[f"{a:.3f} \\[{z:.2f}]" for a, z in zip(s.quadrant_share, s.quadrant_zero_share)])
    if results:
        s = summarize(results[0])
        t.add_row("true |Q−V| mass", *[f"{c:.3f}" for c in s.quadrant_credit_share])
    return t


def t3_lines(results: list[ExpectedCoefficients]) -> list[str]:
    """For GRPO: measured E[K_e] on shared/null events vs the T3 closed form."""
    lines = []
    for ec in results:
        if ec.objective != "grpo" or not ec.table.kind_mask("shared", "null").any():
            continue
        chk = t3_check(ec)
        verdict = "[green]matches[/green]" if chk.matches() else "[red]does NOT match[/red]"
        for e, m, p in zip(chk.events, chk.measured, chk.predicted):
            lines.append(f"T3 {ec.table.label(e)}: E[K_e]={m:+.6e}  closed form P(e)·E[1/G Σ A_i/L_i]={p:+.6e}")
        lines.append(f"T3 closed form {verdict} (max |error| {chk.max_error:.1e})")
    return lines
