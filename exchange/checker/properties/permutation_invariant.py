"""Reordering the responses and relabelling the groups (non-contiguous, reordered ids)
permutes the coefficients and changes nothing else (THEORY.md section 1: groups need
not be contiguous)."""

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
from exchange.checker.properties.residuals import as_residual, judged_by_response, tied_groups
from exchange.checker.properties.shared_cancellation import any_groups
from exchange.checker.tolerances import RESOLUTION, RTOL_EQUAL, TINY, ZERO_COLUMN, at_precision, pattern_tol
from exchange.core.coefficients import Engine
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import PROPERTY_SUMMARIES, Regime

NAME = "permutation_invariant"


def layout(d: Draw, regime: str) -> Layout:
    lay = any_groups(d, regime)
    return Layout(Example(lay.example.case, perm_seed=d.integer(0, 2**16)), lay.kinds, lay.distinct)


def _permutation(rollout: Rollout, seed: int) -> tuple[list[int], dict[int, int]]:
    """The row order and the group relabelling of ``seed``."""
    perm = list(range(rollout.n))
    random.Random(seed).shuffle(perm)
    ids = sorted(set(rollout.group.tolist()))
    shuffled = ids[:]
    random.Random(seed + 1).shuffle(shuffled)
    labels = range(7, 7 + 3 * len(ids), 3)  # non-contiguous ids, reordered
    return perm, {g: labels[s] for g, s in zip(ids, shuffled)}


def _permuted(rollout: Rollout, perm: list[int], relabel: dict[int, int]) -> Rollout:
    out = rollout.select(perm)
    return out.replace(group=torch.tensor([relabel[int(g)] for g in out.group], device=out.group.device))


# Three sign patterns: an ill-conditioned step (a square root near 0, a difference of
# near-equal sums) amplifies round-off in some directions of the rewards and not in others.
_PATTERNS = 3


def _perturbed(rewards: Tensor, rollout: Rollout, precision: str, pattern: int) -> Tensor:
    """``rewards [K, N]`` moved by the square root of ``precision``'s epsilon times
    ``|R| + 1`` (times ``1 + pattern / 2``), in the seeded random sign ``pattern``. A step that squares differences of
    its inputs (a variance formed as E[x^2] - E[x]^2) rounds by eps x^2, which is what a
    move of sqrt(eps) x produces there (a move of eps gives eps^2 at a tie); a smooth step
    answers with sqrt(eps) times its slope, far below any effect. A group whose rewards tie moves as one
    (one sign for all its responses), so that it stays tied: a filter of tied groups
    would otherwise answer with a jump that is no round-off."""
    gen = torch.Generator(device="cpu").manual_seed(pattern)
    sign = (torch.randint(0, 2, (rewards.shape[-1],), generator=gen, device="cpu") * 2 - 1).to(rewards.dtype).to(rewards.device)
    gi = rollout.group_index.to(rewards.device)
    tied = tied_groups(rewards, rollout)[:, gi]  # [K, N]
    first = torch.zeros(rollout.n_groups, dtype=torch.long, device=rewards.device).scatter_(
        0, gi.flip(0), torch.arange(rollout.n, device=rewards.device).flip(0))  # each group's first row
    sign = torch.where(tied, sign[first[gi]][None].expand_as(tied), sign[None].expand_as(tied))
    # each pattern its own size too: a batch of one tied group has only two sign patterns,
    # and one move can round exactly as the unmoved rewards do
    return rewards + RESOLUTION[precision] ** 0.5 * (1.0 + 0.5 * pattern) * (rewards.abs() + 1.0) * sign


def _judged(raw: Tensor, kappa: Tensor, kappa_eps: list[Tensor], precision: str) -> Tensor:
    """The residual ``[K]``, ``raw`` judged against the coefficients' largest response to
    rewards moved by ``sqrt(eps)`` in :data:`_PATTERNS` sign patterns
    (:func:`~exchange.checker.properties.residuals.judged_by_response`)."""
    if not kappa_eps:
        return raw
    scale = kappa.abs().flatten(1).amax(1) + TINY
    response = torch.stack([(k - kappa).abs().flatten(1).amax(1) for k in kappa_eps]).amax(0) / scale
    return judged_by_response(raw, response, at_precision(RTOL_EQUAL, precision), precision)


