"""The checked properties: observable forms of THEORY.md section 2.

Each :class:`Property` has a stable name, the Hypothesis strategy of examples it is
fuzzed over (per regime), and ``evaluate`` which returns a normalised residual: the
property holds on an example when ``residual <= tolerance``.

Tolerances (all relative, float64; see docs/properties.md):

- cancellation: ``|K_e| <= 1e-8 * (sum over the event's occurrences of |kappa| +
  1e-12 * max|kappa|)``; the natural scale of a cancelling sum is the sum of the
  magnitudes it cancels.
- direction: shared-event coefficient vectors (one entry per response) are normalised;
  the sine of the angle between each and their principal direction must be ``<= 1e-6``.
  Vectors shorter than ``1e-9`` times the longest in their group count as zero (their
  direction is round-off).
- equality (null on equal rewards, permutation): ``<= 1e-9 * max|kappa|``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

import torch
from hypothesis import strategies as st
from torch import Tensor

from exchange.checker import strategies as xst
from exchange.checker.cases import Case, build, common_prefix
from exchange.core.coefficients import Engine, loss_and_coefficients
from exchange.core.events import Events, event_coefficients, event_residuals, events
from exchange.checker.mutations import Mutation
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import PROPERTY_SUMMARIES, Regime

__all__ = ["Property", "Evaluation", "PROPERTIES", "property_names", "get_property"]

RTOL_CANCEL = 1e-8
ATOL_REL = 1e-12
RTOL_DIRECTION = 1e-6
ZERO_COLUMN = 1e-9
RTOL_EQUAL = 1e-9
_TINY = 1e-300
_MAX_MISMATCHES = 8



@dataclass
class Evaluation:
    """What one example showed."""

    residual: float
    informative: bool
    rollout: Rollout
    kappa: Tensor
    mismatches: list[str] = field(default_factory=list)
    variant: Rollout | None = None
    variant_kappa: Tensor | None = None
    note: str = ""


@dataclass(frozen=True)
class Property:
    name: str
    summary: str
    theory: str
    tolerance: float
    examples: Callable[[str], st.SearchStrategy]
    evaluate: Callable[[Engine, object, str], Evaluation]
    regime_free: bool = False  # evaluated on-policy only; one verdict for both regimes


# ---------------------------------------------------------------- helpers
def _residual(value: Tensor) -> float:
    v = float(value)
    return float("inf") if v != v else v  # NaN -> inf: a NaN never "holds"


def event_label(rollout: Rollout, ev: Events, e: int) -> str:
    i, t = (ev.ids == e).nonzero()[0].tolist()
    prefix = tuple(int(x) for x in rollout.tokens[i, : t + 1])
    return f"group={int(rollout.group[i])} t={t} tokens={prefix}"


def cancellation(rollout: Rollout, kappa: Tensor, ev: Events, which: Tensor) -> tuple[float, list[str]]:
    """Max over events in ``which`` of ``|K_e| / (sum |kappa| + atol)``, with mismatches."""
    if not bool(which.any()):
        return 0.0, []
    K = event_coefficients(kappa, ev)
    mass = event_coefficients(kappa.abs(), ev)
    scale = float(kappa.abs().max()) if kappa.numel() else 0.0
    res = event_residuals(kappa, ev, atol=ATOL_REL * scale + _TINY)
    res = torch.where(torch.isnan(res), torch.full_like(res, float("inf")), res)
    res = torch.where(which, res, torch.zeros_like(res))
    bad = (res > RTOL_CANCEL).nonzero().flatten().tolist()
    mismatches = [
        f"event {event_label(rollout, ev, e)}: K_e={float(K[e]):.6g} with sum|kappa|={float(mass[e]):.6g} "
        f"(occurrences={int(ev.occurrences[e])})"
        for e in bad[:_MAX_MISMATCHES]
    ]
    return _residual(res.max()), mismatches


def direction_spread(columns: list[Tensor]) -> tuple[float, int, int]:
    """``(max sin angle to the principal direction, index of worst, number used)``.

    Columns are normalised first; those shorter than ``ZERO_COLUMN`` x the longest are
    dropped (their direction is round-off). Non-finite columns give ``inf``.
    """
    if not columns:
        return 0.0, -1, 0
    mat = torch.stack(columns)  # [k, G]
    if not torch.isfinite(mat).all():
        return float("inf"), 0, len(columns)
    peak = mat.abs().max()
    if peak > 0:
        mat = mat / peak  # scale-free: huge (but finite) coefficients must not overflow the norms
    norms = mat.norm(dim=1)
    keep = (norms > ZERO_COLUMN * norms.max()).nonzero().flatten()
    if keep.numel() < 2:
        return 0.0, -1, int(keep.numel())
    unit = mat[keep] / norms[keep, None]
    direction = torch.linalg.svd(unit, full_matrices=False).Vh[0]  # [G]
    sin = torch.sqrt(torch.clamp(1 - (unit @ direction) ** 2, min=0.0))
    worst = int(sin.argmax())
    return float(sin[worst]), int(keep[worst]), int(keep.numel())


def _fmt(v: Tensor) -> str:
    return "(" + ", ".join(f"{float(x):.4g}" for x in v) + ")"


def _tied(rollout: Rollout) -> Tensor:
    """``BoolTensor[n_groups]``: groups whose rewards are all equal."""
    r = rollout.rewards
    spread = rollout.group_max(r) - rollout.group_min(r)  # [N]
    out = torch.zeros(rollout.n_groups, dtype=torch.bool)
    return out.index_put((rollout.group_index,), spread == 0)


# ------------------------------------------------------------- properties
def _eval_finite(coeffs: Engine, case: Case, regime: str) -> Evaluation:
    rollout = build(case)
    loss, kappa = loss_and_coefficients(coeffs.loss_fn, rollout.logprobs, rollout)
    finite = bool(torch.isfinite(loss)) and bool(torch.isfinite(kappa).all())
    mism = []
    if not finite:
        bad = torch.nonzero(~torch.isfinite(kappa))[:4].tolist()
        overflow = bool(torch.isinf(loss)) or bool(torch.isinf(kappa).any())
        if overflow and not bool(torch.isnan(kappa).any()) and not bool(torch.isnan(loss)):
            mism = [
                f"overflow: loss={float(loss):.6g} (|loss| beyond float64's 1.8e308); non-finite kappa at {bad}. "
                "The loss's scale is out of range (a huge constant factor?)"
            ]
        else:
            mism = [f"loss={float(loss):.6g}, non-finite kappa at {bad}"]
    return Evaluation(0.0 if finite else float("inf"), True, rollout, kappa, mism)


def _eval_zero_sum(coeffs: Engine, case: Case, regime: str) -> Evaluation:
    rollout = build(case)
    (kappa,) = coeffs([rollout])
    ev = events(rollout)
    res, mism = cancellation(rollout, kappa, ev, ev.shared)
    return Evaluation(res, not bool(_tied(rollout).all()), rollout, kappa, mism)


def _eval_cancellation(coeffs: Engine, case: Case, regime: str) -> Evaluation:
    rollout = build(case)
    (kappa,) = coeffs([rollout])
    ev = events(rollout)
    informative = bool((ev.shared & ~_tied(rollout)[ev.group]).any())
    res, mism = cancellation(rollout, kappa, ev, ev.shared)
    return Evaluation(res, informative, rollout, kappa, mism)


def _eval_null(coeffs: Engine, case: Case, regime: str) -> Evaluation:
    rollout = build(case)
    (kappa,) = coeffs([rollout])
    tied_rows = _tied(rollout)[rollout.group_index]  # [N]
    scale = float(kappa.abs().max())
    worst = kappa[tied_rows].abs().max() if bool(tied_rows.any()) else torch.tensor(0.0)
    res = _residual(worst / (scale + _TINY))
    mism = []
    if res > RTOL_EQUAL:
        for i in tied_rows.nonzero().flatten().tolist()[:_MAX_MISMATCHES]:
            L = int(rollout.lengths[i])
            if float(kappa[i, :L].abs().max()) > RTOL_EQUAL * scale:
                mism.append(
                    f"response {i} (group={int(rollout.group[i])}, all rewards {float(rollout.rewards[i]):g}): "
                    f"kappa={_fmt(kappa[i, :L])}"
                )
    return Evaluation(res, bool(tied_rows.any()), rollout, kappa, mism)


def _eval_permutation(coeffs: Engine, example: tuple[Case, int], regime: str) -> Evaluation:
    case, seed = example
    rollout = build(case)
    perm = list(range(rollout.n))
    random.Random(seed).shuffle(perm)
    ids = sorted(set(rollout.group.tolist()))
    shuffled = ids[:]
    random.Random(seed + 1).shuffle(shuffled)
    relabel = {g: 7 + 3 * s for g, s in zip(ids, shuffled)}  # non-contiguous, reordered ids
    permuted = rollout.select(perm)
    permuted = permuted.replace(group=torch.tensor([relabel[int(g)] for g in permuted.group]))
    kappa, kappa_p = coeffs([rollout, permuted])
    diff = (kappa_p - kappa[perm]).abs().max()
    res = _residual(diff / (kappa.abs().max() + _TINY))
    mism = []
    if res > RTOL_EQUAL:
        mism.append(f"rows permuted by {perm} and groups relabelled {relabel}: max |kappa change| = {float(diff):.6g}")
    return Evaluation(res, True, rollout, kappa, mism, variant=permuted, variant_kappa=kappa_p)


def shared_columns(rollout: Rollout, kappa: Tensor, g: int, prefix: int) -> list[Tensor]:
    rows = (rollout.group == g).nonzero().flatten()
    return [kappa[rows, t] for t in range(prefix)]


def exchangeability(
    base: Rollout, kappa: Tensor, variant: Rollout, kappa_v: Tensor, case: Case, variant_case: Case, label: str
) -> Evaluation:
    """Rank-1 test of every group's shared-event vectors across ``base`` and ``variant``."""
    worst_res, informative, mism = 0.0, False, []
    tied = _tied(base)
    for g in range(len(case.groups)):
        prefix = min(common_prefix(case.groups[g].responses), common_prefix(variant_case.groups[g].responses))
        cols = shared_columns(base, kappa, g, prefix) + shared_columns(variant, kappa_v, g, prefix)
        res, worst, used = direction_spread(cols)
        if used >= 2 and not bool(tied[g]):
            informative = True
        if res > RTOL_DIRECTION:
            ref = cols[0] if worst != 0 else cols[-1]
            where = "base" if worst < prefix else f"variant ({label})"
            mism.append(
                f"group={g}: shared-event vectors are not parallel: event t={worst % max(prefix, 1)} in {where} "
                f"kappa={_fmt(cols[worst])} vs kappa={_fmt(ref)} (sin angle {res:.3g})"
            )
        worst_res = max(worst_res, res)
    return Evaluation(worst_res, informative, base, kappa, mism[:_MAX_MISMATCHES], variant, kappa_v)


