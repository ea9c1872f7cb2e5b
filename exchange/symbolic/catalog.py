"""Closed-form specs of the built-in objectives, one surrogate each, and the registry.

Each ``_name`` function writes the group surrogate ``J`` once, with the same building
blocks as the torch loss in ``exchange/objectives/<family>.py``; families in factored form
(``transforms.BASES``) are written there once and give both the plain family and every
catalog variant. Objectives without a closed form are listed in ``NO_CLOSED_FORM`` with
the reason.
"""

from __future__ import annotations

from typing import Any, Mapping

import sympy as sp

from exchange.errors import InvalidArgument
from exchange.symbolic.advantages import (
    baseline_advantages,
    batch_whitened_advantages,
    gpg_advantages,
    group_advantages,
    rloo_advantages,
)
from exchange.symbolic.cells import TrustRegion
from exchange.symbolic.group import SymbolicGroup
from exchange.symbolic.spec import SymbolicSpec
from exchange.symbolic.surrogates import aggregate, ppo_clip, ppo_clip_bounds, ppo_clip_signed
from exchange.objectives import VARIANTS, get
from exchange.symbolic.transforms import BASES, variant_surrogate

__all__ = ["SPECS", "NO_CLOSED_FORM", "NoClosedForm", "get_spec", "spec_names"]

_EPS = ("eps_low", "eps_high")


class NoClosedForm(InvalidArgument):
    """The objective exists but has no closed-form coefficient (the message says why)."""


def _token_clip_sums(g: SymbolicGroup, P: Mapping[str, sp.Symbol]) -> list[sp.Expr]:
    """Per-response token sums ``min(r A, clip(r) A) + X_i`` (designated token + the rest)."""
    return [ppo_clip(g.token_ratio(i), g.A[i], P["eps_low"], P["eps_high"]) + g.X[i] for i in range(g.G)]


def _dr_grpo(g, P, opts):
    return aggregate(_token_clip_sums(g, P), g.L, "seq-mean-token-sum-norm", G=g.Gn, N=g.N,
                     max_length=P["max_length"])


def _token_mean_clip(g, P, opts):
    return aggregate(_token_clip_sums(g, P), g.L, "token-mean", G=g.Gn, N=g.N)


def _rloo(g, P, opts):
    # X_i: the other tokens' log-probs; the sequence log-prob is l_i + X_i.
    return sp.Add(*[g.A[i] * (g.l[i] + g.X[i]) for i in range(g.G)]) / g.Gn


def _unit_ratio(g: SymbolicGroup, i: int) -> sp.Expr:
    """``exp(l - sg(l))``: value 1, gradient 1 (REINFORCE without IS)."""
    return sp.exp(g.l[i] - g.sg(g.l[i]))


def _gpg(g, P, opts):
    return aggregate([g.A[i] * _unit_ratio(g, i) + g.X[i] for i in range(g.G)], g.L, "token-mean", G=g.Gn, N=g.N)


def _remax(g, P, opts):
    return aggregate([g.A[i] * _unit_ratio(g, i) + g.X[i] for i in range(g.G)], g.L, "seq-mean-token-sum",
                     G=g.Gn, N=g.N)


def _ppo(g, P, opts):
    sums = [ppo_clip(g.token_ratio(i), g.A[i], P["eps_low"], P["eps_high"], P["clip_c"]) + g.X[i]
            for i in range(g.G)]
    return aggregate(sums, g.L, "token-mean", G=g.Gn, N=g.N)


def dcpo_bounds(q: sp.Expr, P: Mapping[str, sp.Symbol]) -> tuple[sp.Expr, sp.Expr]:
    """DCPO's trust region for a token of behaviour probability ``q`` (arXiv:2509.02333):
    ``low = 1/2 + 1/2 sqrt(max(1 - 4 eps_low/q, 0))``,
    ``high = min(1/2 + 1/2 sqrt(1 + 4 eps_high/q), max(c, 10))``."""
    half = sp.Rational(1, 2)
    low = half + half * sp.sqrt(sp.Max(1 - 4 * P["eps_low"] / q, 0))
    high = sp.Min(half + half * sp.sqrt(1 + 4 * P["eps_high"] / q), sp.Max(P["clip_c"], 10))
    return low, high


