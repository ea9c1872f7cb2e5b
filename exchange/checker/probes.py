"""Targeted probes: small hand-built groups that find breaks fast and name the mechanism.

Each probe isolates one mechanism of THEORY.md section 4 by changing one thing only:

| probe | changes | property | mechanism |
|---|---|---|---|
| identical_responses | nothing: G copies of a response, two groups on different reward scales | zero_sum | M4 |
| tied_group | one group with equal rewards next to a mixed one | null_on_equal_rewards | M4 |
| suffix_length | one response's suffix length, on-policy, constant entropy | exchangeable (per-response rescaling) | M3 |
| suffix_entropy | one response's suffix entropies, on-policy, equal lengths | exchangeable | M5 |
| suffix_ratio | one response's suffix ratios (1.0 -> 1.1, inside every usual clip range) | exchangeable | M1 |
| shared_ratio_high/low | one shared event's ratio to 2.0 / 0.25 (outside the clip range) | exchangeable | M2 or M6 |
| unequal_lengths | one group, unequal lengths, on-policy, no mutation | zero_sum | M4 |

The shared-ratio probes name M2 only when the moved event's occurrences split by the
sign of their response's advantage; a shift common to every occurrence is M6 (an
additive event term, THEORY.md section 4 attribution rules). The split is read on a
second group whose advantages take four distinct values, so that a common shift and a
sign split cannot look alike. ``unequal_lengths`` names M4 only when the shared
column is an affine function of the rewards (equal rewards, equal coefficients) with a
non-zero sum: a baseline that is not the group mean (OPO's length-weighted baseline),
not a per-response 1/L_i (M3). A probe whose coefficients are not finite names no
mechanism: ``finite`` is broken, and nothing else can be read from it.

Probes that need ratios != 1 run only in the off-policy regime. Every probe also checks
shared-event cancellation (C) on the rollouts it builds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from exchange.checker.cases import Case, GroupConfig, common_prefix
from exchange.core.coefficients import Engine
from exchange.core.events import events
from exchange.core.vocabulary import Regime
from exchange.checker.mutations import Mutation
from exchange.checker.properties import (
    RTOL_CANCEL,
    RTOL_DIRECTION,
    RTOL_EQUAL,
    Evaluation,
    _eval_null,
    _eval_zero_sum,
    build_pair,
    cancellation,
    exchangeability,
)

__all__ = ["Probe", "ProbeResult", "PROBES", "run_probes"]

_SIGNATURE_RTOL = 1e-6


@dataclass(frozen=True)
class Probe:
    name: str
    description: str
    property_name: str  # the property whose failure points to ``mechanism``
    mechanism: str
    case: Case
    mutation: Mutation | None = None
    off_policy_only: bool = False


@dataclass
class ProbeResult:
    probe: Probe
    evaluations: dict[str, Evaluation] = field(default_factory=dict)  # property -> evaluation
    mechanism_found: bool = False
    attributed: str = ""  # the mechanism named, when it differs from ``probe.mechanism`` (M6)

    @property
    def mechanism(self) -> str:
        return self.attributed or self.probe.mechanism


_EQUAL_LENGTHS = GroupConfig(
    responses=((1, 2, 0, 1), (1, 2, 1, 3), (1, 2, 3, 0), (1, 2, 2, 2)),
    rewards=(1.0, 0.0, 0.0, 1.0),
)
_UNEQUAL_LENGTHS = GroupConfig(
    responses=((1, 2, 3), (1, 2, 0, 1, 3), (1, 2, 3, 3), (1, 2, 2, 0, 1, 2)),
    rewards=(1.0, 0.0, 0.0, 1.0),
)
# Four distinct advantages, two of each sign: (0.125, -0.875, -0.375, 1.125).
_SIGN_SPLIT_REWARDS = (1.0, 0.0, 0.5, 2.0)

# The moved shared event is a common token (behaviour prob 0.5), so even trust regions
# that widen for rare tokens (DCPO: r(r-1) <= eps/q) exclude ratios 2.0 and 0.25.
# Every entropy is 1 so that entropy-driven weights (M5) cannot masquerade as M1/M2.
_COMMON_EVENT = Case(groups=(_EQUAL_LENGTHS,), old_prob=(((0, 1, 2), 0.5),), entropy_all=1.0)

PROBES: tuple[Probe, ...] = (
    Probe(
        "identical_responses",
        "G identical responses with different rewards, two groups on different reward scales, on-policy",
        "zero_sum",
        "M4",
        # Length 4 with set, varied entropies (0.5, 2.0, 0.1, 1.3: within-response
        # z-scores -0.65, 1.40, -1.19, 0.44): an entropy reallocation clipped to |A_i|/phi
        # (HAPO) cancels when every copy is clipped or none is; with the z-scored rewards
        # (1, 0, 0), A = (1.15, -0.58, -0.58) and the bounds are 0.58 and 0.29, so z = 0.44
        # is clipped for one sign only and its non-zero sum shows, whatever the event-key
        # hash picks elsewhere.
        Case(groups=(GroupConfig(((1, 2, 3, 0),) * 3, (1.0, 0.0, 0.0)), GroupConfig(((1, 3, 2, 2),) * 2, (5.0, 3.0))),
             entropy=(((0, 1), 0.5), ((0, 1, 2), 2.0), ((0, 1, 2, 3), 0.1), ((0, 1, 2, 3, 0), 1.3))),
    ),
    Probe(
        "tied_group",
        "one group with all rewards equal beside a mixed group, on-policy",
        "null_on_equal_rewards",
        "M4",
        Case(groups=(GroupConfig(((1, 2), (1, 3)), (1.0, 1.0)), GroupConfig(((1, 2), (2, 2)), (1.0, 0.0)))),
    ),
    Probe(
        "suffix_length",
        "shared prefix, one response's suffix made longer, on-policy, every entropy equal",
        "exchangeable",
        "M3",
        Case(groups=(_UNEQUAL_LENGTHS,), entropy_all=1.0),
        Mutation("length", 0, 0, 7),
    ),
    Probe(
        "suffix_entropy",
        "shared prefix, equal lengths, every entropy 1 then one response's suffix entropies 3, on-policy",
        "exchangeable",
        "M5",
        Case(groups=(_EQUAL_LENGTHS,), entropy_all=1.0),
        Mutation("entropy", 0, 0, 3.0),
    ),
    Probe(
        "suffix_ratio",
        "shared prefix at ratio 1, one response's suffix ratios 1.0 -> 1.1, every entropy 1",
        "exchangeable",
        "M1",
        Case(groups=(_EQUAL_LENGTHS,), entropy_all=1.0),
        Mutation("ratio", 0, 0, 1.1),
        off_policy_only=True,
    ),
    Probe(
        "shared_ratio_high",
        "a shared event (behaviour prob 0.5) moved to ratio 2.0, above any usual trust region",
        "exchangeable",
        "M2",
        _COMMON_EVENT,
        Mutation("shared_ratio", 0, 0, 2.0, position=1),
        off_policy_only=True,
    ),
    Probe(
        "shared_ratio_low",
        "a shared event (behaviour prob 0.5) moved to ratio 0.25, below any usual trust region",
        "exchangeable",
        "M2",
        _COMMON_EVENT,
        Mutation("shared_ratio", 0, 0, 0.25, position=1),
        off_policy_only=True,
    ),
    Probe(
        "unequal_lengths",
        "one group with a shared prefix and unequal lengths, on-policy, every entropy equal",
        "zero_sum",
        "M4",
        # Rewards chosen so that the length-weighted mean (1/6) is not the mean (1/4).
        Case(groups=(GroupConfig(_UNEQUAL_LENGTHS.responses, (1.0, 0.0, 0.0, 0.0)),), entropy_all=1.0),
    ),
)


def _per_response_rescaling(alpha: Tensor, alpha_v: Tensor, mutated: int) -> bool:
    """M3 signature: every other response's coefficient rescales by one common factor,
    and the mutated response's by a different one (a per-response weight such as 1/L_i)."""
    scale = float(alpha.abs().max())
    ok = alpha.abs() > 1e-9 * scale
    if not bool(ok[mutated]) or int(ok.sum()) < 3:
        return False
    q = alpha_v / torch.where(ok, alpha, torch.ones_like(alpha))
    others = [float(q[i]) for i in range(len(q)) if i != mutated and bool(ok[i])]
    ref = others[0]
    same = all(abs(x - ref) <= _SIGNATURE_RTOL * abs(ref) for x in others)
    return same and abs(float(q[mutated]) - ref) > _SIGNATURE_RTOL * abs(ref)


