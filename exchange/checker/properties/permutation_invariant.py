"""Reordering the responses and relabelling the groups (non-contiguous, reordered ids)
permutes the coefficients and changes nothing else (THEORY.md section 1: groups need
not be contiguous). Under a declared optimizer step (:mod:`~exchange.checker.properties.update_rows`)
the reordering maps the step's rows onto the step's rows and the rest onto the rest: the
step is compared with itself reordered, not with another step."""

from __future__ import annotations

import random

import torch
from torch import Tensor

from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.mechanisms.m3_response_normaliser import position_rescaling
from exchange.checker.draw import Draw
from exchange.checker.examples import Example, Layout
from exchange.checker.properties.base import (BatchInputs, BatchResult, Evaluation, Probe, ProbeResult, Property,
                                              configurations)
from exchange.checker.properties.residuals import as_residual
from exchange.checker.properties.shared_cancellation import any_groups
from exchange.checker.properties.update_rows import update_rows
from exchange.checker.tolerances import RTOL_EQUAL, TINY
from exchange.core.coefficients import Engine
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import Regime

NAME = "permutation_invariant"


def layout(d: Draw, regime: str) -> Layout:
    lay = any_groups(d, regime)
    return Layout(Example(lay.example.case, perm_seed=d.integer(0, 2**16)), lay.kinds, lay.distinct)


def _permutation(rollout: Rollout, seed: int, update: Tensor | None = None) -> tuple[list[int], dict[int, int]]:
    """The row order and the group relabelling of ``seed``; with the step's rows ``update
    [N]``, the order shuffles the step's rows among themselves and the others among
    themselves (without it, every row: one class, the same order as before)."""
    perm = list(range(rollout.n))
    if update is None:
        random.Random(seed).shuffle(perm)
    else:
        for cls in (update.cpu().nonzero().flatten().tolist(), (~update.cpu()).nonzero().flatten().tolist()):
            shuffled = cls[:]
            random.Random(seed).shuffle(shuffled)
            for at, row in zip(cls, shuffled):
                perm[at] = row
    ids = sorted(set(rollout.group.tolist()))
    shuffled = ids[:]
    random.Random(seed + 1).shuffle(shuffled)
    labels = range(7, 7 + 3 * len(ids), 3)  # non-contiguous ids, reordered
    return perm, {g: labels[s] for g, s in zip(ids, shuffled)}


def _permuted(rollout: Rollout, perm: list[int], relabel: dict[int, int]) -> Rollout:
    out = rollout.select(perm)
    return out.replace(group=torch.tensor([relabel[int(g)] for g in out.group], device=out.group.device))


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    perm, relabel = _permutation(rollout, example.perm_seed, update_rows(engine.loss_fn, rollout))
    permuted = _permuted(rollout, perm, relabel)
    kappa, kappa_p = engine([rollout, permuted])
    diff = (kappa_p - kappa[perm]).abs().max()
    res = float(as_residual(diff / (kappa.abs().max() + TINY)))
    mism = []
    if res > RTOL_EQUAL:
        mism.append(f"rows permuted by {perm} and groups relabelled {relabel}: max |kappa change| = {float(diff):.6g}")
    return Evaluation(res, True, rollout, kappa, mism, variant=permuted, variant_kappa=kappa_p)


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    _, kappa, failed = b.coefficients(rollout, fields)
    perm, relabel = _permutation(rollout, b.layout.example.perm_seed, update_rows(b.loss_fn, rollout))
    permuted = _permuted(rollout, perm, relabel)
    _, kappa_p, failed_p = b.coefficients(permuted, {name: value[:, perm] for name, value in fields.items()})
    diff = (kappa_p - kappa[:, perm]).abs().flatten(1).amax(1)
    res = as_residual(diff / (kappa.abs().flatten(1).amax(1) + TINY))
    failed = failed | failed_p
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), torch.ones_like(failed))


def run_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """The probe's batch with its rows reordered; a break with one factor per response
    is M3's evidence (:func:`~exchange.checker.mechanisms.m3_response_normaliser.position_rescaling`)."""
    result = ProbeResult(probe)
    ev = evaluate(engine, Example(probe.case, perm_seed=PROBE_PERM_SEED), Regime.ON_POLICY)
    result.evaluations[NAME] = ev
    if ev.residual > RTOL_EQUAL and bool(torch.isfinite(ev.kappa).all()):
        perm, _ = _permutation(ev.rollout, PROBE_PERM_SEED, update_rows(engine.loss_fn, ev.rollout))
        result.found = position_rescaling(ev.kappa[perm], ev.variant_kappa, ev.variant.mask, engine.precision,
                                          f"probe {probe.name}: {probe.description}")
    return result


PROBE_PERM_SEED = 1
PROBES = (
    Probe("row_order", "two groups of equal-length responses, rows reordered, on-policy, every entropy equal", NAME,
          "M3", Case(groups=(GroupConfig(((1, 2, 0), (1, 2, 1), (1, 2, 3), (1, 2, 2)), (1.0, 0.0, 0.0, 1.0)),
                             GroupConfig(((2, 1), (2, 3, 3, 0, 1)), (1.0, 0.0))), entropy_all=1.0)),
)

PROPERTY = Property(name=NAME, tolerance=RTOL_EQUAL, layout=layout, evaluate=evaluate, evaluate_batch=evaluate_batch,
                    probes=PROBES, run_probe=run_probe)
