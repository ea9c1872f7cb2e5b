"""M4, advantages not zero-sum inside the group (THEORY.md section 4): a centre that is
not the group's own mean (a batch, greedy or length-weighted baseline), positive-only
filtering, a mask applied after centring.

Evidence: a centre that is not the mean (:func:`centre_crossing`), a response dropped
after centring (:func:`dropped_response`, :func:`truncation_probe`), tied coefficients
that follow the tied level (:func:`follows_level`), copies of one token pruned in some
responses only (:func:`pruned_copies`).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from exchange.checker.cases import GroupConfig, build, common_prefix
from exchange.checker.mechanisms.evidence import Evidence, above
from exchange.checker.properties.base import Evaluation, ProbeResult
from exchange.checker.properties.residuals import cancellation_mismatches
from exchange.checker.properties.reward_moves import cyclic_shifts, reward_dependent, reward_vectors
from exchange.checker.tolerances import RTOL_CANCEL, SHAPING_LEAK, ZERO_COLUMN, at_precision, pattern_tol
from exchange.core.events import events

__all__ = ["centre_crossing", "centre_share", "dropped_response", "follows_level", "pruned_copies", "truncation_probe"]

# The centre test's group: response 0 has exactly the mean of the group's rewards (3/8 of
# the spread, representable in bf16) under both reward vectors (the same multiset, so a
# std's scale is the same too), response 1 is long, the others short. A centre weighted
# by length sits at 0.53 and 0.41 of the spread there, not 0.375.
_CENTRE_RESPONSES = ((1, 2, 0), (1, 2, 1, 3, 3, 0, 1, 2), (1, 2, 2), (1, 2, 3), (1, 2, 1))
_CENTRE_REWARDS = ((0.375, 1.0, 0.0, 0.0, 0.5), (0.375, 0.5, 0.0, 0.0, 1.0))
# The twin: five responses of one length (every centre, a length-weighted one included,
# is the mean there), the same rewards: its share is round-off and shaping leak only.
_TWIN_RESPONSES = ((1, 2, 0, 1), (1, 2, 1, 3), (1, 2, 2, 2), (1, 2, 3, 0), (1, 2, 1, 1))
# The spreads the centre test runs at (the second twice the first: a shaping's
# second-order leak extrapolates away).
_SPREADS = (4.0, 8.0)


def _centre_shares(engine, probe, spread: float) -> tuple[float, float] | None:
    """``d_0 / max|d|`` on the centre group and on its equal-length twin, at rewards of
    ``spread`` (one engine call)."""
    cases = [replace(probe.case, off_policy=False, groups=(GroupConfig(responses, tuple(spread * x for x in r)),))
             for responses in (_CENTRE_RESPONSES, _TWIN_RESPONSES) for r in _CENTRE_REWARDS]
    k = engine([build(c) for c in cases])
    out = []
    for a, b in ((k[0], k[1]), (k[2], k[3])):
        d = (a - b)[:, 0]
        if not bool(torch.isfinite(d).all()) or float(d.abs().max()) == 0:
            return None
        out.append(float(d[0]) / float(d.abs().max()))
    return out[0], out[1]


def centre_share(shares: tuple[tuple[float, float], tuple[float, float]], precision: str,
                 moved: str = "") -> list[Evidence]:
    """M4 from the shares ``((group, twin) at the first spread, (group, twin) at the
    second)``: every estimator centred on the group mean gives response 0 (whose reward
    is the mean under both reward vectors) an advantage of exactly 0 under both, so its
    share of the move is 0 whatever its weight. A shaping of O(1) moves it through a std
    by ``O((s / spread)^2)``, so the shares are extrapolated (second order) to an infinite
    spread. M4 when the share exceeds :data:`SHAPING_LEAK`, :func:`pattern_tol` and the
    twin's (a centre that is the mean, under the same shaping and round-off) together."""
    (f_small, t_small), (f_large, t_large) = shares
    r = _SPREADS[1] / _SPREADS[0]
    k = r * r

    def limit(small: float, large: float) -> float:
        return (k * large - small) / (k - 1.0)

    twin = max(abs(t_small), abs(t_large), abs(limit(t_small, t_large)))
    return above("M4", moved, "a response whose reward is the group's mean keeps a moving advantage "
                              "(the centre is not the mean)", abs(limit(f_small, f_large)),
                 SHAPING_LEAK + pattern_tol(precision) + twin)


def centre_crossing(engine, probe, ev) -> list[Evidence]:
    """M4 from a centre that is not the mean of the group's rewards (OPO's length-weighted
    baseline): :func:`centre_share` on a group of unequal lengths."""
    shares = [_centre_shares(engine, probe, spread) for spread in _SPREADS]
    if None in shares:
        return []
    return centre_share(tuple(shares), engine.precision, f"probe {probe.name}: {probe.description}")


def dropped_response(engine, probe, ev) -> list[Evidence]:
    """M4 from a mask applied after centring: the mutated response crossed the length
    limit, and its first shared coefficient is exactly 0 in one rollout (truncated,
    dropped from the loss) and not in the other, while its reward, and so its advantage,
    did not change."""
    g, mutated = probe.mutation.group, probe.mutation.response
    if common_prefix(probe.case.groups[g].responses) == 0:
        return []
    rows = (ev.rollout.group == g).nonzero().flatten()
    a, a_v = ev.kappa[rows, 0], ev.variant_kappa[rows, 0]
    scale = float(torch.maximum(a.abs().max(), a_v.abs().max()))
    zero, zero_v = abs(float(a[mutated])) <= ZERO_COLUMN * scale, abs(float(a_v[mutated])) <= ZERO_COLUMN * scale
    if zero == zero_v or scale == 0:
        return []
    return [Evidence("M4", f"probe {probe.name}: {probe.description}",
                     "the truncated response's coefficients became exactly 0, its reward unchanged", 1.0, ZERO_COLUMN)]


