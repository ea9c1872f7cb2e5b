"""Cells of a piecewise coefficient: ratio regions x advantage sign patterns.

A clipped coefficient is a ``Piecewise`` whose conditions compare the advantage
placeholders ``A_i`` with 0 and the ratios (``rho``, ``s_i``) with the clip bounds
(``1 -+ eps``, or DCPO's ``low(q)``, ``high(q)``: a :class:`TrustRegion`). On each *cell*
(one region per ratio, one sign per advantage, and for HAPO one :class:`EntropyState`)
every condition has a fixed truth value, decided here at a witness point of the cell;
the branch formulas stay exact. Min/Max in values are decided the same way when the
witness decides them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import sympy as sp

from exchange.core.vocabulary import Regime

__all__ = ["Region", "TrustRegion", "EntropyState", "resolve", "ratio_regions", "entropy_states",
           "feasible_sign_patterns"]


@dataclass(frozen=True)
class Region:
    """A region of the ratio symbols: a label, one witness value per symbol, and the
    regime it belongs to (the on-policy point, or a region of off-policy ratios)."""

    label: str
    witness: Mapping[sp.Symbol, sp.Expr]
    regime: Regime = Regime.OFF_POLICY


def _decide_min_max(e: sp.Basic, witness: Mapping[sp.Symbol, sp.Expr]) -> sp.Basic:
    """Min/Max in values (CISPO's clipped weight) become the argument the witness selects;
    one the witness cannot decide (a min over the group's lengths) stays a Min/Max, a
    positive factor the solver can divide out. Min/Max inside conditions (DCPO's bounds)
    are left for the witness to evaluate there."""
    if isinstance(e, (sp.logic.boolalg.Boolean, sp.core.relational.Relational)) or not e.args:
        return e
    new = e.func(*[_decide_min_max(a, witness) for a in e.args])
    if isinstance(new, (sp.Min, sp.Max)):
        decided = _resolve_piecewise(new.rewrite(sp.Piecewise), witness)
        return new if decided.has(sp.Piecewise) else decided
    return new


def resolve(expr: sp.Expr, witness: Mapping[sp.Symbol, sp.Expr]) -> sp.Expr:
    """Replace each Piecewise by its branch(es) whose condition can hold at ``witness``.

    Conditions are evaluated with ``witness`` substituted; a condition that becomes
    ``True`` selects its branch, ``False`` drops it, and one that stays symbolic is kept
    (partial resolution, e.g. only the ratio symbols fixed). Min/Max are decided the same
    way when the witness decides them.
    """
    return _resolve_piecewise(_decide_min_max(expr, witness), witness)


def _resolve_piecewise(expr: sp.Expr, witness: Mapping[sp.Symbol, sp.Expr]) -> sp.Expr:
    if not expr.has(sp.Piecewise):
        return expr

    def one(pw: sp.Piecewise) -> sp.Expr:
        kept = []
        for value, cond in pw.args:
            truth = cond.subs(witness) if cond is not sp.true else sp.true
            if truth == sp.false:
                continue
            kept.append((resolve(value, witness), truth))
            if truth == sp.true:
                break
        if len(kept) == 1 and kept[0][1] == sp.true:
            return kept[0][0]
        return sp.Piecewise(*kept)

    return expr.replace(lambda e: isinstance(e, sp.Piecewise), one)


@dataclass(frozen=True)
class TrustRegion:
    """The clip range ``[low, high]`` that the ratio regions are cut along.

    Fields:
        low, high: bound expressions (``None``: that side is open), e.g. ``1 - epsilon_low``
            or DCPO's ``low(q)``.
        low_label, high_label: how region labels print them.
        witness: values of extra symbols the bounds depend on (DCPO's ``q``), used only to
            place witness points.
    """

    low: sp.Expr | None
    high: sp.Expr | None
    low_label: str = ""
    high_label: str = ""
    witness: Mapping[sp.Symbol, sp.Expr] = field(default_factory=dict)

    @classmethod
    def from_eps(cls, eps_low: sp.Expr | None, eps_high: sp.Expr | None) -> "TrustRegion":
        """``[1 - eps_low, 1 + eps_high]`` (PPO-style)."""
        return cls(None if eps_low is None else 1 - eps_low, None if eps_high is None else 1 + eps_high,
                   f"1 - {eps_low}", f"1 + {eps_high}")


def _states(tr: TrustRegion, params: Mapping[sp.Symbol, sp.Expr], c: sp.Symbol | None):
    """(label template, witness) for a ratio below, inside and above the trust region (and
    beyond the dual-clip bound ``c`` when given). Witnesses: half the lower bound, 1, and
    points above the upper bound (and between it and ``c``)."""
    at = {**params, **tr.witness}

    def value(e):
        return sp.nsimplify(sp.sympify(e).xreplace(at))

    out = []
    if tr.low is not None:
        out.append(("{x} < " + tr.low_label, value(tr.low) / 2))
    lo = tr.low_label if tr.low is not None else "0"
    hi = tr.high_label if tr.high is not None else "oo"
    out.append((lo + " <= {x} <= " + hi, sp.Integer(1)))
    if tr.high is not None:
        w_high = value(tr.high)
        if c is None:
            out.append(("{x} > " + tr.high_label, 2 * w_high - 1))
        else:
            w_c = params.get(c, sp.Integer(3))
            out.append((tr.high_label + " < {x} <= " + str(c), (w_high + w_c) / 2))
            out.append(("{x} > " + str(c), 2 * w_c))
    return out


def ratio_regions(
    symbols: Sequence[sp.Symbol],
    tr: TrustRegion,
    witness_params: Mapping[sp.Symbol, sp.Expr],
    max_regions: int = 27,
    clip_c: sp.Symbol | None = None,
) -> tuple[list[Region], bool]:
    """Regions of the ratio ``symbols`` (each below / inside / above the trust region).

    ``clip_c`` adds the dual-clip bound (a fourth state ``x > c``).
    Returns ``(regions, complete)``; when the full product exceeds ``max_regions``
    only the homogeneous regions (every ratio in the same state) are returned and
    ``complete`` is False. Every witness also fixes the hyperparameters at
    ``witness_params`` and the trust region's own symbols at ``tr.witness``.
    """
    fixed = {**witness_params, **tr.witness}
    if not symbols or (tr.low is None and tr.high is None):
        return [Region("any ratio", fixed)], True
    states = _states(tr, witness_params, clip_c)
    combos = list(itertools.product(states, repeat=len(symbols)))
    complete = len(combos) <= max_regions
    if not complete:
        combos = [tuple([st] * len(symbols)) for st in states]
    regions = []
    for combo in combos:
        if len(symbols) > 1 and len({st[0] for st in combo}) == 1:
            label = combo[0][0].format(x="every " + ", ".join(map(str, symbols)))
        else:
            label = "; ".join(st[0].format(x=str(s)) for s, st in zip(symbols, combo))
        witness = dict(fixed)
        witness.update({s: st[1] for s, st in zip(symbols, combo)})
        regions.append(Region(label, witness))
    return regions, complete


@dataclass(frozen=True)
class EntropyState:
    """One state of HAPO's entropy z-scores against their clip ``[-|A_i|/phi, |A_i|/phi]``:
    ``"inside"``, ``"above"`` or ``"below"`` for every ``z`` of the event."""

    label: str
    state: str
    symbols: tuple[sp.Symbol, ...]

    def apply(self, expr: sp.Expr) -> sp.Expr:
        """Decide every clip test ``z > bound`` / ``z < bound`` on a ``z`` of this state.

        The bounds are the clip's (``+-|A_i|/phi``), so the test's truth follows from the
        state alone: "above" makes every ``z > bound`` true, "inside" makes every test false.
        """
        zs = set(self.symbols)
        if not zs:
            return expr

        def greater(rel) -> bool:  # is it "z > bound" (rather than "z < bound")?
            lhs_has_z = bool(rel.lhs.free_symbols & zs)
            return lhs_has_z == isinstance(rel, (sp.StrictGreaterThan, sp.GreaterThan))

        def truth(rel):
            wanted = "above" if greater(rel) else "below"
            return sp.true if self.state == wanted else sp.false

        return expr.replace(lambda e: isinstance(e, sp.core.relational.Relational) and bool(e.free_symbols & zs),
                            truth)


def entropy_states(symbols: Sequence[sp.Symbol]) -> list[EntropyState]:
    """Every ``z`` inside its clip, every one above, every one below. Mixed states depend on
    the advantages' magnitudes and are not cut. ``[EntropyState("", "none", ())]`` without ``z``."""
    if not symbols:
        return [EntropyState("", "none", ())]
    x = "every " + ", ".join(map(str, symbols)) if len(symbols) > 1 else str(symbols[0])
    return [EntropyState(f"|{x}| <= |A_i|/phi", "inside", tuple(symbols)),
            EntropyState(f"{x} > |A_i|/phi", "above", tuple(symbols)),
            EntropyState(f"{x} < -|A_i|/phi", "below", tuple(symbols))]


def feasible_sign_patterns(
    centred: Sequence[sp.Expr], rewards: Sequence[sp.Symbol], lengths: Sequence[sp.Symbol],
    samples: int = 4000, seed: int = 0,
) -> list[tuple[int, ...]]:
    """Sign patterns (+1/-1 per response) that the advantages take on an open set of rewards.

    Found by evaluating the advantage numerators at ``samples`` random reward vectors
    (standard normal) and lengths (1..16), seeded: deterministic. Zero advantages have
    measure zero and are skipped.
    """
    rng = np.random.default_rng(seed)
    G = len(rewards)
    fn = sp.lambdify([list(rewards), list(lengths)], list(centred), modules="numpy")
    R = rng.standard_normal((G, samples))
    L = rng.integers(1, 17, size=(G, samples)).astype(float)
    vals = np.array([np.broadcast_to(v, (samples,)) for v in fn(list(R), list(L))])  # [G, samples]
    signs = np.sign(vals).T
    signs = signs[(signs != 0).all(axis=1)]
    return sorted({tuple(int(x) for x in row) for row in signs}, reverse=True)