def _dcpo(g, P, opts):
    sums = [ppo_clip_bounds(g.token_ratio(i), g.A[i], *dcpo_bounds(g.q[i], P), P["clip_c"]) + g.X[i]
            for i in range(g.G)]
    return aggregate(sums, g.L, "token-sum", G=g.Gn, N=g.N)


def _dcpo_trust_region(g, P):
    # Witness q = 1/2: low(1/2) = 1/2 and high(1/2) = 1.4 at the defaults, both strictly
    # inside (0, c), so every region is non-empty (high(q) reaches c only for q < ~0.003).
    half = sp.Rational(1, 2)
    return TrustRegion(*dcpo_bounds(g.q_event, P), "low(q)", "high(q)", {q: half for q in (g.q_event, *g.q)})


def _dcpo_display(g, P):
    # Every q symbol that can appear in a printed coefficient, the generic q_it included.
    out = {}
    for q in (*g.q, g.q_event, sp.Symbol("q_it", positive=True)):
        low, high = dcpo_bounds(q, P)
        out |= {low: sp.Function("low")(q), high: sp.Function("high")(q)}
    return out


def hapo_advantage(A: sp.Expr, z: sp.Expr, P: Mapping[str, sp.Symbol], sign: int) -> sp.Expr:
    """HAPO's ``A + alpha sign(A) clip(z, -|A|/phi, |A|/phi)`` (arXiv:2604.11056) for
    advantages of sign ``sign`` (+1 or -1), where ``|A| = sign A``."""
    bound = sign * A / P["phi"]
    clipped_z = sp.Piecewise((bound, z > bound), (-bound, z < -bound), (z, True))
    return A + sign * P["alpha"] * clipped_z


def _hapo(g, P, opts):
    if not opts["alpha"] < opts["phi"]:
        raise InvalidArgument(
            f"alpha={opts['alpha']}, phi={opts['phi']}: with alpha >= phi the entropy shift can flip the "
            "advantage's sign, and the closed form assumes it does not; use alpha < phi."
        )
    # alpha < phi keeps sign(A_ca) = sign(A), so the clip side is chosen by A's sign.
    el, eh = P["eps_low"], P["eps_high"]
    sums = []
    for i in range(g.G):
        r, A = g.token_ratio(i), g.A[i]
        pos, neg = hapo_advantage(A, g.z[i], P, 1), hapo_advantage(A, g.z[i], P, -1)
        S = sp.Piecewise((ppo_clip_signed(r, pos, 1 - el, 1 + eh, 1), A > 0),
                         (ppo_clip_signed(r, neg, 1 - el, 1 + eh, -1), A < 0), (0, True))
        sums.append(S + g.X[i])
    return aggregate(sums, g.L, opts["loss_agg_mode"], G=g.Gn, N=g.N)


def _factored(name: str, transforms: tuple[str, ...] = ()):
    """The surrogate of a factored family (``transforms.BASES``), possibly transformed."""
    return variant_surrogate(name, transforms)