def _eval_exchangeable(coeffs: Engine, example: tuple[Case, Mutation], regime: str) -> Evaluation:
    case, mutation = example
    variant_case = mutation.apply(case)
    base, variant = build_pair(case, variant_case)
    kappa, kappa_v = coeffs([base, variant])
    return exchangeability(base, kappa, variant, kappa_v, case, variant_case, repr(mutation))


def build_pair(case: Case, variant_case: Case) -> tuple[Rollout, Rollout]:
    """Base and variant rollouts padded to one width, so their rows line up."""
    from dataclasses import replace

    t = max(len(r) for c in (case, variant_case) for grp in c.groups for r in grp.responses)
    return build(replace(case, pad_to=t)), build(replace(variant_case, pad_to=t))


# -------------------------------------------------------------- strategies
# Moderate sizes by default keep a 200-example run in seconds; the strategies themselves
# reach G=16 and L=32 (tests fuzz those bounds directly).
_SIZES = dict(max_size=8, max_length=12)


def _off(regime: str) -> bool:
    return Regime(regime).off_policy


def _null_cases(off_policy: bool) -> st.SearchStrategy[Case]:
    """A tied group first, then up to two arbitrary groups."""
    tied = xst.group_configs(reward_kinds=("tied",), **_SIZES)
    others = st.lists(xst.group_configs(**_SIZES), min_size=0, max_size=2)
    return _null_composite(tied, others, st.integers(0, 2**16), off_policy)