def _affine_in_rewards(rollout, kappa: Tensor, case: Case) -> bool:
    """Every shared column gives equal coefficients to responses with equal rewards."""
    p = common_prefix(case.groups[0].responses)
    rows = (rollout.group == 0).nonzero().flatten()
    rewards = rollout.rewards[rows]
    if p == 0:
        return False
    for t in range(p):
        col = kappa[rows, t]
        scale = float(col.abs().max()) + 1e-300
        for r in rewards.unique():
            same = col[rewards == r]
            if float(same.max() - same.min()) > _SIGNATURE_RTOL * scale:
                return False
    return True


def _common_shift(engine: Engine, probe: Probe) -> bool:
    """M6 rather than M2: on a group with four distinct advantages, the moved event's
    variant coefficients are ``c * base + d`` with one ``c`` and one ``d`` for every
    occurrence (a shift common to all occurrences), not a scaling split by sign."""
    from dataclasses import replace

    grp = probe.case.groups[0]
    case = replace(probe.case, off_policy=False, groups=(GroupConfig(grp.responses, _SIGN_SPLIT_REWARDS),))
    variant_case = probe.mutation.apply(case)
    base, variant = build_pair(case, variant_case)
    kappa, kappa_v = engine([base, variant])
    shared = case.shared_keys(0)
    t = min(probe.mutation.position, len(shared) - 1)
    b, v = kappa[:, t], kappa_v[:, t]
    if not (bool(torch.isfinite(b).all()) and bool(torch.isfinite(v).all())):
        return False
    design = torch.stack([b, torch.ones_like(b)], dim=1)
    coef = torch.linalg.lstsq(design, v[:, None]).solution.flatten()
    fit = design @ coef
    scale = float(v.abs().max()) + 1e-300
    exact = float((fit - v).abs().max()) <= 1e-6 * scale
    return exact and abs(float(coef[1])) > 1e-6 * scale