def evaluate(engine: Engine, example: Example, regime: str) -> Evaluation:
    rollout = build(example.case)
    perm, relabel = _permutation(rollout, example.perm_seed)
    permuted = _permuted(rollout, perm, relabel)
    kappa, kappa_p = engine([rollout, permuted])
    diff = (kappa_p - kappa[perm]).abs().max()
    raw = as_residual(diff / (kappa.abs().max() + TINY))[None]
    precision = getattr(engine, "precision", "float64")
    kappa_eps = []
    if float(raw[0]) > at_precision(RTOL_EQUAL, precision):
        kappa_eps = [k[None] for k in engine([rollout.with_fields({"rewards": _perturbed(rollout.rewards[None], rollout, precision, j)[0]})
                                             for j in range(_PATTERNS)])]
    res = float(_judged(raw, kappa[None], kappa_eps, precision)[0])
    mism = []
    if res > RTOL_EQUAL:
        mism.append(f"rows permuted by {perm} and groups relabelled {relabel}: max |kappa change| = {float(diff):.6g}")
    return Evaluation(res, True, rollout, kappa, mism, variant=permuted, variant_kappa=kappa_p)


def evaluate_batch(b: BatchInputs) -> BatchResult:
    rollout, fields = configurations(b.layout.example.case, b.seeds, b.rewards)
    _, kappa, failed = b.coefficients(rollout, fields)
    perm, relabel = _permutation(rollout, b.layout.example.perm_seed)
    permuted = _permuted(rollout, perm, relabel)
    _, kappa_p, failed_p = b.coefficients(permuted, {name: value[:, perm] for name, value in fields.items()})
    diff = (kappa_p - kappa[:, perm]).abs().flatten(1).amax(1)
    res = as_residual(diff / (kappa.abs().flatten(1).amax(1) + TINY))
    todo = (res > at_precision(RTOL_EQUAL, b.precision)).nonzero().flatten()
    if len(todo):
        sub = {k: v[todo] for k, v in fields.items()}
        kappa_eps = [b.coefficients(rollout, {**sub, "rewards": _perturbed(b.rewards[todo], rollout, b.precision, j)})[1]
                     for j in range(_PATTERNS)]
        res = res.clone()
        res[todo] = _judged(res[todo], kappa[todo], kappa_eps, b.precision)
    failed = failed | failed_p
    return BatchResult(torch.where(failed, torch.full_like(res, float("inf")), res), torch.ones_like(failed))


def run_probe(engine: Engine, probe: Probe) -> ProbeResult:
    """The probe's batch with its rows reordered; a break with one factor per response
    is M3's evidence (:func:`~exchange.checker.mechanisms.m3_response_normaliser.position_rescaling`)."""
    result = ProbeResult(probe)
    ev = evaluate(engine, Example(probe.case, perm_seed=PROBE_PERM_SEED), Regime.ON_POLICY)
    result.evaluations[NAME] = ev
    if ev.residual > RTOL_EQUAL and bool(torch.isfinite(ev.kappa).all()):
        perm, _ = _permutation(ev.rollout, PROBE_PERM_SEED)
        result.found = position_rescaling(ev.kappa[perm], ev.variant_kappa, ev.variant.mask, engine.precision,
                                          f"probe {probe.name}: {probe.description}")
    return result


PROBE_PERM_SEED = 1
PROBES = (
    Probe(
        "row_order",
        "two groups of equal-length responses, rows reordered, on-policy, every entropy equal",
        NAME,
        "M3",
        Case(groups=(GroupConfig(((1, 2, 0), (1, 2, 1), (1, 2, 3), (1, 2, 2)), (1.0, 0.0, 0.0, 1.0)),
                     GroupConfig(((2, 1), (2, 3, 3, 0, 1)), (1.0, 0.0))), entropy_all=1.0),
    ),
)

PROPERTY = Property(
    name=NAME,
    summary=PROPERTY_SUMMARIES[NAME],
    theory="THEORY.md s1 (groups need not be contiguous)",
    tolerance=RTOL_EQUAL,
    layout=layout,
    evaluate=evaluate,
    evaluate_batch=evaluate_batch,
    probes=PROBES,
    run_probe=run_probe,
)
