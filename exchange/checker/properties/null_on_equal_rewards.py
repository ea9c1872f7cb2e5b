"""A group whose rewards are all equal gets zero coefficients: (Z) with ``A = 0``
(THEORY.md section 2). Tied groups keep only what does not scale with the advantage,
so an additive event term (M6) shows here however small it is next to the advantages.
The probe: a tied group beside a mixed one (a centre that is not the group's own: M4).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch
from torch import Tensor

from exchange.checker import generators
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout, placeholder
from exchange.checker.mechanisms import tied
from exchange.checker.properties.base import (BatchInputs, BatchResult, Evaluation, Probe, ProbeResult, Property,
                                              ShrinkRules, configurations)
from exchange.checker.properties.residuals import as_residual, fmt, tied_groups, with_reference_rewards
from exchange.checker.tolerances import MAX_MISMATCHES, RTOL_EQUAL, TINY
from exchange.core.coefficients import Engine
from exchange.core.vocabulary import Regime

NAME = "null_on_equal_rewards"


def layout(d: Draw, regime: str) -> Layout:
    """A tied group first, then up to two arbitrary groups."""
    groups = [generators.group(d) for _ in range(1 + d.integer(0, 2))]
    case = Case(groups=tuple(placeholder(g) for g in groups), off_policy=Regime(regime).off_policy)
    kinds = (("tied",),) + (generators.REWARD_KINDS,) * (len(groups) - 1)
    return Layout(Example(case), kinds, (False,) * len(groups))


def _ratio(kappa: Tensor, tied_rows: Tensor, reference: Tensor | None = None) -> Tensor:
    """``[K]``: ``max |kappa|`` over the tied rows ``tied_rows [K, N]`` over ``max |kappa|``
    (``kappa [K, N, T]``); with ``reference`` the larger of the two scales."""
    scale = kappa.abs().flatten(1).amax(1)
    if reference is not None:
        scale = torch.maximum(scale, torch.nan_to_num(reference.abs().flatten(1).amax(1), nan=0.0, posinf=0.0))
    worst = torch.where(tied_rows[..., None], kappa.abs(), torch.zeros_like(kappa)).flatten(1).amax(1)
    return as_residual(worst / (scale + TINY))


def _residual(kappa: Tensor, tied_rows: Tensor, reference: Callable[[Tensor], Tensor]) -> Tensor:
    """``[K]``: :func:`_ratio`; where it is above :data:`RTOL_EQUAL`, against the larger of
    the two scales with ``reference(rows)``, the coefficients of the configurations
    ``rows`` at :func:`~exchange.checker.properties.residuals.reference_rewards` (every
    group mixed): a batch of tied groups only is judged against what the loss gives it
    when its rewards differ, not against its own noise (THEORY.md section 2, round-off
    per event)."""
    res = _ratio(kappa, tied_rows)
    todo = (res > RTOL_EQUAL).nonzero().flatten()
    if todo.numel():
        res = res.clone()
        res[todo] = _ratio(kappa[todo], tied_rows[todo], reference(todo))
    return res


def _exact(rewards: Tensor, tied_rows: Tensor) -> Tensor:
    """``[K]``: every tied response's reward is exactly 0 (``rewards``, ``tied_rows``
    ``[K, N]``). Every group-, batch- or greedy-centred advantage of those rows is then
    an exact 0 in any precision, so a coefficient left there is no round-off."""
    return tied_rows.any(-1) & ((rewards == 0) | ~tied_rows).all(-1)


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    (kappa,) = engine([rollout])
    tied_rows = tied_groups(rollout.rewards[None], rollout)[0][rollout.group_index]  # [N]
    res = float(_residual(kappa[None], tied_rows[None], lambda rows: engine([with_reference_rewards(rollout)])[0][None])[0])
    exact = _exact(rollout.rewards[None], tied_rows[None])
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
    return Evaluation(res, bool(tied_rows.any()), rollout, kappa, mism, exact=bool(exact[0]))


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    _, kappa, failed = b.coefficients(rollout, fields)
    tied_rows = tied_groups(b.rewards, rollout)[:, rollout.group_index]  # [K, N]
    res = _residual(kappa, tied_rows, lambda rows: b.at_reference(rollout, fields, rows))
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), tied_rows.any(1) | failed)


def run_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """The tied group beside a mixed one, on-policy. Never assuming the tied group's
    advantages are 0, what keeps coefficients there is read from how they move with the
    tied level and from the response features (THEORY.md section 2 and section 4,
    attribution rules; :func:`exchange.checker.mechanisms.tied.cause`)."""
    result = ProbeResult(probe)
    ev = evaluate(engine, Example(probe.case), Regime.ON_POLICY)
    result.evaluations[NAME] = ev
    if not (ev.residual > RTOL_EQUAL and bool(torch.isfinite(ev.kappa).all())):
        return result
    result.found = tied.cause(engine, ev, probe)
    if "M6" in result.mechanisms:
        # Every M6 reading of tied.cause is taken where the advantages are 0 by definition
        # (the group's own centre, or the baseline reward the loss subtracts) or varies over
        # one response's events: kappa is not A_i h(e) ((E), section 2) and shared events
        # keep K_e != 0 ((C)), an uncentred advantage (M4) beside it or not.
        for name in ("exchangeable", "shared_cancellation"):
            result.evaluations[name] = replace(ev, note=f"probe {probe.name}: a tied group keeps an additive event "
                                                        "term (coefficients where the advantages are 0)")
    return result


_TIED_BESIDE_MIXED = (GroupConfig(((1, 2), (1, 3)), (0.0, 0.0)), GroupConfig(((1, 2), (2, 2)), (1.0, 0.0)))

PROBES = (
    Probe("tied_group", "one group with all rewards 0 beside a mixed group, on-policy", NAME, "M4",
          Case(groups=_TIED_BESIDE_MIXED)),
    Probe("tied_group_off_policy",
          "the same tied group beside a mixed group, off-policy (terms in log rho vanish on-policy)", NAME, "M4",
          Case(groups=_TIED_BESIDE_MIXED, off_policy=True,
               ratio=(((0, 1), 1.5), ((0, 1, 2), 0.7), ((0, 1, 3), 1.25))), off_policy_only=True),
    Probe("tied_group_truncated",
          "a tied group whose longest response hit the length limit beside a mixed group, on-policy", NAME, "M4",
          # tied at 1, not 0: a reward set to 0 on truncated responses must have one to change
          Case(groups=(GroupConfig(((1, 2), (1, 3), (1, 2, 2)), (1.0, 1.0, 1.0)), _TIED_BESIDE_MIXED[1]), length_limit=3)),
)

PROPERTY = Property(name=NAME, tolerance=RTOL_EQUAL, layout=layout, evaluate=evaluate, evaluate_batch=evaluate_batch,
                    shrink=ShrinkRules(keep_first_group=True), probes=PROBES, run_probe=run_probe)