SPECS: dict[str, SymbolicSpec] = {
    s.name: s
    for s in (
        SymbolicSpec("grpo", _factored("grpo"), lambda g, o: group_advantages(g, o["scale"]), _EPS),
        SymbolicSpec("dr_grpo", _dr_grpo, lambda g, o: group_advantages(g, "none"), _EPS + ("max_length",)),
        SymbolicSpec("dapo", _factored("dapo"), lambda g, o: group_advantages(g), _EPS),
        SymbolicSpec("gspo", _factored("gspo"), lambda g, o: group_advantages(g), _EPS),
        SymbolicSpec("cispo", _factored("cispo"), lambda g, o: group_advantages(g), _EPS,
                     notes="eps_low=None (default) is MiniMax's one-sided cap min(r, 1+eps_high)."),
        SymbolicSpec("rloo", _rloo, lambda g, o: rloo_advantages(g)),
        SymbolicSpec("reinforce_pp", _token_mean_clip, lambda g, o: batch_whitened_advantages(g), _EPS,
                     notes="The batch is the one group: token-weighted mean/std over its responses."),
        # Catalog additions (issue 3); specs whose objective is not in the catalog are skipped
        # by the agreement tests and rejected by get_spec.
        SymbolicSpec("bnpo", _token_mean_clip, lambda g, o: group_advantages(g), _EPS),
        SymbolicSpec("gspo_token", _factored("gspo_token"), lambda g, o: group_advantages(g), _EPS),
        SymbolicSpec("cispo_verl", _factored("cispo"), lambda g, o: group_advantages(g), _EPS),
        SymbolicSpec("sapo", _factored("sapo"), lambda g, o: group_advantages(g), ("tau_pos", "tau_neg")),
        SymbolicSpec("sapo_verl", _factored("sapo_verl"), lambda g, o: group_advantages(g),
                     ("tau_pos", "tau_neg")),
        SymbolicSpec("gpg", _gpg, lambda g, o: gpg_advantages(g),
                     notes="alpha = G / max(1, #nonzero rewards) with the batch = the group."),
        SymbolicSpec("remax", _remax, lambda g, o: baseline_advantages(g, o["baseline"]),
                     notes="b is the baseline parameter (rollout.baseline_rewards, when set, is per response)."),
        SymbolicSpec("ppo", _ppo, lambda g, o: group_advantages(g), _EPS + ("clip_c",)),
        SymbolicSpec("dcpo", _dcpo, lambda g, o: group_advantages(g), _EPS + ("clip_c",),
                     notes="q = pi_old of the token; low(q) = 1/2 + 1/2 sqrt(max(1 - 4 epsilon_low/q, 0)), "
                     "high(q) = min(1/2 + 1/2 sqrt(1 + 4 epsilon_high/q), max(c, 10)); regions are cut at "
                     "q = 1/2. Smooth Advantage Standardisation at the prompt's first visit (= the group "
                     "z-score), as the catalog.",
                     trust_region=_dcpo_trust_region, display=_dcpo_display),
        SymbolicSpec("hapo", _hapo, lambda g, o: group_advantages(g), _EPS + ("alpha", "phi"),
                     notes="z_i: the token's entropy standardised over its response (z_scope='response': "
                     "population std + 1e-6, so copies of one event differ) or over the batch "
                     "(z_scope='batch': one z per event). Only homogeneous z regions are cut.",
                     entropy_event_level=lambda o: o["z_scope"] == "batch",
                     assumptions=lambda P: (P["alpha"] < P["phi"],)),
    )
}

# Restoring transformations (T5): every catalog variant of a factored base in transforms.BASES.
def _variant_specs() -> list[SymbolicSpec]:
    out = []
    for name in VARIANTS:
        base, *ts = name.split("+")
        if base not in BASES:  # a new catalog base: get_spec says "no symbolic spec yet"
            continue
        spec = SPECS[base]  # the variant keeps its base's advantages and hyperparameters
        out.append(SymbolicSpec(name, _factored(base, tuple(ts)), spec.advantages, spec.symbolic_params))
    return out


SPECS.update({s.name: s for s in _variant_specs()})

# Objectives whose coefficient has no closed form in the group's symbols.
NO_CLOSED_FORM: dict[str, str] = {
    "clip_cov": "Clip-Cov zeroes a *random* subset of tokens chosen by their batch covariance "
    "rank; the coefficient is a random variable, not a formula of the group's symbols.",
    "kl_cov": "KL-Cov penalises the top-k tokens of the batch by covariance: the mask is a batch "
    "quantile (an order statistic over all tokens), not a closed form of one group.",
    "entropy_8020": "the gradient mask keeps tokens above the batch's entropy quantile (an order "
    "statistic over every token of the batch), not a closed form of one group's symbols.",
}


def _in_catalog(name: str) -> bool:
    try:
        get(name)
    except InvalidArgument:
        return False
    return True


def spec_names() -> list[str]:
    """Derivable objectives: the specs whose objective (or variant) the catalog builds."""
    return [n for n in SPECS if _in_catalog(n)]


def get_spec(name: str) -> SymbolicSpec:
    """The closed-form spec of ``name``; :class:`NoClosedForm` with the reason when none exists."""
    derivable = ", ".join(spec_names())
    if name in SPECS and _in_catalog(name):
        return SPECS[name]
    if name in NO_CLOSED_FORM:
        raise NoClosedForm(f"objective={name!r} has no closed form: {NO_CLOSED_FORM[name]}")
    if _in_catalog(name):
        raise NoClosedForm(
            f"objective={name!r} is in the catalog but has no symbolic spec yet; derivable: {derivable}."
        )
    raise InvalidArgument(f"objective={name!r} is not a built-in; derivable: {derivable}.")


def options(name: str, **overrides: Any) -> dict[str, Any]:
    """The catalog defaults of ``name`` with ``overrides`` (validated by the catalog)."""
    return get(name).params(**overrides)
