"""The parts an objective is composed of, each with its effect stated once.

A real policy loss is a handful of choices: an advantage estimator, perhaps a reward
shaped by the response, an importance weight, a clip, an aggregation, perhaps an
additive term, perhaps a mask applied after centring, and the precision it runs in.
Each :class:`Part` here is one such choice: its formula (a small function over the
rollout, shapes in its docstring) and the facets it carries per regime
(:data:`exchange.core.vocabulary.FACETS`), so that the expected verdict of any
composition is :func:`exchange.core.vocabulary.verdict_of` of its parts' facets, the
same rule the catalog uses (:mod:`exchange.objectives.composition`).

A part's ``traits`` say what another part may depend on (a filter that drops tied
groups, advantages that are never negative, an additive term whose gradient is the same
on every token); the dependences themselves are stated once, in
:mod:`exchange.objectives.interactions`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.core.vocabulary import REGIMES, Regime

__all__ = ["Part", "PARTS", "KINDS", "TRAITS", "part"]

# The order of a composition's parts, and the kinds that may be absent ("none").
KINDS = ("estimator", "shaping", "weight", "clip", "aggregation", "additive", "mask", "precision")

ON, OFF = Regime.ON_POLICY, Regime.OFF_POLICY

# What a part is, as far as other parts are concerned (exchange.objectives.interactions).
TRAITS = {
    "one_signed": "advantages are never negative",
    "not_zero_sum_on_copies": "identical responses with mixed rewards get advantages that do not sum to 0",
    "own_centre_free": "no centre of the group's own: identical responses keep A_i = R'_i - b",
    "constant_gradient": "an additive term whose gradient is the same constant on every token on-policy",
    "drops_tied_groups": "groups whose verifiable rewards tie are dropped from the loss",
    "drops_truncated": "truncated responses are dropped from the loss after centring",
    "acts_on_truncated_only": "a shaping that changes only the rewards of truncated responses",
}


@dataclass(frozen=True)
class Part:
    """One choice of one kind.

    Fields:
        kind: one of :data:`KINDS`.
        name: unique within its kind (``"loo"``).
        description: one line, with the formula.
        facets: per regime, the facet keys this part carries (absent regime: none).
        fn: the formula; its signature depends on the kind (see
            :mod:`exchange.objectives.composition`).
        params: the part's constants (documented in ``description``).
        traits: what :mod:`exchange.objectives.interactions` reads (:data:`TRAITS`).
    """

    kind: str
    name: str
    description: str
    facets: Mapping[Regime, tuple[str, ...]] = field(default_factory=dict)
    fn: Callable[..., Any] | None = None
    params: Mapping[str, float] = field(default_factory=dict)
    traits: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = set(self.traits) - set(TRAITS)
        if unknown:
            raise ValueError(f"Part {self.kind}={self.name}: unknown traits {sorted(unknown)}; known: {sorted(TRAITS)}")

    def facets_in(self, regime: Regime) -> tuple[str, ...]:
        return tuple(self.facets.get(regime, ()))


def _both(*facets: str) -> dict[Regime, tuple[str, ...]]:
    return {r: facets for r in REGIMES}


def _off(*facets: str) -> dict[Regime, tuple[str, ...]]:
    return {OFF: facets}


# --------------------------------------------------------------------- estimators
# fn(rewards [N], rollout) -> A [N]; never differentiated.
def _centred(r: Tensor, ro: Rollout) -> Tensor:
    return r - ro.group_mean(r)


def _std_scaled(r: Tensor, ro: Rollout) -> Tensor:
    return _centred(r, ro) / (ro.group_std(r) + 1e-4)


def _loo(r: Tensor, ro: Rollout) -> Tensor:
    g = ro.group_sizes.to(r.dtype)
    return g / (g - 1) * _centred(r, ro)


def _loo_std(r: Tensor, ro: Rollout) -> Tensor:
    g = ro.group_sizes.to(r.dtype)
    others_mean = (ro.group_sum(r) - r) / (g - 1)
    others_sq = (ro.group_sum(r * r) - r * r) / (g - 1)
    others_std = torch.sqrt(torch.clamp(others_sq - others_mean ** 2, min=0.0))
    return (r - others_mean) / (others_std + 0.1)


def _batch_baseline(r: Tensor, ro: Rollout) -> Tensor:
    return r - r.mean()


def _greedy_baseline(r: Tensor, ro: Rollout) -> Tensor:
    return r - ro.baseline_rewards.to(r.dtype)


def _length_weighted(r: Tensor, ro: Rollout) -> Tensor:
    L = ro.lengths.to(r.dtype)
    return r - ro.group_sum(L * r) / ro.group_sum(L)


def _positive_only(r: Tensor, ro: Rollout) -> Tensor:
    return torch.clamp(_centred(r, ro), min=0.0)


# ------------------------------------------------------------------------ shaping
# fn(rewards [N], logprobs [N, T] (detached), rollout) -> shaped rewards [N].
def _kl_in_reward(r: Tensor, lp: Tensor, ro: Rollout) -> Tensor:
    m = ro.fmask.to(r.dtype)
    return r - 0.5 * ((ro.old_logprobs.to(r.dtype) - ro.ref_logprobs.to(r.dtype)) * m).sum(1)


def _length_penalty(r: Tensor, lp: Tensor, ro: Rollout) -> Tensor:
    return r - 0.1 * ro.lengths.to(r.dtype)


def _cosine_length(r: Tensor, lp: Tensor, ro: Rollout) -> Tensor:
    return r + torch.cos(math.pi * ro.lengths.to(r.dtype) / 16.0)


def _truncation_to_zero(r: Tensor, lp: Tensor, ro: Rollout) -> Tensor:
    return torch.where(_truncated(ro), torch.zeros_like(r), r)


def _format_bonus(r: Tensor, lp: Tensor, ro: Rollout) -> Tensor:
    has = ((ro.tokens == 3) & ro.mask).any(1)
    return r + 0.5 * has.to(r.dtype)


def _truncated(ro: Rollout) -> Tensor:
    if ro.truncated is None:
        return torch.zeros(ro.n, dtype=torch.bool, device=ro.rewards.device)
    return ro.truncated


# ------------------------------------------------------------------------ weights
# fn(logprobs [N, T], rollout) -> (rho [N, T] differentiable, level): the ratio the clip
# sees; "token" or "sequence" level; cispo/soft-gate carry their own clip.
def _token_ratio(lp: Tensor, ro: Rollout) -> Tensor:
    return torch.exp(lp - ro.old_logprobs.to(lp.dtype))


def _sequence_ratio(lp: Tensor, ro: Rollout, mean: bool) -> Tensor:
    m = ro.fmask.to(lp.dtype)
    log_s = ((lp - ro.old_logprobs.to(lp.dtype)) * m).sum(1)
    if mean:
        log_s = log_s / m.sum(1)
    # GSPO-token's form: the value s_i on every token, the token's own gradient.
    return torch.exp(log_s).detach()[:, None] * torch.exp(lp - lp.detach())


def _sequence_product(lp: Tensor, ro: Rollout) -> Tensor:
    return _sequence_ratio(lp, ro, mean=False)


def _geometric_mean(lp: Tensor, ro: Rollout) -> Tensor:
    return _sequence_ratio(lp, ro, mean=True)


# --------------------------------------------------------------------------- clips
# fn(rho [N, T], A [N, 1], params) -> surrogate [N, T].
def _no_clip(rho: Tensor, adv: Tensor, p: Mapping[str, float]) -> Tensor:
    return rho * adv


def _ppo(rho: Tensor, adv: Tensor, p: Mapping[str, float]) -> Tensor:
    clipped = torch.clamp(rho, 1 - p["eps_low"], 1 + p["eps_high"])
    out = torch.minimum(rho * adv, clipped * adv)
    if "clip_c" in p:
        out = torch.where(adv < 0, torch.maximum(out, p["clip_c"] * adv), out)
    return out


def _cispo(rho: Tensor, adv: Tensor, p: Mapping[str, float]) -> Tensor:
    # CISPO: sg(min(rho, 1 + eps_high)) * log pi; log pi's gradient is rho / rho = 1 here.
    return torch.clamp(rho, max=1 + p["eps_high"]).detach() * torch.log(rho) * adv


def _soft_gate(rho: Tensor, adv: Tensor, p: Mapping[str, float]) -> Tensor:
    tau = torch.where(adv > 0, torch.full_like(adv, p["tau_pos"]), torch.full_like(adv, p["tau_neg"]))
    return 4.0 / tau * torch.sigmoid(tau * (rho - 1)) * adv


# --------------------------------------------------------------------- aggregation
# fn(rollout, dtype) -> per-response weight [N] (the loss sums mask * w_i * term).
def _agg_group_token_mean(ro: Rollout, dtype: torch.dtype) -> Tensor:
    L = ro.lengths.to(dtype)
    return 1.0 / ro.group_sum(L)


def _agg_batch_token_count(ro: Rollout, dtype: torch.dtype) -> Tensor:
    L = ro.lengths.to(dtype)
    return torch.ones_like(L) / L.sum()


def _agg_seq_mean_token_mean(ro: Rollout, dtype: torch.dtype) -> Tensor:
    L = ro.lengths.to(dtype)
    return 1.0 / (ro.n * L)


def _agg_seq_mean_token_sum(ro: Rollout, dtype: torch.dtype) -> Tensor:
    return torch.full((ro.n,), 1.0 / ro.n, dtype=dtype, device=ro.rewards.device)


def _agg_constant(ro: Rollout, dtype: torch.dtype) -> Tensor:
    return torch.full((ro.n,), 1.0 / (ro.n * 64.0), dtype=dtype, device=ro.rewards.device)


MICRO_BATCH_ROWS = 3


def _agg_micro_batch(ro: Rollout, dtype: torch.dtype) -> Tensor:
    """Gradient accumulation over micro-batches of 3 rows in batch order, each a token
    mean: ``w_i = 1 / (n_micro * tokens of i's micro-batch)``."""
    L = ro.lengths.to(dtype)
    chunk = torch.arange(ro.n, device=L.device) // MICRO_BATCH_ROWS
    n_chunks = int(chunk.max()) + 1
    tokens = torch.zeros(n_chunks, dtype=dtype, device=L.device).index_add(0, chunk, L)
    return 1.0 / (n_chunks * tokens[chunk])


# ------------------------------------------------------------------------ additive
# fn(logprobs [N, T], rollout) -> per-token term [N, T] added to the loss with beta.
def _k1_ref(lp: Tensor, ro: Rollout) -> Tensor:
    return lp - ro.ref_logprobs.to(lp.dtype)


def _k2_ref(lp: Tensor, ro: Rollout) -> Tensor:
    return 0.5 * (lp - ro.ref_logprobs.to(lp.dtype)) ** 2


def _k3_ref(lp: Tensor, ro: Rollout) -> Tensor:
    d = ro.ref_logprobs.to(lp.dtype) - lp
    return torch.exp(d) - d - 1


def _k1_behaviour(lp: Tensor, ro: Rollout) -> Tensor:
    return lp - ro.old_logprobs.to(lp.dtype)


def _k3_behaviour(lp: Tensor, ro: Rollout) -> Tensor:
    d = ro.old_logprobs.to(lp.dtype) - lp
    return torch.exp(d) - d - 1


def _entropy_sampled(lp: Tensor, ro: Rollout) -> Tensor:
    return lp  # minus the sampled-token entropy estimate -l: a bonus on it adds +beta*l


def _log_rho_sq(lp: Tensor, ro: Rollout) -> Tensor:
    return (lp - ro.old_logprobs.to(lp.dtype)) ** 2


# ---------------------------------------------------------------------------- masks
# fn(rollout) -> keep [N] bool, applied to every token of the response after centring.
def _keep_untruncated(ro: Rollout) -> Tensor:
    return ~_truncated(ro)


def _keep_mixed_groups(ro: Rollout) -> Tensor:
    r = ro.rewards
    return (ro.group_max(r) - (-ro.group_max(-r))) > 0


_M6 = "M6.event_term"
_CONSTANT = frozenset({"constant_gradient"})
_PARTS: tuple[Part, ...] = (
    Part("estimator", "group_mean", "A = R - mean_g R (Dr. GRPO)", fn=_centred),
    Part("estimator", "group_mean_std", "A = (R - mean_g R) / (std_g R + 1e-4) (GRPO, Bessel std)", fn=_std_scaled),
    Part("estimator", "loo", "A = R - mean_{j != i} R_j (RLOO)", fn=_loo),
    Part("estimator", "loo_std", "A = (R - mean_{-i}) / (std_{-i} + 0.1): a per-response scale, not zero-sum",
         _both("M4.not_zero_sum"), _loo_std, traits=frozenset({"not_zero_sum_on_copies"})),
    Part("estimator", "batch_baseline", "A = R - mean over the batch (REINFORCE++ without whitening)",
         _both("M4.foreign_centre"), _batch_baseline, traits=frozenset({"not_zero_sum_on_copies"})),
    Part("estimator", "greedy_baseline", "A = R - R_greedy (ReMax)", _both("M4.foreign_centre"), _greedy_baseline,
         traits=frozenset({"not_zero_sum_on_copies", "own_centre_free"})),
    Part("estimator", "length_weighted", "A = R - sum_j L_j R_j / sum_j L_j (OPO)",
         _both("M4.length_weighted"), _length_weighted),
    Part("estimator", "positive_only", "A = max(R - mean_g R, 0)", _both("M4.not_zero_sum"), _positive_only,
         traits=frozenset({"one_signed", "not_zero_sum_on_copies"})),
    Part("shaping", "none", "the verifiable reward as given"),
    Part("shaping", "kl_in_reward", "R - 0.5 sum_t (l_old - l_ref) before centring", _both("M7.shaping"), _kl_in_reward),
    Part("shaping", "length_penalty", "R - 0.1 L_i before centring", _both("M7.shaping"), _length_penalty),
    Part("shaping", "cosine_length", "R + cos(pi L_i / 16) before centring", _both("M7.shaping"), _cosine_length),
    Part("shaping", "truncation_to_zero", "R = 0 for a truncated response, before centring",
         _both("M7.shaping"), _truncation_to_zero, traits=frozenset({"acts_on_truncated_only"})),
    Part("shaping", "format_bonus", "R + 0.5 if the response holds token 3, before centring",
         _both("M7.shaping"), _format_bonus),
    Part("weight", "token", "rho = exp(l - l_old) per token", fn=_token_ratio),
    Part("weight", "sequence_product", "s_i = exp(sum_t (l - l_old)) as a per-response weight (GSPO-token form)",
         _off("M1.sequence_weight"), _sequence_product),
    Part("weight", "geometric_mean", "s_i = exp(mean_t (l - l_old)) as a per-response weight (GSPO-token form)",
         _off("M1.sequence_weight"), _geometric_mean),
    Part("clip", "none", "S = rho A", fn=_no_clip),
    Part("clip", "symmetric", "PPO clip, eps 0.2/0.2", _off("M2.sign_clip"), _ppo, {"eps_low": 0.2, "eps_high": 0.2}),
    Part("clip", "clip_higher", "PPO clip, eps 0.2/0.28 (DAPO)", _off("M2.sign_clip"), _ppo,
         {"eps_low": 0.2, "eps_high": 0.28}),
    Part("clip", "dual_clip", "PPO clip 0.2/0.28 with the dual clip c = 1.8 for A < 0", _off("M2.sign_clip"), _ppo,
         {"eps_low": 0.2, "eps_high": 0.28, "clip_c": 1.8}),
    Part("clip", "cispo", "sg(min(rho, 1.28)) A log pi: a sign-free truncated weight (CISPO)", fn=_cispo,
         params={"eps_high": 0.28}),
    Part("clip", "soft_gate", "4/tau sigmoid(tau (rho - 1)) A, tau 1.0 for A > 0 and 1.5 otherwise (SAPO-style)",
         _off("M2.sign_clip"), _soft_gate, {"tau_pos": 1.0, "tau_neg": 1.5}),
    Part("aggregation", "group_token_mean", "1 / (tokens of the group)", fn=_agg_group_token_mean),
    Part("aggregation", "batch_token_count", "1 / (tokens of the batch) (DAPO token-mean)", fn=_agg_batch_token_count),
    Part("aggregation", "seq_mean_token_mean", "1 / (B L_i) (GRPO)", _both("M3.response_norm"),
         _agg_seq_mean_token_mean),
    Part("aggregation", "seq_mean_token_sum", "1 / B", fn=_agg_seq_mean_token_sum),
    Part("aggregation", "constant", "1 / (B * 64) (Dr. GRPO's max-length constant)", fn=_agg_constant),
    Part("aggregation", "micro_batch_token_count",
         f"token mean per micro-batch of {MICRO_BATCH_ROWS} rows, averaged over micro-batches",
         _both("M3.micro_batch_norm"), _agg_micro_batch),
    Part("additive", "none", "no additive term"),
    Part("additive", "k1_ref", "beta (l - l_ref)", _both(_M6), _k1_ref, traits=_CONSTANT),
    Part("additive", "k2_ref", "beta (l - l_ref)^2 / 2", _both(_M6), _k2_ref),
    Part("additive", "k3_ref", "beta (exp(l_ref - l) - (l_ref - l) - 1)", _both(_M6), _k3_ref),
    Part("additive", "k1_behaviour", "beta (l - l_old)", _both(_M6), _k1_behaviour, traits=_CONSTANT),
    Part("additive", "k3_behaviour", "beta k3(l_old, l): zero gradient on-policy", _off(_M6), _k3_behaviour),
    Part("additive", "entropy_sampled", "an entropy bonus on the sampled tokens, -beta (-l)", _both(_M6),
         _entropy_sampled, traits=_CONSTANT),
    Part("additive", "log_rho_sq", "beta (log rho)^2: zero gradient on-policy", _off(_M6), _log_rho_sq),
    Part("mask", "none", "every token in the loss"),
    Part("mask", "truncation_after_centring", "truncated responses dropped after centring "
         "(TRL mask_truncated_completions, overlong filters)", _both("M4.mask_after_centring"), _keep_untruncated,
         traits=frozenset({"drops_truncated"})),
    Part("mask", "zero_std_filter", "groups whose verifiable rewards tie dropped (DAPO dynamic sampling)",
         fn=_keep_mixed_groups, traits=frozenset({"drops_tied_groups"})),
    Part("precision", "float64", "every intermediate in float64", params={"dtype": 0}),
    Part("precision", "float32", "every intermediate in float32", params={"dtype": 1}),
    Part("precision", "bf16", "every intermediate in bfloat16", params={"dtype": 2}),
)

PARTS: dict[str, dict[str, Part]] = {k: {p.name: p for p in _PARTS if p.kind == k} for k in KINDS}


def part(kind: str, name: str) -> Part:
    """The part ``name`` of ``kind``; unknown names raise ``KeyError`` listing the known."""
    if kind not in PARTS:
        raise KeyError(f"no part kind {kind!r}; kinds: {', '.join(KINDS)}")
    if name not in PARTS[kind]:
        raise KeyError(f"no {kind} {name!r}; known: {', '.join(PARTS[kind])}")
    return PARTS[kind][name]
