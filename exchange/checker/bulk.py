"""Bulk fuzzing: many configurations per layout, coefficients and residuals batched.

Hypothesis spends most of ``check``'s time on its per-example machinery (draws,
bookkeeping), not on the loss. This module generates configurations outside it:

1. a seeded ``random.Random`` (derived from the check's seed, the property and the
   regime) chooses a *layout*: the groups' responses (shared prefix, suffix lengths,
   copies), the generation limit, and for (E) the mutation, for (P) the permutation;
2. for that layout, ``K`` configurations differ in their rewards and in the ``Case``
   seed that picks every per-event value (behaviour prob, ratio, reference prob,
   entropy). The picks use the very hash of :func:`exchange.checker.cases.build`,
   vectorised over the seeds, so configuration ``k`` *is* ``Case(groups, seed=s_k,
   ...)``: :func:`example` rebuilds it exactly (tests compare field by field);
3. the coefficients of the batch come from one ``torch.func.vmap(grad_and_value)``
   call; a loss that cannot be vmapped (``.item()``, data-dependent branches) falls back
   to one plain autograd call per configuration;
4. the property's residual is computed for the whole batch with tensor ops.

A failing configuration is re-evaluated through the plain path (the oracle,
:mod:`exchange.checker.properties`) before it counts; ``check`` then hands the property
to Hypothesis to find and shrink a minimal counterexample, and shrinks the bulk one
greedily if Hypothesis does not find one.
"""

from __future__ import annotations

import math
import random
import warnings
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from exchange.checker.cases import Case, GroupConfig, case_values, case_template, common_prefix
from exchange.checker.mutations import Mutation
from exchange.checker.properties import ATOL_REL, ZERO_COLUMN, _TINY
from exchange.checker.strategies import _REWARD_VALUES, _responses
from exchange.core.coefficients import _unchecked, loss_and_coefficients
from exchange.core.events import events
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import Regime
from exchange.errors import InvalidArgument, ObjectiveError

__all__ = ["BulkResult", "run", "example", "BATCH", "MIN_LAYOUTS"]

BATCH = 16  # configurations per layout (at most)
MIN_LAYOUTS = 8  # layouts per property and regime (at least): structure matters most
_MAX_SIZE, _MAX_LENGTH, _VOCAB = 8, 12, 4  # properties._SIZES, as the strategies use them
_F64 = torch.float64

# Set to a list to record every configuration's (logprobs, rollout) (benchmarks only).
RECORD: list | None = None


# ------------------------------------------------------------------ layouts
@dataclass
class Spec:
    """One layout: everything but the rewards and the value seed."""

    prop: str
    case: Case  # rewards are placeholders (0.0), seed 0
    kinds: list[tuple[str, ...]]  # reward kinds allowed per group
    mutation: Mutation | None = None
    perm_seed: int = 0
    distinct: list[bool] = field(default_factory=list)  # per group: rewards must not all be equal


def _group(rng: random.Random, max_groups_len: int = _MAX_LENGTH) -> tuple[tuple[int, ...], ...]:
    """``strategies.group_configs``' structure: a shared prefix, suffixes, copies."""
    size = rng.randint(2, _MAX_SIZE)
    prefix_len = rng.randint(0, _MAX_LENGTH)
    prefix = tuple(rng.randrange(_VOCAB) for _ in range(prefix_len))
    lo = 0 if prefix_len else 1
    hi = max(lo, _MAX_LENGTH - prefix_len)
    longest = rng.randint(lo, hi)
    return _responses(rng, size, prefix, lo, longest, _VOCAB)


def _identical(rng: random.Random) -> tuple[tuple[int, ...], ...]:
    size = rng.randint(2, _MAX_SIZE)
    length = rng.randint(1, _MAX_LENGTH)
    resp = tuple(rng.randrange(_VOCAB) for _ in range(length))
    return (resp,) * size


def _placeholder(responses) -> GroupConfig:
    return GroupConfig(responses, (0.0,) * len(responses))


