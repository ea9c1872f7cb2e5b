"""Inspect one real batch exactly, without fuzzing: ``exchange.inspect(loss_fn, rollout)``.

One backward pass gives every token coefficient ``kappa``; the events of the batch give
every shared event and its ``K_e``. From them:

- ``shared_residual``: the share of the coefficient mass on shared events that does not
  cancel (:func:`exchange.core.events.shared_residual`, the number the training
  integrations log);
- per group, the **response weight vector**: the common direction ``alpha`` of the
  shared-event coefficient vectors ``(kappa[1, e], ..., kappa[G, e])`` (THEORY.md (E)),
  with ``spread``, the largest sine of the angle between one shared event's vector and
  ``alpha`` (0: one common vector), and ``zero_sum``, ``|sum alpha| / sum |alpha|``
  (0: the common vector cancels);
- the top offending shared events (largest ``|K_e|``) with their tokens;
- a mechanism hint where the pattern tells one (see :func:`_hints`).

The batch format read by ``exchange inspect`` is documented in :func:`load_batch`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from exchange.core.coefficients import LossFn, loss_and_coefficients
from exchange.core.events import Events, events
from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument

__all__ = ["inspect", "Inspection", "GroupWeights", "OffendingEvent", "load_batch", "save_batch", "BATCH_FIELDS"]

# A group's shared-event vectors count as one common direction below this sine, and a
# common vector as zero-sum below this share (the checker's tolerances are tighter; a
# real batch in float32 log-probs is noisier).
SPREAD_TOL = 1e-6
ZERO_SUM_TOL = 1e-6
_TOP = 10
_TAIL = 8  # prefix tokens shown per offending event


@dataclass(frozen=True)
class GroupWeights:
    """One group's per-response weight vector on its shared events."""

    group: int  # the group id as given in ``rollout.group``
    rows: tuple[int, ...]
    shared_events: int
    weights: tuple[float, ...]  # unit common direction alpha (sign: positive on the best reward)
    spread: float  # max sin angle of a shared event's vector to alpha; 0 = one common vector
    zero_sum: float  # |sum alpha| / sum |alpha|
    residual: float  # this group's shared residual
    rewards: tuple[float, ...]
    lengths: tuple[int, ...]


@dataclass(frozen=True)
class OffendingEvent:
    event: int
    group: int
    position: int
    token: int
    prefix_tail: tuple[int, ...]  # the last tokens of the prefix, ending with ``token``
    K: float
    mass: float  # sum |kappa| over the occurrences
    residual: float  # |K| / mass


@dataclass(frozen=True)
class Inspection:
    """What :func:`inspect` found; ``str()`` is a readable report, :meth:`to_dict` JSON."""

    loss: float
    n_responses: int
    n_groups: int
    n_tokens: int
    n_events: int
    n_shared: int
    shared_residual: float
    max_residual: float  # max over shared events of |K_e| / sum|kappa| (the checker's (C) form)
    shared_K: Tensor = field(repr=False)  # [S] K_e of every shared event
    shared_mass: Tensor = field(repr=False)  # [S]
    shared_ids: Tensor = field(repr=False)  # [S] event ids (Events numbering)
    groups: tuple[GroupWeights, ...]
    top: tuple[OffendingEvent, ...]
    mechanisms: tuple[str, ...]  # M-ids the pattern points to (hints, not verdicts)
    hints: tuple[str, ...]

    @property
    def cancels(self) -> bool:
        return self.shared_residual <= ZERO_SUM_TOL

    def to_dict(self) -> dict:
        return {
            "loss": self.loss,
            "n_responses": self.n_responses,
            "n_groups": self.n_groups,
            "n_tokens": self.n_tokens,
            "n_events": self.n_events,
            "n_shared": self.n_shared,
            "shared_residual": self.shared_residual,
            "max_residual": self.max_residual,
            "shared_events": {
                "id": self.shared_ids.tolist(),
                "K": self.shared_K.tolist(),
                "mass": self.shared_mass.tolist(),
            },
            "groups": [g.__dict__ for g in self.groups],
            "top": [e.__dict__ for e in self.top],
            "mechanisms": list(self.mechanisms),
            "hints": list(self.hints),
        }

    def to_json(self) -> str:
        def clean(x):
            if isinstance(x, float) and not math.isfinite(x):
                return str(x)
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [clean(v) for v in x]
            return x

        return json.dumps(clean(self.to_dict()), indent=2)

    def __str__(self) -> str:
        lines = [
            f"batch: {self.n_responses} responses in {self.n_groups} groups, {self.n_tokens} tokens, "
            f"{self.n_events} events ({self.n_shared} shared); loss {self.loss:.6g}",
            f"shared residual: {self.shared_residual:.3g} "
            + ("(shared events cancel)" if self.cancels else "(share of shared-event mass that does not cancel)"),
        ]
        worst = sorted(self.groups, key=lambda g: -g.residual)[:_TOP]
        if worst:
            lines.append("groups (worst first): group  shared  residual  spread  zero_sum  weights")
            for g in worst:
                w = ", ".join(f"{x:+.3f}" for x in g.weights[:8]) + (", ..." if len(g.weights) > 8 else "")
                lines.append(
                    f"  {g.group:>5}  {g.shared_events:>6}  {g.residual:8.3g}  {g.spread:6.3g}  {g.zero_sum:8.3g}  ({w})"
                )
        if self.top:
            lines.append("top offending shared events:")
            for e in self.top:
                lines.append(
                    f"  group={e.group} t={e.position} token={e.token} ...{list(e.prefix_tail)}: "
                    f"K_e={e.K:.4g} sum|kappa|={e.mass:.4g} residual={e.residual:.3g}"
                )
        for h in self.hints:
            lines.append(f"hint: {h}")
        return "\n".join(lines)


