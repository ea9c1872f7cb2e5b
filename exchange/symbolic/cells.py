"""Cells of a piecewise coefficient: ratio regions x advantage sign patterns.

A clipped coefficient is a ``Piecewise`` whose conditions compare the advantage
placeholders ``A_i`` with 0 and the ratios (``rho``, ``s_i``) with the clip bounds. On
each *cell* (one region per ratio, one sign per advantage) every condition has a fixed
truth value, decided here at a witness point of the cell; the branch formulas stay
exact. Min/Max are rewritten as Piecewise first.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import sympy as sp

__all__ = ["Region", "resolve", "ratio_regions", "feasible_sign_patterns"]


@dataclass(frozen=True)
class Region:
    """A region of the ratio symbols: a label and one witness value per symbol."""

    label: str
    witness: Mapping[sp.Symbol, sp.Expr]


def resolve(expr: sp.Expr, witness: Mapping[sp.Symbol, sp.Expr]) -> sp.Expr:
    """Replace each Piecewise by its branch(es) whose condition can hold at ``witness``.

    Conditions are evaluated with ``witness`` substituted; a condition that becomes
    ``True`` selects its branch, ``False`` drops it, and one that stays symbolic is kept
    (partial resolution, e.g. only the ratio symbols fixed).
    """
    expr = expr.replace(lambda e: isinstance(e, (sp.Min, sp.Max)), lambda e: e.rewrite(sp.Piecewise))
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


def _bounds(eps_low: sp.Expr | None, eps_high: sp.Expr | None, w_low, w_high, w_c=None):
    """(state, label template, witness) for a ratio below, inside and above its clip range
    (and beyond the dual-clip bound ``c`` when ``w_c`` is given)."""
    out = []
    if eps_low is not None:
        out.append(("below", "{x} < 1 - {el}", (1 - w_low) / 2))
    lo = "1 - {el}" if eps_low is not None else "0"
    hi = "1 + {eh}" if eps_high is not None else "oo"
    out.append(("inside", lo + " <= {x} <= " + hi, sp.Integer(1)))
    if eps_high is not None and w_c is None:
        out.append(("above", "{x} > 1 + {eh}", 1 + 2 * w_high))
    elif eps_high is not None:
        out.append(("above", "1 + {eh} < {x} <= {c}", (1 + w_high + w_c) / 2))
        out.append(("beyond", "{x} > {c}", 2 * w_c))
    return out


def ratio_regions(
    symbols: Sequence[sp.Symbol],
    eps_low: sp.Symbol | None,
    eps_high: sp.Symbol | None,
    witness_params: Mapping[sp.Symbol, sp.Expr],
    max_regions: int = 27,
    clip_c: sp.Symbol | None = None,
) -> tuple[list[Region], bool]:
    """Regions of the ratio ``symbols`` (each below / inside / above its clip range).

    ``clip_c`` adds the dual-clip bound (a fourth state ``x > c``).
    Returns ``(regions, complete)``; when the full product exceeds ``max_regions``
    only the homogeneous regions (every ratio in the same state) are returned and
    ``complete`` is False. The witnesses fix ``eps_*`` at ``witness_params``.
    """
    w_low = witness_params.get(eps_low, sp.Rational(1, 5)) if eps_low is not None else None
    w_high = witness_params.get(eps_high, sp.Rational(1, 5)) if eps_high is not None else None
    w_c = witness_params.get(clip_c, sp.Integer(3)) if clip_c is not None else None
    states = _bounds(eps_low, eps_high, w_low, w_high, w_c)
    fixed = {k: v for k, v in witness_params.items() if k in (eps_low, eps_high, clip_c)}
    names = {"el": str(eps_low), "eh": str(eps_high), "c": str(clip_c)}
    if not symbols or (eps_low is None and eps_high is None):
        return [Region("any ratio", dict(fixed))], True
    combos = list(itertools.product(states, repeat=len(symbols)))
    complete = len(combos) <= max_regions
    if not complete:
        combos = [tuple([st] * len(symbols)) for st in states]
    regions = []
    for combo in combos:
        if len(symbols) > 1 and len({st[0] for st in combo}) == 1:
            label = combo[0][1].format(x="every " + ", ".join(map(str, symbols)), **names)
        else:
            label = "; ".join(st[1].format(x=str(s), **names) for s, st in zip(symbols, combo))
        witness = dict(fixed)
        witness.update({s: st[2] for s, st in zip(symbols, combo)})
        regions.append(Region(label, witness))
    return regions, complete


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
