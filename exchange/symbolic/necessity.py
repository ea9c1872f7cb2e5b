"""T2 (necessity) as a linear system, and the Cor. 3.3 example (THEORY.md sections 3-4).

With ``kappa_i = A_i w_i`` at a shared event and group-mean advantages
``A = R - mean(R)`` (any positive group scale drops out), shared-event cancellation for
a reward vector ``R`` is one linear equation in the weights: ``sum_i A_i(R) w_i = 0``.
Stacking it for every binary ``R in {0,1}^G`` gives ``M w = 0``; T2 says its solution
space is exactly the constant vectors (rank ``G - 1``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy as sp

from exchange.errors import InvalidArgument

__all__ = ["NecessityResult", "necessity", "necessity_general", "Cor33Example", "cor33_example"]


@dataclass(frozen=True)
class NecessityResult:
    """The T2 system for one ``G``.

    Fields:
        G: group size.
        rewards: the ``2^G`` binary reward vectors (rows of the system).
        system: ``Matrix[2^G, G]``, row ``R`` = ``R - mean(R)`` (the centred advantages).
        rank: rank of ``system`` (``G - 1`` when T2 holds).
        nullspace: basis of ``{w : system w = 0}``.
        forces_equal_weights: True when the nullspace is spanned by ``(1, ..., 1)``.
    """

    G: int
    rewards: tuple[tuple[int, ...], ...]
    system: sp.Matrix
    rank: int
    nullspace: tuple[sp.Matrix, ...]
    forces_equal_weights: bool

    def to_dict(self) -> dict:
        return {"G": self.G, "rank": self.rank, "n_equations": len(self.rewards),
                "nullspace": [list(map(str, v)) for v in self.nullspace],
                "forces_equal_weights": self.forces_equal_weights}


def necessity(G: int) -> NecessityResult:
    """Solve ``sum_i (R_i - mean R) w_i = 0`` for every binary ``R`` (T2), exactly."""
    if not isinstance(G, int) or not 2 <= G <= 12:
        raise InvalidArgument(f"G={G!r}: use an int in 2..12 (the system has 2^G rows).")
    rewards = tuple(itertools.product((0, 1), repeat=G))
    rows = [[sp.Integer(r) - sp.Rational(sum(R), G) for r in R] for R in rewards]
    M = sp.Matrix(rows)
    null = tuple(M.nullspace())
    ones = sp.Matrix([1] * G)
    forces = len(null) == 1 and sp.Matrix.hstack(null[0], ones).rank() == 1
    return NecessityResult(G, rewards, M, M.rank(), null, forces)


def necessity_general() -> tuple[sp.Expr, sp.Expr, bool]:
    """The symbolic-``G`` step of T2: ``K(e_j) = sum_i (delta_ij - 1/G) w_i = w_j - mean(w)``.

    Returns ``(K(e_j) summed by sympy, w_j - mean(w), equal)`` for symbolic ``G`` and
    ``1 <= j <= G``: ``K(e_j) = 0`` for every ``j`` forces ``w_j = mean(w)`` for all ``j``.
    """
    G = sp.Symbol("G", integer=True, positive=True)
    i, j = sp.symbols("i j", integer=True, positive=True)
    w = sp.IndexedBase("w")
    K = sp.Sum((sp.KroneckerDelta(i, j) - 1 / G) * w[i], (i, 1, G)).doit()
    if isinstance(K, sp.Piecewise):  # branch for j <= G (j is a response index)
        K = next(v for v, c in K.args if c.subs(G, j) == sp.true or c == sp.true)
    rhs = w[j] - sp.Sum(w[i], (i, 1, G)) / G
    equal = sp.simplify(sp.factor_terms(K) - sp.factor_terms(rhs)) == 0
    return K, rhs, bool(equal)


@dataclass(frozen=True)
class Cor33Example:
    """``A = (1, 1, -2)``, ``w = (1, 3, 2)``: ``K = A . w = 0`` with unequal weights.

    Fields: ``rewards`` (a binary vector whose centred advantages are ``A / 3``),
    ``K`` (0), ``weights_equal`` (False), ``K_other`` (``K`` for ``R = e_1``: non-zero,
    so the cancellation is one reward vector's accident, as T2 predicts), and
    ``gspo_K`` with its zero set: for GSPO weights ``w_i = s_i / L_i`` the shared
    coefficient is a non-zero linear form in ``s`` for any fixed ``A != 0``, so
    cancellation holds only on a hyperplane of ratios (measure zero: Cor. 3.3).
    """

    A: tuple[int, ...]
    w: tuple[int, ...]
    rewards: tuple[int, ...]
    K: sp.Expr
    weights_equal: bool
    K_other: sp.Expr
    gspo_K: sp.Expr
    gspo_K_nonzero_polynomial: bool


def cor33_example() -> Cor33Example:
    A = sp.Matrix([1, 1, -2])
    w = sp.Matrix([1, 3, 2])
    R = (1, 1, 0)
    # R = (1, 1, 0) has centred advantages (1/3, 1/3, -2/3) = A / 3: a binary reward vector.
    e1 = sp.Matrix([sp.Rational(2, 3), -sp.Rational(1, 3), -sp.Rational(1, 3)])
    s = sp.symbols("s_1:4", positive=True)
    L = sp.symbols("L_1:4", positive=True)
    gspo_K = sp.Add(*[A[i] * s[i] / L[i] for i in range(3)])
    nonzero = any(sp.diff(gspo_K, si) != 0 for si in s)
    return Cor33Example(tuple(A), tuple(w), R, (A.T * w)[0], len(set(w)) == 1, (e1.T * w)[0], gspo_K, nonzero)
