"""(Z) zero-sum advantages, observed on a black box (THEORY.md section 2).

Identical responses, on-policy, with rewards that are not all equal: every event is
shared, so the part of ``K_e`` that depends on the rewards must vanish (T1/T2). The
probes: identical responses on two reward scales, and unequal lengths after a shared
prefix (a length-weighted baseline is not zero-sum once lengths differ: M4).
"""

from __future__ import annotations

import torch

from exchange.checker import generators
from exchange.checker.signatures import affine_in_rewards
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout, placeholder
from exchange.checker.properties.base import (BatchInputs, BatchResult, Evaluation, Probe, ProbeResult, Property,
                                              ShrinkRules, configurations)
from exchange.checker.properties import shared_cancellation
from exchange.checker.properties.residuals import cancellation, cancellation_mismatches, tied_groups
from exchange.checker.tolerances import RTOL_CANCEL
from exchange.core.coefficients import Engine
from exchange.core.events import events
from exchange.core.vocabulary import PROPERTY_SUMMARIES, Regime

NAME = "zero_sum"


def layout(d: Draw, regime: str) -> Layout:
    groups = [generators.identical_group(d) for _ in range(d.integer(1, 4))]
    case = Case(groups=tuple(placeholder(g) for g in groups), off_policy=False)
    return Layout(Example(case), (("binary", "continuous"),) * len(groups), (True,) * len(groups))


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    (kappa,) = engine([rollout])
    ev = events(rollout)
    res = float(cancellation(kappa[None], ev, ev.shared)[0])
    tied = tied_groups(rollout.rewards[None], rollout)[0]
    mism = cancellation_mismatches(rollout, kappa, ev, ev.shared, RTOL_CANCEL)
    return Evaluation(res, not bool(tied.all()), rollout, kappa, mism)


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    _, kappa, failed = b.coefficients(rollout, fields)
    ev = events(rollout)
    res = cancellation(kappa, ev, ev.shared)
    informative = ~tied_groups(b.rewards, rollout).all(1)
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), informative | failed)


def run_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """The probe's group, on-policy; (C) is read from the same evaluation. A signature
    (unequal lengths: M4 only when the shared columns depend on the reward alone) must
    fit for the mechanism to be named."""
    result = ProbeResult(probe)
    ev = evaluate(engine, Example(probe.case), Regime.ON_POLICY)
    broke = ev.residual > RTOL_CANCEL and bool(torch.isfinite(ev.kappa).all())
    mechanism = probe.mechanism if broke else ""
    if probe.signature is not None:
        mechanism = probe.signature(engine, probe, ev) if broke else ""
        if not mechanism:  # the pattern does not fit: left to the other probes and the fuzzer
            return result
        ev.note = f"probe {probe.name}: {probe.description}; the break has the mechanism's pattern"
    result.evaluations[NAME] = ev
    result.evaluations[shared_cancellation.NAME] = ev
    result.mechanism = mechanism
    return result


_UNEQUAL_LENGTHS = ((1, 2, 3), (1, 2, 0, 1, 3), (1, 2, 3, 3), (1, 2, 2, 0, 1, 2))

PROBES = (
    Probe(
        "identical_responses",
        "G identical responses with different rewards, two groups on different reward scales, on-policy",
        NAME,
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
        "unequal_lengths",
        "one group with a shared prefix and unequal lengths, on-policy, every entropy equal",
        NAME,
        "M4",
        # Rewards chosen so that the length-weighted mean (1/6) is not the mean (1/4).
        Case(groups=(GroupConfig(_UNEQUAL_LENGTHS, (1.0, 0.0, 0.0, 0.0)),), entropy_all=1.0),
        # Only an affine-in-rewards shared column speaks for M4; anything else (1/L_i,
        # entropy weights) is left to the other probes and to the fuzzer.
        signature=affine_in_rewards,
    ),
)

PROPERTY = Property(
    name=NAME,
    summary=PROPERTY_SUMMARIES[NAME],
    theory="THEORY.md s2 (Z); T1/T2",
    tolerance=RTOL_CANCEL,
    layout=layout,
    evaluate=evaluate,
    evaluate_batch=evaluate_batch,
    shrink=ShrinkRules(identical_responses=True),
    probes=PROBES,
    run_probe=run_probe,
    regime_free=True,
)
