"""A group whose rewards are all equal gets zero coefficients: (Z) with ``A = 0``
(THEORY.md section 2). Tied groups keep only what does not scale with the advantage,
so an additive event term (M6) shows here however small it is next to the advantages.
The probe: a tied group beside a mixed one (a centre that is not the group's own: M4).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from exchange.checker import generators
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout, placeholder
from exchange.checker.properties.base import (BatchInputs, BatchResult, Evaluation, Probe, ProbeResult, Property,
                                              ShrinkRules, configurations)
from exchange.checker.properties.residuals import as_residual, fmt, per_event, tied_groups
from exchange.checker.tolerances import MAX_MISMATCHES, RTOL_CANCEL, RTOL_EQUAL, TINY, ZERO_COLUMN
from exchange.core.coefficients import Engine
from exchange.core.events import events
from exchange.core.vocabulary import PROPERTY_SUMMARIES, Regime

NAME = "null_on_equal_rewards"


def layout(d: Draw, regime: str) -> Layout:
    """A tied group first, then up to two arbitrary groups."""
    groups = [generators.group(d) for _ in range(1 + d.integer(0, 2))]
    case = Case(groups=tuple(placeholder(g) for g in groups), off_policy=Regime(regime).off_policy)
    kinds = (("tied",),) + (generators.REWARD_KINDS,) * (len(groups) - 1)
    return Layout(Example(case), kinds, (False,) * len(groups))


def _residual(kappa, tied_rows):
    """``max |kappa|`` over the tied rows over ``max |kappa|``, ``[K]`` (kappa ``[K, N, T]``)."""
    scale = kappa.abs().flatten(1).amax(1)
    worst = torch.where(tied_rows[..., None], kappa.abs(), torch.zeros_like(kappa)).flatten(1).amax(1)
    return as_residual(worst / (scale + TINY))


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    (kappa,) = engine([rollout])
    tied_rows = tied_groups(rollout.rewards[None], rollout)[0][rollout.group_index]  # [N]
    res = float(_residual(kappa[None], tied_rows[None])[0])
    mism = []
    if res > RTOL_EQUAL:
        scale = float(kappa.abs().max())
        for i in tied_rows.nonzero().flatten().tolist()[:MAX_MISMATCHES]:
            L = int(rollout.lengths[i])
            if float(kappa[i, :L].abs().max()) > RTOL_EQUAL * scale:
                mism.append(
                    f"response {i} (group={int(rollout.group[i])}, all rewards {float(rollout.rewards[i]):g}): "
                    f"kappa={fmt(kappa[i, :L])}"
                )
    # tied at exactly 0, every group-, batch- or greedy-centred advantage of the tied
    # rows is an exact 0 in any precision: a coefficient left there is no round-off
    exact = bool(tied_rows.any()) and bool((rollout.rewards[tied_rows] == 0).all())
    return Evaluation(res, bool(tied_rows.any()), rollout, kappa, mism, exact=exact)


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    _, kappa, failed = b.coefficients(rollout, fields)
    tied_rows = tied_groups(b.rewards, rollout)[:, rollout.group_index]  # [K, N]
    res = _residual(kappa, tied_rows)
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), tied_rows.any(1) | failed)


def run_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """The tied group beside a mixed one, on-policy. What keeps coefficients on a tied
    group names the cause (THEORY.md section 2 and section 4, attribution rules): the
    group's shared events cancel: zero-sum advantages of a reward shaped by the responses'
    features (M7); they keep mass that moves with the group's reward level: a centre
    that is not the group's own (M4); mass that does not: an additive event term (M6)."""
    result = ProbeResult(probe)
    ev = evaluate(engine, Example(probe.case), Regime.ON_POLICY)
    result.evaluations[NAME] = ev
    if not (ev.residual > RTOL_EQUAL and bool(torch.isfinite(ev.kappa).all())):
        return result
    result.mechanism = _cause(engine, ev)
    if "M6" in result.mechanism.split("+"):
        # All advantages of the tied group are 0 and its coefficients are not: kappa is not
        # A_i h(e) there ((E), section 2) and its shared events keep K_e != 0 ((C)).
        for name in ("exchangeable", "shared_cancellation"):
            result.evaluations[name] = replace(ev, note=f"probe {probe.name}: a tied group keeps an additive event "
                                                        "term (all advantages 0, coefficients not)")
    return result


