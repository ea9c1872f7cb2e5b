"""``SymbolicSpec``: an objective written once in sympy, plus how its advantages are made.

A spec gives the group surrogate ``J`` (to maximise) as a sympy expression of a
:class:`~exchange.symbolic.group.SymbolicGroup`, with advantage placeholders ``A_i``,
and, separately, the advantages as ``A_i = centred_i / scale`` where ``scale`` is a
positive group constant (std, 1, a batch std). Keeping the scale as a positive symbol
makes every shared-event coefficient a rational function of the rewards, so "K = 0 for
every reward vector" becomes a polynomial identity that sympy can settle.

The coefficient is never written by hand: :mod:`exchange.symbolic.derive`
differentiates ``J`` (``kappa_i = dJ/dl_i``), exactly as autograd differentiates the
torch loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import sympy as sp

from exchange.symbolic.group import SymbolicGroup

__all__ = ["AdvantageForm", "SymbolicSpec", "PARAM_SYMBOLS", "param_symbol"]

# Numeric hyperparameters that stay symbolic in derivations (positive).
PARAM_SYMBOLS: dict[str, sp.Symbol] = {
    "eps_low": sp.Symbol("epsilon_low", positive=True),
    "eps_high": sp.Symbol("epsilon_high", positive=True),
    "max_length": sp.Symbol("L_max", positive=True),
    "tau_pos": sp.Symbol("tau_pos", positive=True),
    "tau_neg": sp.Symbol("tau_neg", positive=True),
    "alpha": sp.Symbol("alpha", positive=True),
    "phi": sp.Symbol("phi", positive=True),
    "beta": sp.Symbol("beta", positive=True),
    "clip_c": sp.Symbol("c", positive=True),
    "trust_eps": sp.Symbol("trust_eps", positive=True),
}


def param_symbol(name: str) -> sp.Symbol:
    """The positive symbol of hyperparameter ``name`` (``eps_low -> epsilon_low``)."""
    return PARAM_SYMBOLS.get(name) or sp.Symbol(name, positive=True)


@dataclass(frozen=True)
class AdvantageForm:
    """``A_i = centred[i] / scale``.

    Fields:
        centred: ``G`` expressions in the rewards (and lengths for token-weighted batch
            statistics).
        scale: a positive group constant as a symbol (or ``1``); its value is ``scale_value``.
        scale_value: the scale as an expression of the rewards (for numeric evaluation).
        description: one line, e.g. ``"(R_i - mean R) / (std R + 1e-4)"``.
    """

    centred: tuple[sp.Expr, ...]
    scale: sp.Expr
    scale_value: sp.Expr
    description: str

    def values(self) -> tuple[sp.Expr, ...]:
        return tuple(c / self.scale for c in self.centred)


@dataclass(frozen=True)
class SymbolicSpec:
    """One objective in closed form.

    Fields:
        name: the catalog name it mirrors (``exchange.objectives.get(name)``).
        surrogate: ``(g, P, opts) -> J``: the group objective to maximise, built from
            ``g``'s symbols, the advantage placeholders ``g.A``, the symbolic
            hyperparameters ``P[name]`` and the numeric/structural options ``opts``
            (the objective's defaults with overrides).
        advantages: ``(g, opts) -> AdvantageForm``.
        symbolic_params: hyperparameters kept symbolic (``P``), e.g. ``("eps_low", "eps_high")``.
        notes: what the closed form assumes (one group per batch, ...).
        trust_region: ``(g, P) -> TrustRegion`` when the clip range is not
            ``[1 - eps_low, 1 + eps_high]`` (DCPO's probability-dependent bounds).
        entropy_event_level: ``opts -> bool``: whether the entropy statistic ``z`` is the
            same for every copy of an event (HAPO with ``z_scope="batch"``).
        assumptions: ``P -> (relational, ...)``: the closed form's domain (HAPO's
            ``alpha < phi``); vanishing conditions that contradict it are dropped.
        display: ``(g, P) -> {expression: name}``: sub-expressions printed by name in
            ``exchange derive`` (DCPO's bounds as ``low(q)``, ``high(q)``); display only.
    """

    name: str
    surrogate: Callable[[SymbolicGroup, Mapping[str, sp.Symbol], Mapping[str, Any]], sp.Expr]
    advantages: Callable[[SymbolicGroup, Mapping[str, Any]], AdvantageForm]
    symbolic_params: tuple[str, ...] = ()
    notes: str = ""
    trust_region: Callable[[SymbolicGroup, Mapping[str, sp.Symbol]], Any] | None = None
    entropy_event_level: Callable[[Mapping[str, Any]], bool] = lambda opts: False
    assumptions: Callable[[Mapping[str, sp.Symbol]], tuple] = lambda P: ()
    display: Callable[[SymbolicGroup, Mapping[str, sp.Symbol]], dict] = lambda g, P: {}

    def param_symbols(self, opts: Mapping[str, Any]) -> dict[str, sp.Symbol]:
        """Symbols of the hyperparameters that are set (``None`` ones are left out)."""
        return {k: param_symbol(k) for k in self.symbolic_params if opts.get(k) is not None}
