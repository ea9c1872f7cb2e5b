"""``derive(objective, G)``: the closed-form coefficient analysis of one objective.

Steps (each one a sympy operation on the surrogate written once in the spec):

1. ``kappa_i = dJ/dl_i`` for the designated token of every response (stop-gradients
   released afterwards, ``exp(log-ratio)`` atoms renamed ``r_i`` / ``s_i``).
2. Shared event: every designated token is the same event, so ``r_i = rho`` for all
   ``i`` (event-consistent); ``K = sum_i kappa_i``.
3. For the on-policy point (all ratios 1) and each off-policy ratio region: resolve
   the Piecewise per advantage-sign cell, substitute ``A_i = centred_i / scale`` and
   ask when ``K`` is the zero polynomial in the rewards (``sympy.solve`` on its
   coefficients): "always", "never" or "iff <equalities>".
4. Binary rewards with one correct response (``R = e_1``): ``K`` and its sign.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import sympy as sp

from exchange.core.vocabulary import Regime
from exchange.symbolic.catalog import get_spec, options as catalog_options
from exchange.symbolic.cells import (
    EntropyState,
    Region,
    TrustRegion,
    entropy_states,
    feasible_sign_patterns,
    ratio_regions,
    resolve,
)
from exchange.symbolic.group import SymbolicGroup
from exchange.symbolic.spec import AdvantageForm, SymbolicSpec
from exchange.errors import InvalidArgument

__all__ = ["ClosedForm", "Derivation", "RegionVerdict", "closed_form", "derive", "MAX_G"]

MAX_G = 8


@dataclass(frozen=True)
class RegionVerdict:
    """The shared-event coefficient in one regime / ratio region.

    Fields:
        region: e.g. ``"on-policy (all ratios 1)"`` or ``"rho > 1 + epsilon_high"``.
        K: ``K`` in this region as a function of the advantage placeholders (Piecewise
            only in the advantages' signs).
        vanishes: ``"always"``, ``"never"`` or ``"iff"`` (for every reward vector).
        conditions: when ``"iff"``, the solution families (any one suffices), each a
            tuple of sympy ``Eq`` that must hold together; else empty.
        binary_K: ``K`` at ``R = (1, 0, ..., 0)`` (one correct response).
        binary_sign: ``"+"``, ``"-"``, ``"0"`` or ``"sign(<expr>)"`` when it depends on
            the lengths / ratios.
        binary_sign_expr: the expression whose sign is the sign of ``binary_K``.
        note: set when some symbols were left generic (transcendental ones, e.g. SAPO's
            ``rho``, ``tau``, when rational unknowns such as lengths exist).
        regime: the regime of the region (merged regions share one).
        entropy_state: HAPO's entropy-clip state label (``""`` where none applies).
    """

    region: str
    K: sp.Expr
    vanishes: str
    conditions: tuple[sp.Basic, ...]
    binary_K: sp.Expr
    binary_sign: str
    binary_sign_expr: sp.Expr
    note: str = ""
    regime: Regime = Regime.OFF_POLICY
    entropy_state: str = ""


@dataclass(frozen=True, eq=False)
class ClosedForm:
    """Steps 1-2 only (fast): the differentiated coefficients, no region analysis.

    Fields as in :class:`Derivation`: ``objective``, ``G``, ``options``, ``advantage``,
    ``surrogate``, ``kappa`` (per response), ``K`` (shared event), ``group``.
    """

    objective: str
    G: int
    options: dict[str, Any]
    advantage: AdvantageForm
    surrogate: sp.Expr
    kappa: tuple[sp.Expr, ...]
    K: sp.Expr
    group: SymbolicGroup = field(repr=False)
    P: dict[str, sp.Symbol] = field(repr=False, default_factory=dict)
    notes: str = ""


@dataclass(frozen=True, eq=False)
class Derivation:
    """Everything ``exchange derive`` prints for one objective and one ``G``.

    Fields:
        objective, G, options: what was derived (options = catalog defaults + overrides).
        advantage: ``A_i = centred_i / scale``.
        surrogate: the group objective ``J`` (to maximise) with placeholders ``A_i``.
        kappa: per-response coefficient of the designated token, ``G`` expressions in
            ``A_i``, ``L_i``, ``r_i``, ``s_i``, ``G``, ``N`` and the hyperparameters.
        kappa_generic: ``kappa`` of response ``i`` in index-free symbols, or None when it
            involves other responses.
        weights: on-policy per-response weights ``w_i = kappa_i / A_i`` when the
            on-policy coefficient has that form (T2), else None.
        K: the shared-event coefficient ``sum_i kappa_i`` with ``r_i = rho``.
        regions: on-policy first, then the off-policy ratio regions.
        display: sub-expressions printed by name (``SymbolicSpec.display``).
        regions_complete: False when only homogeneous regions were enumerated: sequence
            ratios at large ``G``, or HAPO's entropy z-scores (mixed states depend on
            the advantages' magnitudes).
    """

    objective: str
    G: int
    options: dict[str, Any]
    advantage: AdvantageForm
    surrogate: sp.Expr
    kappa: tuple[sp.Expr, ...]
    kappa_generic: sp.Expr | None
    weights: tuple[sp.Expr, ...] | None
    K: sp.Expr
    regions: tuple[RegionVerdict, ...]
    regions_complete: bool
    group: SymbolicGroup = field(repr=False)
    notes: str = ""
    display: dict = field(repr=False, default_factory=dict)

    @property
    def on_policy(self) -> RegionVerdict:
        return self.regions[0]

    def to_dict(self) -> dict[str, Any]:
        """Strings (sympy ``str``) and LaTeX of every result, for ``--json``."""
        def both(e):
            return {"text": str(e), "latex": sp.latex(e)}

        return {
            "objective": self.objective,
            "G": self.G,
            "options": {k: v for k, v in self.options.items()},
            "advantage": self.advantage.description,
            "surrogate": both(self.surrogate),
            "kappa": [both(k) for k in self.kappa],
            "kappa_generic": None if self.kappa_generic is None else both(self.kappa_generic),
            "weights": None if self.weights is None else [both(w) for w in self.weights],
            "K": both(self.K),
            "regions": [
                {
                    "region": v.region,
                    "K": both(v.K),
                    "vanishes_for_all_rewards": v.vanishes,
                    "note": v.note,
                    "conditions": [[both(c) for c in family] for family in v.conditions],
                    "binary_one_correct": {"K": both(v.binary_K), "sign": v.binary_sign},
                }
                for v in self.regions
            ],
            "regions_complete": self.regions_complete,
            "notes": self.notes,
        }


def _check(objective: str, G: int, overrides: dict) -> tuple[SymbolicSpec, tuple]:
    if isinstance(G, bool) or not isinstance(G, int) or not 2 <= G <= MAX_G:
        raise InvalidArgument(f"G={G!r} is out of range; use an int in 2..{MAX_G} (sympy work grows as 3^G).")
    spec = get_spec(objective)
    opts = catalog_options(objective, **overrides)
    return spec, tuple(sorted(opts.items(), key=lambda kv: kv[0]))


def closed_form(objective: str, G: int = 3, **overrides: Any) -> ClosedForm:
    """The differentiated coefficients of ``objective`` for a group of ``G`` (cached).

    Cheap (no cell analysis): what :func:`~exchange.symbolic.numeric.closed_form_coefficients`
    needs. Raises ``NoClosedForm`` for objectives without a closed form.
    """
    spec, opts_items = _check(objective, G, overrides)
    return _closed_form_cached(spec.name, G, opts_items)


@functools.lru_cache(maxsize=128)
def _closed_form_cached(name: str, G: int, opts_items: tuple) -> ClosedForm:
    spec = get_spec(name)
    opts = dict(opts_items)
    g = SymbolicGroup(G)
    P = spec.param_symbols(opts)
    J = spec.surrogate(g, P, opts)
    kappa = tuple(_coefficient(J, g, i) for i in range(G))
    shared = g.shared_event(spec.entropy_event_level(opts))
    K = sp.Add(*[k.xreplace(shared) for k in kappa])
    return ClosedForm(name, G, opts, spec.advantages(g, opts), J, kappa, K, g, P, spec.notes)


def derive(objective: str, G: int = 3, *, all_regions: bool = False, off_policy: bool = True,
           **overrides: Any) -> Derivation:
    """Derive the closed form of catalog objective ``objective`` for a group of ``G``.

    ``overrides`` set hyperparameters as in ``Objective.bind`` (the clip bounds stay
    symbolic; their values only pick the witness points of the regions and matter for
    options such as ``eps_low=None``). Sequence ratios (GSPO) have ``3^G`` regions; only
    the three homogeneous ones are analysed unless ``all_regions=True`` (``G <= 3``).
    ``off_policy=False`` analyses the on-policy point alone (the off-policy regions are
    most of the cost: SAPO's soft gates take seconds). Cached per (objective, G,
    all_regions, off_policy, overrides).
    Raises ``NoClosedForm`` for objectives without a closed form.
    """
    spec, opts_items = _check(objective, G, overrides)
    if all_regions and G > 3:
        raise InvalidArgument(f"all_regions=True with G={G}: 3^G regions; use G <= 3.")
    return _derive_cached(spec.name, G, all_regions, off_policy, opts_items)


@functools.lru_cache(maxsize=64)
def _derive_cached(name: str, G: int, all_regions: bool, off_policy: bool, opts_items: tuple) -> Derivation:
    cf = _closed_form_cached(name, G, opts_items)
    g, P, K, adv, opts = cf.group, cf.P, cf.K, cf.advantage, cf.options
    witness_params = {P[k]: sp.nsimplify(opts[k]) for k in P if isinstance(opts.get(k), (int, float))}
    spec = get_spec(name)
    tr = spec.trust_region(g, P) if spec.trust_region else TrustRegion.from_eps(P.get("eps_low"), P.get("eps_high"))
    seq_syms = [s for s in g.s if s in K.free_symbols]
    ratio_syms = ([g.rho] if g.rho in K.free_symbols else []) + seq_syms
    regions, complete = ratio_regions(ratio_syms, tr, witness_params,
                                      max_regions=(4 if P.get("clip_c") is not None else 3) ** (3 if all_regions else 1),
                                      clip_c=P.get("clip_c"))
    z_syms = [z for z in (g.z_event, *g.z) if z in K.free_symbols]
    z_states = entropy_states(z_syms)
    complete = complete and not z_syms
    patterns = feasible_sign_patterns(adv.centred, g.R, g.L)

    on = {s: sp.Integer(1) for s in ratio_syms}
    on_region = Region("on-policy (every ratio = 1)", {**witness_params, **tr.witness}, Regime.ON_POLICY)
    assumptions = spec.assumptions(P)
    verdicts = [_verdict(K.xreplace(on), on_region, z, g, adv, patterns, assumptions) for z in z_states]
    for region in regions if off_policy else ():
        verdicts += [_verdict(K, region, z, g, adv, patterns, assumptions) for z in z_states]
    return Derivation(
        objective=name, G=G, options=opts, advantage=adv, surrogate=cf.surrogate, kappa=cf.kappa,
        kappa_generic=_generic(cf.kappa[0], g), weights=_weights(cf.kappa, g, on_region.witness),
        K=K, regions=tuple(_merge(verdicts)), regions_complete=complete, group=g, notes=cf.notes,
        display=spec.display(g, P),
    )


# ------------------------------------------------------------------ step 1
def _coefficient(J: sp.Expr, g: SymbolicGroup, i: int) -> sp.Expr:
    """``kappa_i = dJ/dl_i`` with stop-gradients released and ratios named."""
    k = g.name_ratios(g.release_sg(sp.diff(J, g.l[i])))
    if len(k.atoms(sp.Piecewise)) > 1:  # several sign-selected factors (SAPO's tau): one Piecewise
        k = sp.piecewise_fold(k)
    leftover = k.free_symbols & (set(g.l) | set(g.lo) | set(g.D) | set(g.X))
    if leftover:  # a log-prob left outside a named ratio: the spec is not in ratio form
        raise RuntimeError(f"kappa_{i + 1} of the spec still has {sorted(map(str, leftover))}: {k}")
    return k


def _generic(k1: sp.Expr, g: SymbolicGroup) -> sp.Expr | None:
    """``kappa_1`` rewritten with index ``i`` when it involves response 1 only."""
    others = set()
    for seq in (g.R, g.L, g.A, g.r, g.s, g.q, g.z):
        others |= set(seq[1:])
    if k1.free_symbols & others:
        return None
    rename = {
        g.A[0]: sp.Symbol("A_i", real=True), g.L[0]: sp.Symbol("L_i", positive=True),
        g.r[0]: sp.Symbol("r_it", positive=True), g.s[0]: sp.Symbol("s_i", positive=True),
        g.R[0]: sp.Symbol("R_i", real=True), g.q[0]: sp.Symbol("q_it", positive=True),
        g.z[0]: sp.Symbol("z_it", real=True),
    }
    return k1.xreplace(rename)


def _weights(kappa, g: SymbolicGroup, witness) -> tuple[sp.Expr, ...] | None:
    """On-policy ``w_i = kappa_i / A_i`` when free of every advantage (T2's form)."""
    on = {s: 1 for s in (*g.r, *g.s)}
    out = []
    for i, k in enumerate(kappa):
        w = resolve(k.xreplace(on), witness) / g.A[i]
        if w.has(sp.Piecewise):
            return None
        w = sp.simplify(w)
        if w.free_symbols & set(g.A):
            return None
        out.append(w)
    return tuple(out)


# ------------------------------------------------------------------ steps 3-4
def _verdict(K: sp.Expr, region: Region, z: EntropyState, g: SymbolicGroup, adv: AdvantageForm,
             patterns, assumptions: tuple) -> RegionVerdict:
    label = f"{region.label}; {z.label}" if z.label else region.label
    K_region = resolve(z.apply(K), region.witness)
    A_values = dict(zip(g.A, adv.values()))
    equations: set[sp.Expr] = set()
    for pattern in patterns:
        cell = resolve(K_region, {a: sp.Integer(s) for a, s in zip(g.A, pattern)})
        numer = sp.numer(sp.together(cell.xreplace(A_values)))
        poly = sp.Poly(sp.expand(numer), *g.R)
        equations |= {_without_positive_factors(c) for c in poly.coeffs() if c != 0}
    vanishes, conditions, note = _solve(equations, g, assumptions)
    bK, bsign, bexpr = _binary(K_region, g, adv)
    return RegionVerdict(label, _tidy(K_region), vanishes, conditions, bK, bsign, bexpr, note, region.regime, z.label)


def _without_positive_factors(c: sp.Expr) -> sp.Expr:
    """``c`` with its positive factors (``1/N``, a min over the group's weights) divided
    out: the same zero set, and a smaller system for ``sympy.solve``."""
    kept = [f for f in sp.Mul.make_args(sp.factor_terms(c)) if not (f.is_positive or (f.is_number and f != 0))]
    return sp.Mul(*kept)


_NOT_UNKNOWN = ("G", "N", "sigma", "sigma_B")


def _solve(equations: set, g: SymbolicGroup, assumptions: tuple = ()) -> tuple[str, tuple, str]:
    """``"always"`` / ``"never"`` / ``"iff"`` with the solution families of ``equations = 0``.

    Unknowns are every symbol except the rewards and the positive group constants (so
    lengths, ratios and hyperparameters such as SAPO's temperatures can be solved for);
    positivity assumptions discard degenerate roots such as ``rho = 0``.
    """
    if not equations:
        return "always", (), ""
    candidates = sorted(
        {s for e in equations for s in e.free_symbols if s not in g.R and s.name not in _NOT_UNKNOWN},
        key=lambda s: s.name,
    )
    # Solve for the symbols the equations are rational in (lengths, ratios of clipped
    # objectives); only when there are none, for the transcendental ones (SAPO's gate).
    rational = [s for s in candidates if all(e.is_rational_function(s) for e in equations)]
    unknowns = rational or candidates
    if not unknowns:
        return "never", (), ""
    skipped = sorted({s.name for s in candidates} - {s.name for s in unknowns})
    note = f"solved for {', '.join(s.name for s in unknowns)}; {', '.join(skipped)} taken generic" if skipped else ""
    solutions = sp.solve(sorted(equations, key=sp.default_sort_key), unknowns, dict=True)
    # Drop solutions outside the closed form's domain (HAPO's alpha < phi).
    solutions = [sol for sol in solutions if sol and not any(a.xreplace(sol) == sp.false for a in assumptions)]
    families = tuple(
        tuple(sp.Eq(k, v) for k, v in sorted(sol.items(), key=lambda kv: kv[0].name))
        for sol in solutions
    )
    return ("iff", families, note) if families else ("never", (), note)


def _binary(K_region: sp.Expr, g: SymbolicGroup, adv: AdvantageForm):
    """``K`` at ``R = e_1`` and its sign (positive factors stripped)."""
    e1 = {R: sp.Integer(1 if i == 0 else 0) for i, R in enumerate(g.R)}
    witness_L = {L: sp.Integer(i + 1) for i, L in enumerate(g.L)}
    signs = {a: sp.sign(c.xreplace(e1).xreplace(witness_L)) for a, c in zip(g.A, adv.centred)}
    A_e1 = {a: v.xreplace(e1) for a, v in zip(g.A, adv.values())}
    K = sp.factor(sp.together(resolve(K_region, signs).xreplace(A_e1)))
    return K, *_sign(K)


def _sign(K: sp.Expr) -> tuple[str, sp.Expr]:
    if K == 0:
        return "0", sp.Integer(0)
    num, den = sp.fraction(sp.together(K))
    core, sign = sp.Integer(1), 1
    for f in (*sp.Mul.make_args(sp.factor(num)), *sp.Mul.make_args(sp.factor(den))):
        if f.is_number:
            sign *= 1 if f > 0 else -1
        elif f.is_positive:
            continue
        else:
            core *= f
    core = sign * core
    if core.is_positive:
        return "+", core
    if core.is_negative:
        return "-", core
    return f"sign({core})", core


def _tidy(e: sp.Expr) -> sp.Expr:
    """Readable Piecewise conditions (DNF), nothing else changed."""
    def one(pw):
        return sp.Piecewise(*[(v, sp.simplify_logic(c, form="dnf") if c is not sp.true else c)
                              for v, c in pw.args])
    return e.replace(lambda x: isinstance(x, sp.Piecewise), one) if e.has(sp.Piecewise) else e


def _merge(verdicts: list[RegionVerdict]) -> list[RegionVerdict]:
    """Join regions of one regime whose results coincide (labels joined with ' or ');
    the first (on-policy) verdict stays first and alone."""
    out: list[RegionVerdict] = [verdicts[0]]
    for v in verdicts[1:]:
        for j, w in enumerate(out[1:], start=1):
            if w.regime != v.regime:
                continue
            if (w.vanishes, w.conditions, w.binary_sign) == (v.vanishes, v.conditions, v.binary_sign) and \
                    sp.simplify(w.K - v.K) == 0:
                out[j] = dataclasses.replace(w, region=f"{w.region} or {v.region}")
                break
        else:
            out.append(v)
    return out
