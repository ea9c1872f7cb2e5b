"""Text and LaTeX renderings of a :class:`~exchange.symbolic.derive.Derivation`."""

from __future__ import annotations

from typing import Callable

import sympy as sp

from exchange.symbolic.derive import Derivation, RegionVerdict

__all__ = ["render_text", "render_latex", "in_rewards"]


def in_rewards(d: Derivation, v: RegionVerdict) -> sp.Expr | None:
    """``K`` of region ``v`` with the advantages substituted, when it has no sign cases."""
    if v.K.has(sp.Piecewise):
        return None
    values = dict(zip(d.group.A, d.advantage.values()))
    return sp.factor(sp.together(v.K.xreplace(values)))


def _weights_line(d: Derivation, fmt: Callable[[sp.Expr], str]) -> str | None:
    if d.weights is None:
        return None
    equal = all(sp.simplify(w - d.weights[0]) == 0 for w in d.weights)
    verdict = "equal for every response: (E) on-policy" if equal else \
        "not equal across responses: (E) fails on-policy (T2)"
    return f"on-policy weights w_i = kappa_i / A_i: {', '.join(fmt(w) for w in d.weights)}   [{verdict}]"


def _conditions(v: RegionVerdict, fmt) -> str:
    if v.vanishes == "always":
        return "always (identically zero in the rewards)"
    if v.vanishes == "never":
        return "never (no values of the lengths/ratios make it vanish for every reward vector)"
    families = [", ".join(f"{fmt(c.lhs)} = {fmt(c.rhs)}" for c in fam) for fam in v.conditions]
    return "iff " + "  or  ".join(f"({f})" if len(families) > 1 else f for f in families)


def _binary_line(d: Derivation, v: RegionVerdict, fmt, on_policy: bool = False) -> str:
    sign = {"+": "positive (shared tokens pushed up)", "-": "negative (shared tokens pushed down)",
            "0": "zero"}.get(v.binary_sign, f"sign of {fmt(v.binary_sign_expr)}")
    line = f"one correct response (R = e_1): K = {fmt(v.binary_K)};  sign: {sign}"
    if on_policy and d.weights is not None and v.binary_sign not in ("0", "+", "-"):
        gap = d.weights[0] - sp.Add(*d.weights) / len(d.weights)
        c = sp.simplify(v.binary_K / gap)
        if c.is_positive:
            line += f"\n    = c (w_1 - mean_j w_j) with c = {fmt(c)} > 0: up when w_1 is above the mean weight"
    return line


def _extra_symbols(d: Derivation) -> list[str]:
    """Legend lines for the per-token inputs that only some objectives read."""
    g, used = d.group, set().union(*(k.free_symbols for k in d.kappa))
    out = []
    if used & set(g.q):
        out.append("         q = pi_old of the token (the same q for every copy of an event); "
                   "low(q), high(q): the trust region's bounds")
    if used & set(g.z):
        same = g.z_event in d.K.free_symbols
        out.append("         z = the token's standardised entropy; " + (
            "one z per event (standardised over the batch)" if same else
            "z_1..z_G differ between copies of one event (standardised within each response)"))
    return out


def _render(d: Derivation, fmt: Callable[[sp.Expr], str], block: Callable[[sp.Expr], str]) -> str:
    opts = ", ".join(f"{k}={v}" for k, v in d.options.items()) or "no hyperparameters"
    out = [
        f"exchange derive {d.objective}   (G = {d.G}; {opts})",
        "",
        f"advantage: A_i = {d.advantage.description}",
        "symbols: l_i log-prob of a token of response i (its own variable), r = exp(l - l_old) its ratio, "
        "s_i = exp(sum_t (l - l_old) / L_i), L_i length, G group size, N = sum_j L_j tokens",
        *_extra_symbols(d),
        "",
        "per-token coefficient kappa_{i,t} = dJ/dl_{i,t} (sympy derivative of the surrogate):",
    ]
    k = d.kappa_generic if d.kappa_generic is not None else d.kappa[0]
    out.append(_indent(block(k.xreplace(d.display))))
    w = _weights_line(d, fmt)
    if w:
        out.append("  " + w)
    out += ["", "shared event (the same token after the same prefix in every response; ratio rho):",
            "  K = sum_i kappa_i"]
    for n, v in enumerate(d.regions):
        out.append(f"- {v.region}:")
        Kr = in_rewards(d, v)
        out.append(_indent(block(v.K), 4))
        if Kr is not None and Kr != v.K:
            out.append("    in the rewards:")
            out.append(_indent(block(Kr), 6))
        out.append(f"    K = 0 for every reward vector: {_conditions(v, fmt)}"
                   + (f"  [{v.note}]" if v.note else ""))
        out.append("    " + _binary_line(d, v, fmt, on_policy=n == 0))
    if not d.regions_complete:
        out.append("(only the regions where every sequence ratio is in the same state are shown; "
                   "pass --all-regions with G <= 3 for the mixed ones)")
    if d.notes:
        out += ["", f"note: {d.notes}"]
    return "\n".join(out)


def _indent(text: str, n: int = 2) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def render_text(d: Derivation, unicode: bool = True) -> str:
    """Pretty text: 2-D sympy pretty-printing for the main formulas."""
    return _render(d, str, lambda e: sp.pretty(e, use_unicode=unicode, wrap_line=False))


def render_latex(d: Derivation) -> str:
    """Same content with every formula as LaTeX (``$...$``)."""
    return _render(d, lambda e: f"${sp.latex(e)}$", lambda e: f"$$ {sp.latex(e)} $$")