@st.composite
def _null_composite(draw, tied, others, seeds, off_policy: bool) -> Case:
    return Case(groups=(draw(tied), *draw(others)), off_policy=off_policy, seed=draw(seeds))


PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        Property(
            name="zero_sum",
            summary=PROPERTY_SUMMARIES["zero_sum"],
            theory="THEORY.md s2 (Z); T1/T2",
            tolerance=RTOL_CANCEL,
            examples=lambda regime: xst.cases(
                off_policy=False, groups=xst.identical_group_configs(**_SIZES)
            ),
            evaluate=_eval_zero_sum,
            regime_free=True,
        ),
        Property(
            name="exchangeable",
            summary=PROPERTY_SUMMARIES["exchangeable"],
            theory="THEORY.md s2 (E); T2, T5",
            tolerance=RTOL_DIRECTION,
            examples=lambda regime: xst.mutations(off_policy=_off(regime), **_SIZES),
            evaluate=_eval_exchangeable,
        ),
        Property(
            name="shared_cancellation",
            summary=PROPERTY_SUMMARIES["shared_cancellation"],
            theory="THEORY.md s2 (C); T1, T3, T4",
            tolerance=RTOL_CANCEL,
            examples=lambda regime: xst.cases(off_policy=_off(regime), **_SIZES),
            evaluate=_eval_cancellation,
        ),
        Property(
            name="null_on_equal_rewards",
            summary=PROPERTY_SUMMARIES["null_on_equal_rewards"],
            theory="THEORY.md s2 (Z) with A = 0",
            tolerance=RTOL_EQUAL,
            examples=lambda regime: _null_cases(_off(regime)),
            evaluate=_eval_null,
        ),
        Property(
            name="permutation_invariant",
            summary=PROPERTY_SUMMARIES["permutation_invariant"],
            theory="THEORY.md s1 (groups need not be contiguous)",
            tolerance=RTOL_EQUAL,
            examples=lambda regime: st.tuples(xst.cases(off_policy=_off(regime), **_SIZES), st.integers(0, 2**16)),
            evaluate=_eval_permutation,
        ),
        Property(
            name="finite",
            summary=PROPERTY_SUMMARIES["finite"],
            theory="-",
            tolerance=0.0,
            examples=lambda regime: xst.cases(off_policy=_off(regime), **_SIZES),
            evaluate=_eval_finite,
        ),
    )
}


def property_names() -> list[str]:
    return list(PROPERTIES)


def get_property(name: str) -> Property:
    from exchange.errors import InvalidArgument

    try:
        return PROPERTIES[name]
    except KeyError:
        raise InvalidArgument(
            f"property={name!r} is unknown; choose from: {', '.join(PROPERTIES)}."
        ) from None