_ALL = ("binary", "continuous", "tied")


def _spec(prop: str, regime: str, rng: random.Random) -> Spec:
    off = Regime(regime).off_policy and prop != "zero_sum"
    if prop == "zero_sum":
        groups = [_identical(rng) for _ in range(rng.randint(1, 4))]
        kinds = [("binary", "continuous")] * len(groups)
        distinct = [True] * len(groups)
    elif prop == "null_on_equal_rewards":
        groups = [_group(rng) for _ in range(1 + rng.randint(0, 2))]
        kinds = [("tied",)] + [_ALL] * (len(groups) - 1)
        distinct = [False] * len(groups)
    else:
        groups = [_group(rng) for _ in range(rng.randint(1, 4))]
        kinds = [_ALL] * len(groups)
        distinct = [False] * len(groups)
    limit = None
    if prop not in ("zero_sum", "null_on_equal_rewards") and rng.random() < 0.5:
        limit = max(len(r) for g in groups for r in g)
    case = Case(groups=tuple(_placeholder(g) for g in groups), off_policy=off, length_limit=limit)
    spec = Spec(prop, case, kinds, distinct=distinct)
    if prop == "exchangeable":
        spec.mutation = _mutation(rng, case, off)
    elif prop == "permutation_invariant":
        spec.perm_seed = rng.randint(0, 2**16)
    return spec


def _mutation(rng: random.Random, case: Case, off: bool) -> Mutation:
    g = rng.randrange(len(case.groups))
    grp = case.groups[g]
    i = rng.randrange(len(grp.responses))
    kinds = ("length", "tokens", "entropy") + (("ratio", "shared_ratio") if off else ())
    kind = rng.choice(kinds)
    p = common_prefix(grp.responses)
    if kind == "length":
        value = rng.randint(max(p, 1), max(p, 1) + 8)
    elif kind == "tokens":
        value = rng.randint(0, 2**16)
    elif kind in ("ratio", "shared_ratio"):
        value = rng.choice((0.5, 0.7, 0.9, 1.1, 1.25, 1.5, 2.0))
    else:
        value = rng.choice((0.1, 0.5, 1.5, 3.0))
    return Mutation(kind=kind, group=g, response=i, value=value, position=rng.randint(0, max(p - 1, 0)))


# A layout's template (exchange.checker.cases.case_template) holds everything but the
# values; case_values(template, seeds) gives each configuration's, exactly as
# build(replace(case, seed=s)) would.


_REWARD_TABLE = torch.tensor(_REWARD_VALUES, dtype=_F64)


def _draw_rewards(gen: torch.Generator, k: int, spec: Spec) -> Tensor:
    """[K, N] rewards: per configuration and group one kind among the group's kinds."""
    table = _REWARD_TABLE
    out = []
    for grp, kinds, distinct in zip(spec.case.groups, spec.kinds, spec.distinct):
        size = len(grp.responses)
        kind = torch.randint(len(kinds), (k, 1), generator=gen)
        binary = torch.randint(2, (k, size), generator=gen).to(_F64)
        cont = table[torch.randint(len(_REWARD_VALUES), (k, size), generator=gen)]
        tied = table[torch.randint(len(_REWARD_VALUES), (k, 1), generator=gen)].expand(k, size)
        options = {"binary": binary, "continuous": cont, "tied": tied}
        r = torch.zeros(k, size, dtype=_F64)
        for j, name in enumerate(kinds):
            r = torch.where(kind == j, options[name], r)
        if distinct:  # the (Z) strategy's filter: rewards not all equal
            same = (r == r[:, :1]).all(dim=1)
            first = torch.where(r[:, 0] == 1.0, torch.zeros(k, dtype=_F64), torch.ones(k, dtype=_F64))
            r[:, 0] = torch.where(same, first, r[:, 0])
        out.append(r)
    return torch.cat(out, dim=1)