def _direction(cols: Tensor) -> tuple[Tensor, float]:
    """``cols: [S, G]`` -> (unit common direction [G], max sin angle of a column to it)."""
    norms = cols.norm(dim=1)
    top = norms.max() if norms.numel() else torch.tensor(0.0, dtype=cols.dtype)
    keep = norms > 1e-12 * top
    if not bool(keep.any()):
        return torch.zeros(cols.shape[1], dtype=cols.dtype), 0.0
    unit = cols[keep] / norms[keep, None]
    if unit.shape[0] == 1:
        return unit[0], 0.0
    direction = torch.linalg.svd(unit, full_matrices=False).Vh[0]
    # the norm of the component orthogonal to alpha: round-off sized, not sqrt(round-off)
    sin = (unit - (unit @ direction)[:, None] * direction[None, :]).norm(dim=1)
    return direction, float(sin.max())


def _hints(rollout: Rollout, groups: list[GroupWeights], residual: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Which mechanism the pattern points to, where it can tell.

    - no spread, common vector not zero-sum, but ``sum alpha_i L_i`` zero-sum: M3 (1/L_i);
    - no spread, common vector not zero-sum otherwise: M4 (advantages) or M5 (weights
      from response-level statistics);
    - nonzero coefficients on a group with tied rewards: M6 (an additive event term);
    - spread (the weights change from one shared event to the next): M2 when the batch is
      off-policy (ratio-dependent clipping), else M1/M5 (a per-token weight built from
      response-level quantities).
    """
    if residual <= ZERO_SUM_TOL:
        return (), ()
    ids: list[str] = []
    text: list[str] = []
    off = rollout.logprobs is not None and bool(((rollout.logprobs - rollout.old_logprobs).abs() > 1e-9)[rollout.mask].any())
    bad = [g for g in groups if g.residual > ZERO_SUM_TOL]
    tied = [g for g in bad if max(g.rewards) == min(g.rewards)]
    spread = [g for g in bad if g.spread > SPREAD_TOL and g not in tied]
    flat = [g for g in bad if g.spread <= SPREAD_TOL and g not in tied]
    if tied:
        ids.append("M6")
        text.append(f"M6: {len(tied)} group(s) with tied rewards still carry shared-event mass: "
                    "an additive per-occurrence term (KL, entropy bonus) that does not scale with the advantage")
    length_weighted = [g for g in flat if _zero_sum(torch.tensor(g.weights) * torch.tensor(g.lengths, dtype=torch.float64)) <= 1e-6]
    if length_weighted:
        ids.append("M3")
        text.append(f"M3: in {len(length_weighted)} group(s) the common weights are zero-sum only after "
                    "multiplying by the response lengths: per-response 1/L_i normalisation")
    others = [g for g in flat if g not in length_weighted]
    if others:
        ids += ["M1", "M4", "M5"] if off else ["M4", "M5"]
        text.append(f"{'M1/' if off else ''}M4/M5: in {len(others)} group(s) every shared event sees one common "
                    "weight vector that does not sum to zero: "
                    + ("a per-response weight built from the response's ratios (sequence coupling), " if off else "")
                    + "advantages not zero-sum, or token weights from response-level statistics")
    if spread:
        if off:
            ids.append("M2")
            text.append(f"M2: in {len(spread)} group(s) the per-response weights change from one shared event to the "
                        "next on an off-policy batch: a sign- or ratio-dependent clip/gate")
        else:
            ids += ["M1", "M5"]
            text.append(f"M1/M5: in {len(spread)} group(s) the per-response weights change from one shared event "
                        "to the next on-policy: weights coupled across the response's tokens")
    return tuple(dict.fromkeys(ids)), tuple(text)


def _zero_sum(w: Tensor) -> float:
    total = float(w.abs().sum())
    return abs(float(w.sum())) / total if total > 0 else 0.0


def inspect(loss_fn: LossFn, rollout: Rollout, logprobs: Tensor | None = None, *, top: int = _TOP,
            ev: Events | None = None) -> Inspection:
    """Report exactly, without fuzzing, how ``loss_fn`` treats the shared events of one
    real batch: every shared event's ``K_e``, the shared residual, each group's
    per-response weight vector and its distance from a common vector, the top offending
    events with their tokens, and a mechanism hint where the pattern tells one.

    ``logprobs`` defaults to ``rollout.logprobs`` (else ``rollout.old_logprobs``: on-policy).
    Everything runs in float64.
    """
    if logprobs is None:
        logprobs = rollout.logprobs if rollout.logprobs is not None else rollout.old_logprobs
    loss, kappa = loss_and_coefficients(loss_fn, logprobs, rollout)
    ev = events(rollout) if ev is None else ev
    shared_ids = ev.shared.nonzero().flatten()
    # shared events sit in each group's common prefix: sum over those columns only
    head = int(ev.position[shared_ids].max()) + 1 if len(shared_ids) else 0
    sub, ksub = ev.ids[:, :head], kappa[:, :head]
    valid = sub >= 0
    ids = sub[valid]
    K = torch.zeros(ev.count, dtype=kappa.dtype).index_add_(0, ids, ksub[valid])
    mass = torch.zeros(ev.count, dtype=kappa.dtype).index_add_(0, ids, ksub[valid].abs())
    sK, smass = K[shared_ids], mass[shared_ids]
    total = float(smass.sum())
    residual = float(sK.abs().sum()) / total if total > 0 else 0.0

    gidx = rollout.group_index
    lengths = rollout.lengths
    rewards = rollout.rewards.to(torch.float64)
    # shared events of group g are the first p_g positions (its common prefix)
    prefix = torch.zeros(rollout.n_groups, dtype=torch.long)
    if len(shared_ids):
        prefix.scatter_reduce_(0, ev.group[shared_ids], ev.position[shared_ids] + 1, reduce="amax")
    gK = torch.zeros(rollout.n_groups, dtype=kappa.dtype).index_add_(0, ev.group[shared_ids], sK.abs())
    gmass = torch.zeros(rollout.n_groups, dtype=kappa.dtype).index_add_(0, ev.group[shared_ids], smass)
    order = torch.argsort(gidx, stable=True)
    sizes = torch.bincount(gidx, minlength=rollout.n_groups).tolist()
    group_ids = rollout.group.tolist()
    groups: list[GroupWeights] = []
    start = 0
    for g, size in enumerate(sizes):
        rows = order[start : start + size]
        start += size
        p = int(prefix[g])
        cols = kappa[rows, :p].T  # [p, G]
        direction, spread = _direction(cols) if p else (torch.zeros(size, dtype=kappa.dtype), 0.0)
        r = rewards[rows]
        centred = r - r.mean()
        if float(direction @ centred) < 0 or (float(direction @ centred) == 0 and float(direction.sum()) < 0):
            direction = -direction
        gm = float(gmass[g])
        groups.append(GroupWeights(
            group=int(group_ids[int(rows[0])]),
            rows=tuple(rows.tolist()),
            shared_events=p,
            weights=tuple(direction.tolist()),
            spread=spread,
            zero_sum=_zero_sum(direction),
            residual=float(gK[g]) / gm if gm > 0 else 0.0,
            rewards=tuple(r.tolist()),
            lengths=tuple(lengths[rows].tolist()),
        ))

    worst = torch.argsort(sK.abs(), descending=True)[:top]
    offending: list[OffendingEvent] = []
    for k in worst.tolist():
        if float(sK[k].abs()) <= ZERO_SUM_TOL * float(smass[k]):
            break
        e = int(shared_ids[k])
        t = int(ev.position[e])
        g = int(ev.group[e])
        row = int(order[sum(sizes[:g])])  # any row of the group: the prefix is shared
        tail = tuple(rollout.tokens[row, max(0, t + 1 - _TAIL) : t + 1].tolist())
        m = float(smass[k])
        offending.append(OffendingEvent(
            event=e, group=int(group_ids[row]), position=t, token=tail[-1], prefix_tail=tail,
            K=float(sK[k]), mass=m, residual=abs(float(sK[k])) / m if m > 0 else 0.0,
        ))
    mech, hints = _hints(rollout, groups, residual)
    return Inspection(
        loss=float(loss),
        n_responses=rollout.n,
        n_groups=rollout.n_groups,
        n_tokens=int(rollout.mask.sum()),
        n_events=ev.count,
        n_shared=len(shared_ids),
        shared_residual=residual,
        max_residual=float((sK.abs() / smass)[smass > 0].max()) if bool((smass > 0).any()) else 0.0,
        shared_K=sK,
        shared_mass=smass,
        shared_ids=shared_ids,
        groups=tuple(groups),
        top=tuple(offending),
        mechanisms=mech,
        hints=hints,
    )


# ------------------------------------------------------------------ batch files
BATCH_FIELDS = (
    "tokens", "mask", "rewards", "group", "old_logprobs", "ref_logprobs", "entropy", "logprobs",
    "baseline_rewards", "truncated",
)


def save_batch(rollout: Rollout, path: str | Path) -> Path:
    """Write ``rollout``'s fields to ``path`` (``.safetensors`` via safetensors, anything
    else via ``torch.save`` of a ``{field: tensor}`` dict), for ``exchange inspect``."""
    path = Path(path)
    data = {name: getattr(rollout, name) for name in BATCH_FIELDS if getattr(rollout, name) is not None}
    data = {k: v.detach().cpu().contiguous() for k, v in data.items()}
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(data, str(path))
    else:
        torch.save(data, path)
    return path


def load_batch(path: str | Path) -> Rollout:
    """Read a batch written by :func:`save_batch` (or by hand).

    Format: a ``torch.save`` file (``.pt``) or a safetensors file (``.safetensors``)
    holding a mapping ``{field: tensor}`` with the :class:`Rollout` fields
    ``tokens [N,T] long``, ``mask [N,T] bool`` (a prefix of each row),
    ``rewards [N]``, ``group [N] long``, ``old_logprobs [N,T]`` and optionally
    ``logprobs [N,T]`` (the current policy; default: ``old_logprobs``, on-policy),
    ``ref_logprobs``, ``entropy``, ``baseline_rewards [N]``, ``truncated [N] bool``.
    Float fields are converted to float64.
    """
    path = Path(path)
    if not path.exists():
        raise InvalidArgument(f"batch file {path} does not exist")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        data = load_file(str(path))
    else:
        data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict):
        raise InvalidArgument(f"batch file {path}: expected a dict of tensors, got {type(data).__name__}")
    missing = [k for k in ("tokens", "mask", "rewards", "group", "old_logprobs") if k not in data]
    if missing:
        raise InvalidArgument(f"batch file {path}: missing field(s) {missing}; see exchange.checker.inspect.load_batch")
    unknown = sorted(set(data) - set(BATCH_FIELDS))
    if unknown:
        raise InvalidArgument(f"batch file {path}: unknown field(s) {unknown}; known: {list(BATCH_FIELDS)}")
    kwargs = {}
    for name in BATCH_FIELDS:
        if name not in data:
            continue
        v = data[name]
        if name in ("tokens", "group"):
            v = v.long()
        elif name in ("mask", "truncated"):
            v = v.bool()
        else:
            v = v.to(torch.float64)
        kwargs[name] = v
    return Rollout(**kwargs)