def _cause(engine: Engine, ev: Evaluation) -> str:
    """The mechanisms that keep coefficients on the tied group, ``"+"``-joined: M4 when
    they move with the group's reward level; with every reward 0 (every advantage of a
    group-centred, batch-centred or greedy estimator 0), M6 when a shared event keeps
    ``K_e != 0`` and M7 when its occurrences differ (responses of equal length: no
    per-response normaliser can make them differ) or carry mass that cancels."""
    rollout, kappa = ev.rollout, ev.kappa
    tied_rows = tied_groups(rollout.rewards[None], rollout)[0][rollout.group_index]  # [N]
    evs = events(rollout)
    tied_events = torch.zeros(evs.count, dtype=torch.bool, device=kappa.device)
    tied_events[evs.ids[tied_rows][evs.ids[tied_rows] >= 0]] = True
    which = evs.shared & tied_events
    names = set()
    level = 1.0 + rollout.group_index.to(rollout.rewards.dtype)
    moved, zero = engine([rollout.with_fields({"rewards": rollout.rewards + level}),
                          rollout.with_fields({"rewards": torch.zeros_like(rollout.rewards)})])
    scale = float(kappa[tied_rows].abs().max())
    if float((moved - kappa)[tied_rows].abs().max()) > RTOL_EQUAL * scale:
        # a centre that is not the group's own leaves the tied group's shared events
        # uncancelled; a shaping that moves with the level (a reward set to 0) cancels
        Km, massm, _ = (x[0] for x in per_event(moved[None], evs))
        if bool((which & (Km.abs() > RTOL_CANCEL * massm) & (massm > 0)).any()):
            names.add("M4")
    K0, mass0, _ = (x[0] for x in per_event(zero[None], evs))
    scale0 = float(zero[tied_rows].abs().max())
    carries = which & (mass0 > ZERO_COLUMN * max(scale0, TINY))
    if bool((carries & (K0.abs() > RTOL_CANCEL * mass0)).any()):
        names.add("M6")
    lengths = rollout.lengths[tied_rows]
    spread = False
    for e in carries.nonzero().flatten().tolist():
        values = zero[evs.ids == e]
        spread = spread or float(values.max() - values.min()) > RTOL_EQUAL * scale0
    if spread and (bool((lengths == lengths[0]).all()) or "M6" not in names):
        names.add("M7")
    if not names:
        # nothing at all-zero rewards, yet the tied group's shared events carry mass that
        # cancels at its own level: zero-sum advantages of a shaping that needs a reward
        # to act on (a truncated response's reward set to 0): M7
        K, mass, _ = (x[0] for x in per_event(kappa[None], evs))
        live = which & (mass > ZERO_COLUMN * max(scale, TINY))
        if bool(live.any()) and bool((K[live].abs() <= RTOL_CANCEL * mass[live]).all()):
            names.add("M7")
    return "+".join(sorted(names)) or "M4"


PROBES = (
    Probe(
        "tied_group",
        "one group with all rewards 0 beside a mixed group, on-policy",
        NAME,
        "M4",
        Case(groups=(GroupConfig(((1, 2), (1, 3)), (0.0, 0.0)), GroupConfig(((1, 2), (2, 2)), (1.0, 0.0)))),
    ),
    Probe(
        "tied_group_off_policy",
        "the same tied group beside a mixed group, off-policy (terms in log rho vanish on-policy)",
        NAME,
        "M4",
        Case(groups=(GroupConfig(((1, 2), (1, 3)), (0.0, 0.0)), GroupConfig(((1, 2), (2, 2)), (1.0, 0.0))),
             off_policy=True, ratio=(((0, 1), 1.5), ((0, 1, 2), 0.7), ((0, 1, 3), 1.25))),
        off_policy_only=True,
    ),
    Probe(
        "tied_group_truncated",
        "a tied group whose longest response hit the length limit beside a mixed group, on-policy",
        NAME,
        "M4",
        # tied at 1, not 0: a reward set to 0 on truncated responses must have one to change
        Case(groups=(GroupConfig(((1, 2), (1, 3), (1, 2, 2)), (1.0, 1.0, 1.0)), GroupConfig(((1, 2), (2, 2)), (1.0, 0.0))),
             length_limit=3),
    ),
)

PROPERTY = Property(
    name=NAME,
    summary=PROPERTY_SUMMARIES[NAME],
    theory="THEORY.md s2 (Z) with A = 0",
    tolerance=RTOL_EQUAL,
    layout=layout,
    evaluate=evaluate,
    evaluate_batch=evaluate_batch,
    shrink=ShrinkRules(keep_first_group=True),
    probes=PROBES,
    run_probe=run_probe,
)