def example(spec: Spec, seed: int, rewards: Tensor):
    """The plain-path example (what ``Property.evaluate`` takes) of one configuration."""
    rw = rewards.tolist()
    groups, at = [], 0
    for grp in spec.case.groups:
        size = len(grp.responses)
        groups.append(GroupConfig(grp.responses, tuple(float(x) for x in rw[at : at + size])))
        at += size
    case = replace(spec.case, groups=tuple(groups), seed=seed)
    if spec.prop == "exchangeable":
        return case, spec.mutation
    if spec.prop == "permutation_invariant":
        return case, spec.perm_seed
    return case


# ------------------------------------------------------------ coefficients
class _NoVmap(Exception):
    pass


class Mode:
    """Whether to try ``vmap``: cleared after the first refusal, so a loss that cannot
    be vmapped pays for the attempt once per property and regime."""

    def __init__(self, vmap: bool) -> None:
        self.vmap = vmap


def coefficients(loss_fn, template: Rollout, fields: dict[str, Tensor], use_vmap: "Mode") -> tuple[Tensor, Tensor, list]:
    """``(loss [K], kappa [K, N, T], errors)`` for the configurations ``fields``
    (``[K, ...]`` each, on ``template``'s layout). ``errors[k]`` is the
    :class:`ObjectiveError` of configuration ``k`` (loop path), else ``None``."""
    k = fields["logprobs"].shape[0]
    mask = template.mask
    if RECORD is not None:
        for j in range(k):
            RECORD.append((fields["logprobs"][j].clone(), _one(template, fields, j)))
    if use_vmap.vmap:
        try:
            return (*_vmapped(loss_fn, template, fields), [None] * k)
        except _NoVmap:
            use_vmap.vmap = False
    losses = torch.zeros(k, dtype=_F64)
    kappa = torch.zeros(k, *mask.shape, dtype=_F64)
    errors: list = [None] * k
    for j in range(k):
        r = _one(template, fields, j)
        try:
            loss, kap = loss_and_coefficients(loss_fn, r.logprobs, r)
        except ObjectiveError as err:
            errors[j] = err
            losses[j] = float("nan")
            continue
        losses[j], kappa[j] = loss, kap
    return losses, kappa, errors


def _one(template: Rollout, fields: dict[str, Tensor], j: int) -> Rollout:
    return _unchecked(template, {name: value[j] for name, value in fields.items()})