def _run_probe(engine: Engine, probe: Probe) -> ProbeResult:
    from dataclasses import replace

    result = ProbeResult(probe)
    case = replace(probe.case, off_policy=False)  # probes set their ratios explicitly
    if probe.mutation is None:
        evaluate = _eval_zero_sum if probe.property_name == "zero_sum" else _eval_null
        ev = evaluate(engine, case, Regime.ON_POLICY)
        broke = ev.residual > (RTOL_CANCEL if probe.property_name == "zero_sum" else RTOL_EQUAL)
        finite = bool(torch.isfinite(ev.kappa).all())
        if probe.name == "unequal_lengths":
            # Only an affine-in-rewards shared column speaks for M4; anything else (1/L_i,
            # entropy weights) is left to the other probes and to the fuzzer.
            if not (broke and finite and _affine_in_rewards(ev.rollout, ev.kappa, case)):
                return result
            ev.note = f"probe {probe.name}: {probe.description}; the shared coefficients depend on the reward only"
        result.evaluations[probe.property_name] = ev
        if probe.property_name == "zero_sum":
            result.evaluations["shared_cancellation"] = ev
        result.mechanism_found = broke and finite
        return result
    variant_case = probe.mutation.apply(case)
    base, variant = build_pair(case, variant_case)
    kappa, kappa_v = engine([base, variant])
    ex = exchangeability(base, kappa, variant, kappa_v, case, variant_case, repr(probe.mutation))
    ex.note = f"probe {probe.name}: {probe.description}"
    result.evaluations["exchangeable"] = ex
    # (C) on both rollouts: the base when it fails (smaller), else the variant.
    for rollout, k in ((base, kappa), (variant, kappa_v)):
        evs = events(rollout)
        res, mism = cancellation(rollout, k, evs, evs.shared)
        result.evaluations["shared_cancellation"] = Evaluation(
            res, True, rollout, k, mism, note=f"probe {probe.name}: {probe.description}"
        )
        if res > RTOL_CANCEL:
            break
    # Attribute the probe's mechanism only when the base alone is exchangeable: then the
    # one thing the probe changed is what broke it.
    base_only = exchangeability(base, kappa, base, kappa, case, case, "base")
    finite = bool(torch.isfinite(kappa).all()) and bool(torch.isfinite(kappa_v).all())
    if finite and ex.residual > RTOL_DIRECTION and base_only.residual <= RTOL_DIRECTION:
        if probe.mechanism == "M2":
            result.mechanism_found = True
            if _common_shift(engine, probe):
                result.attributed = "M6"
        elif probe.mechanism == "M3":
            g, i = probe.mutation.group, probe.mutation.response
            rows = (base.group == g).nonzero().flatten()
            p = common_prefix(case.groups[g].responses)
            result.mechanism_found = p > 0 and _per_response_rescaling(kappa[rows, 0], kappa_v[rows, 0], i)
        else:
            result.mechanism_found = True
    return result


def run_probes(engine: Engine, regime: str) -> list[ProbeResult]:
    """Every probe that applies to ``regime``."""
    off = Regime(regime).off_policy
    return [_run_probe(engine, p) for p in PROBES if off or not p.off_policy_only]
