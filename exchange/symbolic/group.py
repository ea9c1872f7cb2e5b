"""``SymbolicGroup``: the symbols of one group of ``G`` responses (THEORY.md section 1).

Each response ``i`` has a reward ``R_i``, a length ``L_i`` and one *designated* token
whose log-probability ``l_i`` is its own variable (so ``kappa_i = dJ/dl_i``). The rest
of the response enters through two constants:

- ``D_i``: the sum over its other tokens of ``l - l_old`` (sequence-coupled ratios, M1);
- ``X_i``: their contribution to a token sum of the surrogate (constant in ``l_i``).

For a *shared event* the designated token is the event's occurrence in every response,
so all token ratios ``r_i = exp(l_i - lo_i)`` equal one ratio ``rho`` (event-consistent),
while ``D_i``, ``L_i`` and the sequence ratios ``s_i`` stay free.

Two per-token inputs that some objectives read are symbols too (constants in ``l_i``):
``q_i``, the behaviour probability ``exp(lo_i)`` of the designated token (DCPO's bounds),
and ``z_i``, its standardised entropy (HAPO). At a shared event ``q_i`` is one ``q``
(same event, same behaviour policy); ``z_i`` is one ``z`` only when the objective
standardises over the batch (a response-level z-score differs between copies, M5).

Advantages enter the surrogate as placeholders ``A_i``; the spec says separately how
they are computed from the rewards (see :mod:`exchange.symbolic.spec`). Stop-gradient is
``g.sg(expr)``: a fresh symbol during differentiation, replaced by ``expr`` afterwards.
"""

from __future__ import annotations

import sympy as sp

__all__ = ["SymbolicGroup"]


class SymbolicGroup:
    """Symbols for a group of ``G`` responses (``G`` a Python int, 2..8).

    Attributes (tuples of length ``G`` unless noted):
        R: rewards (real). L: lengths (positive). A: advantage placeholders (real).
        l, lo: current / behaviour log-prob of the designated token (real).
        D: sum of the other tokens' log-ratios (real). X: other tokens' surrogate terms.
        r: display symbols of the token ratios ``exp(l_i - lo_i)`` (positive).
        s: display symbols of the sequence ratios ``exp((l_i - lo_i + D_i)/L_i)`` (positive).
        Gn: the group size as a symbol ``G`` in normalisers (positive scalar).
        N: the token count ``sum_j L_j`` as a symbol in normalisers (positive scalar).
        rho: the shared event's ratio (positive scalar).
        q: behaviour probabilities ``exp(lo_i)`` of the designated tokens (positive);
            ``q_event`` the shared event's (one value).
        z: standardised entropies of the designated tokens (real); ``z_event`` the
            shared event's when the standardisation is event-level.
    """

    def __init__(self, G: int):
        self.G = int(G)
        idx = range(1, self.G + 1)
        self.R = tuple(sp.Symbol(f"R_{i}", real=True) for i in idx)
        self.L = tuple(sp.Symbol(f"L_{i}", positive=True) for i in idx)
        self.A = tuple(sp.Symbol(f"A_{i}", real=True) for i in idx)
        self.l = tuple(sp.Symbol(f"l_{i}", real=True) for i in idx)
        self.lo = tuple(sp.Symbol(f"lo_{i}", real=True) for i in idx)
        self.D = tuple(sp.Symbol(f"D_{i}", real=True) for i in idx)
        self.X = tuple(sp.Symbol(f"X_{i}", real=True) for i in idx)
        self.r = tuple(sp.Symbol(f"r_{i}", positive=True) for i in idx)
        self.s = tuple(sp.Symbol(f"s_{i}", positive=True) for i in idx)
        self.Gn = sp.Symbol("G", positive=True)
        self.N = sp.Symbol("N", positive=True)
        self.rho = sp.Symbol("rho", positive=True)
        self.q = tuple(sp.Symbol(f"q_{i}", positive=True) for i in idx)
        self.q_event = sp.Symbol("q", positive=True)
        self.z = tuple(sp.Symbol(f"z_{i}", real=True) for i in idx)
        self.z_event = sp.Symbol("z", real=True)
        self._sg: dict[sp.Symbol, sp.Expr] = {}

    # ------------------------------------------------------------- building blocks
    def token_log_ratio(self, i: int) -> sp.Expr:
        """``l_i - lo_i``: log-ratio of response ``i``'s designated token (0-based ``i``)."""
        return self.l[i] - self.lo[i]

    def token_ratio(self, i: int) -> sp.Expr:
        """``r_i = exp(l_i - lo_i)``."""
        return sp.exp(self.token_log_ratio(i))

    def seq_log_ratio(self, i: int) -> sp.Expr:
        """``log s_i = (l_i - lo_i + D_i) / L_i``: GSPO's length-normalised sequence log-ratio."""
        return (self.token_log_ratio(i) + self.D[i]) / self.L[i]

    def seq_ratio(self, i: int) -> sp.Expr:
        """``s_i = exp((l_i - lo_i + D_i) / L_i)``."""
        return sp.exp(self.seq_log_ratio(i))

    def shared_event(self, entropy_event_level: bool = False) -> dict[sp.Symbol, sp.Symbol]:
        """The substitution that makes the designated tokens one shared event: every
        ``r_i -> rho``, ``q_i -> q``, and ``z_i -> z`` when the entropy statistic is
        event-level."""
        out = {r: self.rho for r in self.r} | {q: self.q_event for q in self.q}
        if entropy_event_level:
            out |= {z: self.z_event for z in self.z}
        return out

    def sg(self, expr: sp.Expr) -> sp.Symbol:
        """Stop-gradient: a fresh symbol standing for ``expr`` while differentiating."""
        dummy = sp.Dummy(f"sg{len(self._sg)}")
        self._sg[dummy] = expr
        return dummy

    # ----------------------------------------------------------------- afterwards
    def release_sg(self, expr: sp.Expr) -> sp.Expr:
        """Put the stopped expressions back (after differentiation)."""
        return expr.xreplace(self._sg) if self._sg else expr

    def ratio_names(self) -> dict[sp.Expr, sp.Symbol]:
        """Exponent -> display symbol: ``l_i - lo_i -> r_i`` and ``log s_i -> s_i``."""
        out: dict[sp.Expr, sp.Symbol] = {}
        for i in range(self.G):
            out[sp.expand(self.token_log_ratio(i))] = self.r[i]
            out[sp.expand(self.seq_log_ratio(i))] = self.s[i]
        return out

    def name_ratios(self, expr: sp.Expr) -> sp.Expr:
        """Replace every ``exp(log-ratio)`` atom by its display symbol ``r_i`` / ``s_i``."""
        names = self.ratio_names()
        mapping = {}
        for atom in expr.atoms(sp.exp):
            key = sp.expand(atom.args[0])
            if key in names:
                mapping[atom] = names[key]
        return expr.xreplace(mapping) if mapping else expr