def follows_level(change: torch.Tensor, floor: float, moved: str = "") -> list[Evidence]:
    """M4 from a tied group's coefficients ``change [G, P]`` when every reward of the
    group moved by one level (THEORY.md section 2: never assume a tied group's
    advantages are 0): a group's own centre cancels the level exactly, so coefficients
    that follow it, all one way, come from advantages centred elsewhere (a batch or
    greedy baseline, raw rewards: every incorrect response ``A = -1``). A change of both
    signs is a redistribution (a shaping the level reaches on some responses), not a
    centre."""
    live = change[change.abs() > floor]
    if not live.numel() or not (bool((live > 0).all()) or bool((live < 0).all())):
        return []
    return above("M4", moved, "every tied coefficient follows the tied reward level, one way",
                 float(live.abs().max()), floor)


def pruned_copies(rollout, kappa: torch.Tensor, moved: str = "") -> list[Evidence]:
    """M2 and M4 from a group of identical responses (``kappa [N, T]``): some position is
    exactly 0 in one response and not in another, both responses keeping a non-zero
    coefficient somewhere. Identical responses differ only in their rewards, so the
    copies zeroed were selected by the advantage (M2) and pruned after centring (M4),
    Clip-Cov's pattern (THEORY.md section 4, attribution rules); a whole response dropped
    (a positive-only filter) is M4 alone and not read here."""
    live = ((kappa != 0) & rollout.mask).any(dim=1)  # [N]
    for g in rollout.group_index.unique():
        rows = ((rollout.group_index == g) & live).nonzero().flatten()
        if rows.numel() < 2:
            continue
        zero = (kappa[rows] == 0) & rollout.mask[rows]  # [n, T]
        if bool((zero.any(dim=0) & (~zero & rollout.mask[rows]).any(dim=0)).any()):
            pattern = "copies of one token exactly 0 in some identical responses and not in others"
            return [Evidence("M2", moved, pattern + " (selected by the advantage)", 1.0, ZERO_COLUMN),
                    Evidence("M4", moved, pattern + " (pruned after centring)", 1.0, ZERO_COLUMN)]
    return []


# Responses 0 and 1 of four identical ones are flagged truncated (``Rollout.truncated``
# is an input the loss reads; the checker sets it on responses that are otherwise the
# same, so that length effects cannot stand in for it).
_TRUNCATED_ROWS = (0, 1)


def truncation_probe(engine, probe) -> ProbeResult:
    """(Z) with some responses of a group truncated (THEORY.md section 2): the part of
    ``K_e`` that the truncation flags change must not depend on the rewards. Dropping
    truncated responses after centring leaves ``-sum_truncated A_i w``: reward-dependent,
    (Z) broken (M4); a reward set to 0 on truncated responses before centring keeps the
    shaped advantages zero-sum. Where the identical responses' weights differ (a
    normaliser per micro-batch), each (reward, flag) pair is moved through every position
    (cyclic shifts of whole rows) and the coefficients averaged, as (Z) does."""
    result = ProbeResult(probe)
    engine = getattr(engine, "unmapped", engine)  # (Z)'s reward vectors as chosen (probes.KeptGroups)
    off = build(probe.case)
    flags = torch.zeros(off.n, dtype=torch.bool, device=off.rewards.device)
    flags[list(_TRUNCATED_ROWS)] = True
    on, ev, variants = off.with_fields({"truncated": flags}), events(off), reward_vectors(off.rewards[None], off)

    def flagged(perms: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """Per reward vector: the coefficients with the flags, and what the flags change,
        averaged over ``perms`` (each moves whole rows: reward and flag together)."""
        out = []
        for v in variants:
            k = engine([off.with_fields({"rewards": v[0][p], "truncated": f[p]})
                        for f in (flags, torch.zeros_like(flags)) for p in perms])
            out.append((sum(k[:len(perms)])[None] / len(perms), sum(k[len(perms):])[None] / len(perms)))
        return [a for a, _ in out], [a - b for a, b in out]

    raws, diffs = flagged([torch.arange(off.n, device=flags.device)])
    res = float(reward_dependent(diffs, ev, ev.shared, raws)[0])
    if res > RTOL_CANCEL:  # unequal weights of the copies: every (reward, flag) through every position
        res = float(reward_dependent(flagged(cyclic_shifts(off))[1], ev, ev.shared, raws)[0])
    kappa, tol = raws[0][0], at_precision(RTOL_CANCEL, engine.precision)
    mism = cancellation_mismatches(on, kappa, ev, ev.shared, RTOL_CANCEL) if res > RTOL_CANCEL else []
    evaluation = result.evaluations["zero_sum"] = Evaluation(
        res, True, on, kappa, mism, note=f"probe {probe.name}: responses {list(_TRUNCATED_ROWS)} flagged truncated")
    if res > tol and bool(torch.isfinite(kappa).all()):
        result.evaluations["shared_cancellation"] = evaluation
        result.found = [Evidence(probe.mechanism, f"probe {probe.name}: {probe.description}", "the truncation flags "
                                 "change K_e by a reward-dependent amount (dropped after centring)", res, tol)]
    return result
