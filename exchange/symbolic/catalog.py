"""Closed-form specs of the built-in objectives, one surrogate each, and the registry.

Each ``_name`` function writes the group surrogate ``J`` once, with the same building
blocks as the torch loss in ``exchange/objectives/<family>.py``. Objectives without a
closed form are listed in ``NO_CLOSED_FORM`` with the reason.
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
from exchange.symbolic.group import SymbolicGroup
from exchange.symbolic.spec import SymbolicSpec
from exchange.symbolic.surrogates import aggregate, clip, ppo_clip, sapo_gate

__all__ = ["SPECS", "NO_CLOSED_FORM", "NoClosedForm", "get_spec", "spec_names"]

_EPS = ("eps_low", "eps_high")


class NoClosedForm(InvalidArgument):
    """The objective exists but has no closed-form coefficient (the message says why)."""


def _token_clip_sums(g: SymbolicGroup, P: Mapping[str, sp.Symbol]) -> list[sp.Expr]:
    """Per-response token sums ``min(r A, clip(r) A) + X_i`` (designated token + the rest)."""
    return [ppo_clip(g.token_ratio(i), g.A[i], P["eps_low"], P["eps_high"]) + g.X[i] for i in range(g.G)]


def _grpo(g, P, opts):
    return aggregate(_token_clip_sums(g, P), g.L, opts["loss_agg_mode"], G=g.Gn, N=g.N)


def _dr_grpo(g, P, opts):
    return aggregate(_token_clip_sums(g, P), g.L, "seq-mean-token-sum-norm", G=g.Gn, N=g.N,
                     max_length=P["max_length"])


def _dapo(g, P, opts):
    return aggregate(_token_clip_sums(g, P), g.L, "token-mean", G=g.Gn, N=g.N)


def _gspo(g, P, opts):
    terms = [ppo_clip(g.seq_ratio(i), g.A[i], P["eps_low"], P["eps_high"]) for i in range(g.G)]
    return sp.Add(*terms) / g.Gn


def _cispo(g, P, opts):
    sums = [g.sg(clip(g.token_ratio(i), P.get("eps_low"), P["eps_high"])) * g.A[i] * g.l[i] + g.X[i]
            for i in range(g.G)]
    return aggregate(sums, g.L, "token-mean", G=g.Gn, N=g.N)


def _rloo(g, P, opts):
    # X_i: the other tokens' log-probs; the sequence log-prob is l_i + X_i.
    return sp.Add(*[g.A[i] * (g.l[i] + g.X[i]) for i in range(g.G)]) / g.Gn


def _reinforce_pp(g, P, opts):
    return aggregate(_token_clip_sums(g, P), g.L, "token-mean", G=g.Gn, N=g.N)


def _gspo_token(g, P, opts):
    # s_{i,t} = sg(s_i) exp(l - sg(l)): value s_i, gradient s_i per token (TRL PR 3820).
    sums = [ppo_clip(g.sg(g.seq_ratio(i)) * sp.exp(g.l[i] - g.sg(g.l[i])), g.A[i], P["eps_low"], P["eps_high"])
            + g.X[i] for i in range(g.G)]
    return aggregate(sums, g.L, "seq-mean-token-mean", G=g.Gn, N=g.N)


def _sapo(mode: str | None):
    def surrogate(g, P, opts):
        sums = [sapo_gate(g.token_ratio(i), g.A[i], P["tau_pos"], P["tau_neg"]) + g.X[i] for i in range(g.G)]
        return aggregate(sums, g.L, mode or opts["loss_agg_mode"], G=g.Gn, N=g.N)

    return surrogate


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


SPECS: dict[str, SymbolicSpec] = {
    s.name: s
    for s in (
        SymbolicSpec("grpo", _grpo, lambda g, o: group_advantages(g, o["scale"]), _EPS),
        SymbolicSpec("dr_grpo", _dr_grpo, lambda g, o: group_advantages(g, "none"), _EPS + ("max_length",)),
        SymbolicSpec("dapo", _dapo, lambda g, o: group_advantages(g), _EPS),
        SymbolicSpec("gspo", _gspo, lambda g, o: group_advantages(g), _EPS),
        SymbolicSpec("cispo", _cispo, lambda g, o: group_advantages(g), _EPS,
                     notes="eps_low=None (default) is MiniMax's one-sided cap min(r, 1+eps_high)."),
        SymbolicSpec("rloo", _rloo, lambda g, o: rloo_advantages(g)),
        SymbolicSpec("reinforce_pp", _reinforce_pp, lambda g, o: batch_whitened_advantages(g), _EPS,
                     notes="The batch is the one group: token-weighted mean/std over its responses."),
        # Catalog additions (issue 3); specs whose objective is not in the catalog are skipped
        # by the agreement tests and rejected by get_spec.
        SymbolicSpec("bnpo", _dapo, lambda g, o: group_advantages(g), _EPS),
        SymbolicSpec("gspo_token", _gspo_token, lambda g, o: group_advantages(g), _EPS),
        SymbolicSpec("cispo_verl", _cispo, lambda g, o: group_advantages(g), _EPS),
        SymbolicSpec("sapo", _sapo(None), lambda g, o: group_advantages(g), ("tau_pos", "tau_neg")),
        SymbolicSpec("sapo_verl", _sapo("seq-mean-token-mean"), lambda g, o: group_advantages(g),
                     ("tau_pos", "tau_neg")),
        SymbolicSpec("gpg", _gpg, lambda g, o: gpg_advantages(g),
                     notes="alpha = G / max(1, #nonzero rewards) with the batch = the group."),
        SymbolicSpec("remax", _remax, lambda g, o: baseline_advantages(g, o["baseline"]),
                     notes="b is the baseline parameter (rollout.baseline_rewards, when set, is per response)."),
        SymbolicSpec("ppo", _ppo, lambda g, o: group_advantages(g), _EPS + ("clip_c",)),
    )
}

# Restoring transformations (T5) of grpo, dapo and gspo, as in the catalog's VARIANTS.
_VARIANTS = [
    ("grpo", ("group_constant_norm",)), ("grpo", ("min_replace",)), ("grpo", ("adv_orthogonal",)),
    ("grpo", ("sign_free_clip",)), ("grpo", ("group_constant_norm", "sign_free_clip")),
    ("dapo", ("sign_free_clip",)), ("dapo", ("group_constant_norm",)), ("dapo", ("min_replace",)),
    ("dapo", ("adv_orthogonal",)), ("gspo", ("min_replace",)), ("gspo", ("adv_orthogonal",)),
    ("gspo", ("group_constant_norm",)), ("gspo", ("sign_free_clip",)),
    ("gspo", ("group_constant_norm", "sign_free_clip")), ("grpo", ("min_replace", "sign_free_clip")),
]


def _variant_specs() -> list[SymbolicSpec]:
    from exchange.symbolic.transforms import variant_surrogate

    return [SymbolicSpec("+".join((base, *ts)), variant_surrogate(base, ts), lambda g, o: group_advantages(g), _EPS)
            for base, ts in _VARIANTS]


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
    from exchange.objectives import get

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
    from exchange.objectives import get

    return get(name).params(**overrides)