def _vmapped(loss_fn, template: Rollout, fields: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    names = list(fields)
    # private copies: a loss that edits a field in place must not change the batch
    stacked = [fields[n].clone() for n in names]

    def one(lp: Tensor, *vals: Tensor) -> Tensor:
        loss = loss_fn(lp, _unchecked(template, dict(zip(names, vals))))
        if not isinstance(loss, Tensor) or loss.dim() != 0:
            raise _NoVmap
        return loss.to(_F64)

    # vmap the forward only; one ordinary backward of the summed losses gives every
    # configuration's gradient (they are independent). torch.func.grad would import
    # torch._dynamo (~2 s per process) for nothing here.
    lp = fields["logprobs"].detach().clone().requires_grad_(True)
    try:
        with torch.enable_grad(), warnings.catch_warnings():
            # vmap's fallback for ops without a batching rule (a loop inside torch) warns
            # about speed on every call: not the user's concern
            warnings.filterwarnings("ignore", message="There is a performance drop")
            losses = torch.func.vmap(one)(lp, *stacked)
            if losses.requires_grad:
                (grads,) = torch.autograd.grad(losses.sum(), lp, allow_unused=True)
            else:
                grads = None
    except Exception as err:  # vmap refuses data-dependent code; the loop handles it
        raise _NoVmap from err
    if grads is None:
        grads = torch.zeros_like(lp)
    grads = -grads
    neg = -losses
    mask = fields["mask"] if "mask" in fields else template.mask[None]
    kappa = torch.where(mask, grads.to(_F64), torch.zeros((), dtype=_F64))
    return (-neg).detach(), kappa.detach()


# --------------------------------------------------------------- residuals
def _nan_inf(x: Tensor) -> Tensor:
    return torch.where(torch.isnan(x), torch.full_like(x, float("inf")), x)


def _tied_groups(rewards: Tensor, rollout: Rollout) -> Tensor:
    """[K, n_groups]: groups whose rewards are all equal, per configuration."""
    k, g = rewards.shape[0], rollout.n_groups
    idx = rollout.group_index[None].expand(k, -1)
    hi = torch.full((k, g), -float("inf"), dtype=_F64).scatter_reduce(1, idx, rewards, "amax")
    lo = torch.full((k, g), float("inf"), dtype=_F64).scatter_reduce(1, idx, rewards, "amin")
    return hi == lo


def cancellation(kappa: Tensor, ev, which: Tensor) -> Tensor:
    """:func:`exchange.checker.properties.cancellation`'s residual for a batch: [K]."""
    k = kappa.shape[0]
    if not bool(which.any()):
        return torch.zeros(k, dtype=_F64)
    valid = ev.ids >= 0
    ids = ev.ids[valid]
    kv = kappa[:, valid]
    K = torch.zeros(k, ev.count, dtype=_F64).index_add(1, ids, kv)
    mass = torch.zeros(k, ev.count, dtype=_F64).index_add(1, ids, kv.abs())
    scale = kappa.abs().flatten(1).amax(1)
    out = K.abs() / (mass + (ATOL_REL * scale + _TINY)[:, None])
    out = torch.where((mass == 0) & (K == 0), torch.zeros_like(out), out)
    out = torch.where(which[None], _nan_inf(out), torch.zeros_like(out))
    return out.amax(1)


def direction_spread(mat: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`exchange.checker.properties.direction_spread` for a batch ``[K, k, G]``:
    ``(residual [K], columns used [K])``."""
    kb, k = mat.shape[0], mat.shape[1]
    if k == 0:
        return torch.zeros(kb, dtype=_F64), torch.zeros(kb, dtype=torch.long)
    finite = torch.isfinite(mat).flatten(1).all(1)
    m = torch.where(finite[:, None, None], mat, torch.zeros_like(mat))
    peak = m.abs().flatten(1).amax(1)[:, None, None]
    m = torch.where(peak > 0, m / torch.where(peak > 0, peak, torch.ones_like(peak)), m)
    norms = m.norm(dim=2)
    keep = norms > ZERO_COLUMN * norms.amax(1, keepdim=True)
    used = keep.sum(1)
    unit = torch.where(keep[..., None], m / torch.where(keep, norms, torch.ones_like(norms))[..., None], torch.zeros_like(m))
    direction = torch.linalg.svd(unit, full_matrices=False).Vh[:, 0]  # [K, G]
    proj = (unit @ direction[..., None])[..., 0]
    sin = torch.where(keep, torch.sqrt(torch.clamp(1 - proj**2, min=0.0)), torch.zeros_like(proj))
    res = torch.where(used < 2, torch.zeros(kb, dtype=_F64), sin.amax(1))
    res = torch.where(finite, res, torch.full_like(res, float("inf")))
    used = torch.where(finite, used, torch.full_like(used, k))
    return res, used


@dataclass
class Batch:
    residual: Tensor  # [K]
    informative: Tensor  # [K] bool


def evaluate(loss_fn, spec: Spec, seeds: list[int], rewards: Tensor, use_vmap: "Mode | bool") -> Batch:
    """Residuals of the ``K`` configurations ``(seeds, rewards)`` of ``spec``."""
    k = len(seeds)
    prop = spec.prop
    if isinstance(use_vmap, bool):
        use_vmap = Mode(use_vmap)
    if prop == "exchangeable":
        return _evaluate_exchange(loss_fn, spec, seeds, rewards, use_vmap)
    lay = case_template(spec.case)
    fields = case_values(lay, seeds)
    fields["rewards"] = rewards
    loss, kappa, errors = coefficients(loss_fn, lay.rollout, fields, use_vmap)
    failed = torch.tensor([e is not None for e in errors])
    r = lay.rollout
    if prop == "finite":
        ok = torch.isfinite(loss) & torch.isfinite(kappa).flatten(1).all(1)
        res = torch.where(ok, torch.zeros(k, dtype=_F64), torch.full((k,), float("inf"), dtype=_F64))
        informative = torch.ones(k, dtype=torch.bool)
    elif prop in ("zero_sum", "shared_cancellation"):
        ev = events(r)
        res = cancellation(kappa, ev, ev.shared)
        tied = _tied_groups(rewards, r)
        if prop == "zero_sum":
            informative = ~tied.all(1)
        else:
            informative = (ev.shared[None] & ~tied[:, ev.group]).any(1)
    elif prop == "null_on_equal_rewards":
        tied_rows = _tied_groups(rewards, r)[:, r.group_index]  # [K, N]
        scale = kappa.abs().flatten(1).amax(1)
        worst = torch.where(tied_rows[..., None], kappa.abs(), torch.zeros_like(kappa)).flatten(1).amax(1)
        res = _nan_inf(worst / (scale + _TINY))
        informative = tied_rows.any(1)
    elif prop == "permutation_invariant":
        perm = list(range(r.n))
        random.Random(spec.perm_seed).shuffle(perm)
        ids = sorted(set(r.group.tolist()))
        shuffled = ids[:]
        random.Random(spec.perm_seed + 1).shuffle(shuffled)
        relabel = {g: 7 + 3 * s for g, s in zip(ids, shuffled)}
        idx = torch.tensor(perm)
        template = Rollout._trusted(
            **{f: (None if getattr(r, f) is None else getattr(r, f)[idx]) for f in _INIT_FIELDS if f != "group"},
            group=torch.tensor([relabel[int(g)] for g in r.group[idx]]),
        )
        pfields = {name: value[:, perm] for name, value in fields.items()}
        _, kappa_p, errors_p = coefficients(loss_fn, template, pfields, use_vmap)
        failed |= torch.tensor([e is not None for e in errors_p])
        diff = (kappa_p - kappa[:, perm]).abs().flatten(1).amax(1)
        res = _nan_inf(diff / (kappa.abs().flatten(1).amax(1) + _TINY))
        informative = torch.ones(k, dtype=torch.bool)
    else:  # pragma: no cover - every property is listed above
        raise ValueError(prop)
    res = torch.where(failed, torch.full_like(res, float("inf")), res)
    return Batch(res, informative | failed)


_INIT_FIELDS = tuple(f.name for f in Rollout.__dataclass_fields__.values() if f.init)


def _add_constants(fields: dict[str, Tensor], rollout: Rollout, k: int) -> None:
    """The fields that do not vary per configuration, broadcast to ``[K, ...]``."""
    for name in ("tokens", "mask", "baseline_rewards", "truncated"):
        value = getattr(rollout, name)
        if value is not None:
            fields[name] = value[None].expand(k, *value.shape)


def _evaluate_exchange(loss_fn, spec: Spec, seeds: list[int], rewards: Tensor, use_vmap: Mode) -> Batch:
    k = len(seeds)
    case, mutation = spec.case, spec.mutation
    variant_case = mutation.apply(case)
    t = max(len(r) for c in (case, variant_case) for grp in c.groups for r in grp.responses)
    lays = [case_template(replace(c, pad_to=t)) for c in (case, variant_case)]
    base, variant = lays[0].rollout, lays[1].rollout
    fb, fv = case_values(lays[0], seeds), case_values(lays[1], seeds)
    for f, lay in ((fb, lays[0]), (fv, lays[1])):
        f["rewards"] = rewards
        _add_constants(f, lay.rollout, k)
    if torch.equal(base.group, variant.group):  # one call for both (same layout shape)
        both = {name: torch.cat([fb[name], fv[name]]) for name in fb}
        template = base
        # tokens differ between base and variant: they are per-configuration fields
        _, kappa2, errors = coefficients(loss_fn, template, both, use_vmap)
        kappa, kappa_v = kappa2[:k], kappa2[k:]
        failed = torch.tensor([e is not None for e in errors])
        failed = failed[:k] | failed[k:]
    else:  # pragma: no cover - a mutation keeps the rows
        _, kappa, e1 = coefficients(loss_fn, base, fb, use_vmap)
        _, kappa_v, e2 = coefficients(loss_fn, variant, fv, use_vmap)
        failed = torch.tensor([a is not None or b is not None for a, b in zip(e1, e2)])
    tied = _tied_groups(rewards, base)  # [K, groups]
    res = torch.zeros(k, dtype=_F64)
    informative = torch.zeros(k, dtype=torch.bool)
    for g in range(len(case.groups)):
        prefix = min(common_prefix(case.groups[g].responses), common_prefix(variant_case.groups[g].responses))
        rows = (base.group == g).nonzero().flatten()
        cols = torch.cat([kappa[:, rows, :prefix], kappa_v[:, rows, :prefix]], dim=2).transpose(1, 2)  # [K, 2p, G]
        r_g, used = direction_spread(cols)
        informative |= (used >= 2) & ~tied[:, g]
        res = torch.maximum(res, _nan_inf(r_g))
    res = torch.where(failed, torch.full_like(res, float("inf")), res)
    return Batch(res, informative | failed)


# --------------------------------------------------------------------- run
@dataclass
class BulkResult:
    examples: int = 0  # configurations evaluated (through the failing one, if any)
    informative: int = 0
    max_residual: float = 0.0
    failure: object = None  # the plain-path example of the first confirmed failure
    evaluation: object = None  # the oracle's Evaluation of it (None: the loss raised)
    layouts: int = 0


def plan(max_examples: int) -> tuple[int, int]:
    """``(layouts, configurations per layout)`` for ``max_examples``: at least
    ``MIN_LAYOUTS`` layouts, at most ``BATCH`` configurations each, and at least
    ``max_examples`` configurations in all."""
    layouts = max(MIN_LAYOUTS, math.ceil(max_examples / BATCH))
    return layouts, max(1, math.ceil(max_examples / layouts))


def run(loss_fn, prop, regime: str, max_examples: int, seed: int, tolerance: float, engine, use_vmap: bool = True) -> BulkResult:
    """Bulk-fuzz ``prop`` in ``regime``; deterministic for ``seed``."""
    rng = random.Random(f"exchange.bulk/{seed}/{prop.name}/{regime}")
    gen = torch.Generator().manual_seed(rng.getrandbits(62))
    layouts, per = plan(max_examples)
    mode = Mode(use_vmap)
    out = BulkResult()
    for _ in range(layouts):
        spec = _spec(prop.name, regime, rng)
        seeds = [rng.randint(0, 2**16) for _ in range(per)]
        rewards = _draw_rewards(gen, per, spec)
        batch = evaluate(loss_fn, spec, seeds, rewards, mode)
        out.layouts += 1
        bad = (~(batch.residual <= tolerance)).nonzero().flatten().tolist()
        for j in bad:
            ex = example(spec, seeds[j], rewards[j])
            try:
                ev = prop.evaluate(engine, ex, regime)  # the oracle confirms it
                confirmed = not ev.residual <= tolerance
            except ObjectiveError:
                ev, confirmed = None, True
            if confirmed:
                before = batch.residual[:j]
                out.examples += j + 1
                out.informative += int(batch.informative[: j + 1].sum())
                out.max_residual = max([out.max_residual, *before.tolist()])
                out.failure, out.evaluation = ex, ev
                return out
            batch.residual[j] = 0.0  # round-off disagreement at the tolerance: the oracle decides
        out.examples += per
        out.informative += int(batch.informative.sum())
        out.max_residual = max(out.max_residual, float(batch.residual.max()))
    return out
