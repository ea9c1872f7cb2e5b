"""Declarative group configurations and the event-consistent rollouts they build.

A :class:`Case` lists, per group, the response token sequences and rewards. Every
per-token value (behaviour probability, ratio, reference probability, entropy, the
sampler's log-probability) is a function of the token's *event* (group, prefix, token),
so identical events always get identical values, as in a real batch. Values come from
small grids, picked by the event-key hash (:mod:`exchange.checker.event_hash`) of
``(seed, event)``, and can be overridden per event.

The checker mutates cases (:mod:`exchange.checker.mutations`) to build the variants of
THEORY.md section 2 "Testing these on a black box".
"""

from __future__ import annotations

import math
import struct
from itertools import chain
from dataclasses import dataclass, fields, replace

import torch

from exchange.checker.event_hash import key_hashes, pick, tuple_hashes
from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument

__all__ = ["GroupConfig", "Case", "build", "common_prefix", "RATIOS", "OLD_PROBS", "ENTROPIES", "SAMPLER_RATIOS"]

# Ratios straddle the usual clip ranges (0.2 / 0.28) on both sides; 1.0 first so that
# shrinking moves towards on-policy. max(ratio) * max(old prob) <= 1 keeps log-probs <= 0.
RATIOS = (1.0, 0.9, 1.1, 0.7, 1.5, 0.5, 1.25, 0.85, 2.0)
OLD_PROBS = (0.5, 0.25, 0.4, 0.1, 0.05)
REF_PROBS = (0.5, 0.3, 0.2, 0.45, 0.1)
ENTROPIES = (1.0, 0.5, 1.5, 0.1, 0.8, 2.0)
# The sampler's mismatch with the behaviour policy, pi_old / pi_sampler per event (an
# inference engine such as vLLM is another policy: its log-prob is a function of the
# event too). Both sides of 1 and beyond TRL's default cap 3.0; 1.0 first. With
# max(old prob) / min(ratio) <= 1 the sampler's log-probs stay <= 0.
SAMPLER_RATIOS = (1.0, 0.8, 1.25, 0.5, 2.0, 4.0)

EventKey = tuple  # (group index, token, token, ...): the prefix including the token


@dataclass(frozen=True)
class GroupConfig:
    """One prompt's responses (token ids, each non-empty) and their rewards."""

    responses: tuple[tuple[int, ...], ...]
    rewards: tuple[float, ...]
    baseline: float = 0.0  # per-group baseline reward (ReMax's greedy reward)

    def __post_init__(self) -> None:
        if len(self.responses) != len(self.rewards):
            raise InvalidArgument(
                f"GroupConfig: {len(self.responses)} responses but {len(self.rewards)} rewards; give one reward per response."
            )
        if len(self.responses) < 2:
            raise InvalidArgument("GroupConfig: a group needs at least 2 responses.")
        if any(len(r) == 0 for r in self.responses):
            raise InvalidArgument("GroupConfig: every response needs at least 1 token.")

    def __repr__(self) -> str:
        return f"GroupConfig(responses={self.responses!r}, rewards={self.rewards!r})"


@dataclass(frozen=True)
class Case:
    """A batch configuration: groups plus how per-event values are chosen.

    Fields:
        groups: the prompts' groups, in order (group id = index).
        off_policy: when False every ratio is 1 (``logprobs == old_logprobs``) except
            explicit ``ratio`` overrides.
        seed: picks grid values per event (deterministically).
        ratio / entropy / old_prob: overrides ``((event_key, value), ...)`` where
            ``event_key = (group, *prefix_and_token)``.
        entropy_all: if set, the entropy of every event without an override.
        pad_to: pad the token dimension to at least this length.
        length_limit: the generation limit; responses this long are ``truncated``
            (objectives such as TRL's ``mask_truncated_completions`` read it).
    """

    groups: tuple[GroupConfig, ...]
    off_policy: bool = False
    seed: int = 0
    ratio: tuple[tuple[EventKey, float], ...] = ()
    entropy: tuple[tuple[EventKey, float], ...] = ()
    old_prob: tuple[tuple[EventKey, float], ...] = ()
    entropy_all: float | None = None
    pad_to: int = 0
    length_limit: int | None = None

    def __repr__(self) -> str:  # groups, regime and seed, then the fields set away from their defaults (not pad_to)
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name in ("groups", "off_policy", "seed")
                 or f.name != "pad_to" and getattr(self, f.name) != f.default]
        return "Case(" + ", ".join(shown) + ")"

    # ------------------------------------------------------------ mutations
    def with_group(self, g: int, group: GroupConfig) -> "Case":
        groups = list(self.groups)
        groups[g] = group
        return replace(self, groups=tuple(groups))

    def with_response(self, g: int, i: int, tokens: tuple[int, ...]) -> "Case":
        responses = list(self.groups[g].responses)
        responses[i] = tuple(tokens)
        return self.with_group(g, replace(self.groups[g], responses=tuple(responses)))

    def suffix_keys(self, g: int, i: int) -> list[EventKey]:
        """Event keys of response ``i`` of group ``g`` after the group's common prefix."""
        resp = self.groups[g].responses[i]
        p = common_prefix(self.groups[g].responses)
        return [(g, *resp[: t + 1]) for t in range(p, len(resp))]

    def shared_keys(self, g: int) -> list[EventKey]:
        """Event keys of the group's common prefix (its shared events)."""
        resp = self.groups[g].responses[0]
        return [(g, *resp[: t + 1]) for t in range(common_prefix(self.groups[g].responses))]

    def with_ratio(self, keys: list[EventKey], value: float) -> "Case":
        return replace(self, ratio=self.ratio + tuple((k, value) for k in keys))

    def with_entropy(self, keys: list[EventKey], value: float) -> "Case":
        return replace(self, entropy=self.entropy + tuple((k, value) for k in keys))


def common_prefix(responses: tuple[tuple[int, ...], ...]) -> int:
    """Length of the longest prefix shared by every response."""
    n = min(len(r) for r in responses)
    first = responses[0]
    for t in range(n):
        if any(r[t] != first[t] for r in responses[1:]):
            return t
    return n


# Salts of the five per-event values (exchange.checker.event_hash.pick).
SALTS = {"old": 1, "ratio": 2, "entropy": 3, "ref": 4, "sampler": 5}
GRIDS = {"old": OLD_PROBS, "ratio": RATIOS, "entropy": ENTROPIES, "ref": REF_PROBS, "sampler": SAMPLER_RATIOS}


def _log(x: torch.Tensor) -> torch.Tensor:
    """``math.log`` of each value (bit-identical to a scalar ``math.log``; few distinct values)."""
    values, inverse = torch.unique(x, return_inverse=True)
    return torch.tensor([math.log(v) for v in values.tolist()], dtype=x.dtype, device=x.device)[inverse]


@dataclass(frozen=True)
class Template:
    """What a case fixes before its per-event values: the tokens, mask, groups, rewards,
    the hash of every token's event key and the overridden positions.

    Fields: ``rollout`` (tokens, mask, group, rewards, baselines, truncated; value fields
    are zeros), ``key_hash [N, T]`` (0 on padding), ``overrides``: ``"old"`` /
    ``"ratio"`` / ``"entropy"`` -> ``(where [N, T] bool, value [N, T] float64)``.
    """

    case: "Case"
    rollout: Rollout
    key_hash: torch.Tensor
    overrides: dict


def case_template(case: Case) -> Template:
    """The :class:`Template` of ``case`` (one hash pass; linear in the token count)."""
    rows = [(g, resp, float(reward), float(grp.baseline))
            for g, grp in enumerate(case.groups) for resp, reward in zip(grp.responses, grp.rewards)]
    n = len(rows)
    t_max = max(max(len(r) for _, r, _, _ in rows), case.pad_to)
    # One struct.pack of every token, padding included: 3x faster than array.extend per
    # row (the conversion of Python ints is most of a template's cost at L = 1024).
    pad = (0,) * t_max
    flat = chain.from_iterable(chain.from_iterable((resp, pad[: t_max - len(resp)]) for _, resp, _, _ in rows))
    tokens = torch.frombuffer(bytearray(struct.pack(f"{n * t_max}q", *flat)), dtype=torch.long).reshape(n, t_max)
    lengths = torch.tensor([len(r) for _, r, _, _ in rows])
    mask = torch.arange(t_max)[None, :] < lengths[:, None]
    group = torch.tensor([g for g, _, _, _ in rows], dtype=torch.long)
    key_hash = key_hashes(tokens, group, mask)
    overrides: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, items in (("ratio", case.ratio), ("entropy", case.entropy), ("old", case.old_prob)):
        table = dict(items)
        if name == "old":
            table = {k: v for k, v in table.items() if v}  # an old prob of 0/None keeps the grid's
        if not table:
            continue
        keys = list(table)
        hit = torch.isin(key_hash, tuple_hashes(keys)) & mask
        where = torch.zeros(n, t_max, dtype=torch.bool)
        value = torch.zeros(n, t_max, dtype=torch.float64)
        for i, t in hit.nonzero().tolist():  # a few positions: confirm the key itself
            key = (rows[i][0], *rows[i][1][: t + 1])
            if key in table:
                where[i, t] = True
                value[i, t] = table[key]
        overrides[name] = (where, value)
    zeros = torch.zeros(n, t_max, dtype=torch.float64)
    rollout = Rollout._trusted(
        tokens=tokens, mask=mask, rewards=torch.tensor([r for _, _, r, _ in rows], dtype=torch.float64), group=group,
        old_logprobs=zeros, ref_logprobs=zeros, entropy=zeros, logprobs=zeros, sampling_logprobs=zeros,
        baseline_rewards=torch.tensor([b for _, _, _, b in rows], dtype=torch.float64),
        truncated=lengths >= case.length_limit if case.length_limit else torch.zeros(n, dtype=torch.bool))
    return Template(case, rollout, key_hash, overrides)


_LOG_GRIDS = {salt: torch.tensor([math.log(v) for v in grid], dtype=torch.float64) for salt, grid in GRIDS.items()}
_VALUE_GRIDS = {salt: torch.tensor(grid, dtype=torch.float64) for salt, grid in GRIDS.items()}


def case_values(tmpl: Template, seeds: list[int] | int) -> dict[str, torch.Tensor]:
    """The per-event values of ``tmpl`` under each seed: ``old_logprobs``, ``logprobs``,
    ``ref_logprobs``, ``entropy``, ``sampling_logprobs`` (the behaviour log-prob minus
    the log of the event's :data:`SAMPLER_RATIOS` pick, capped at 0), each ``[K, N, T]``
    for ``K`` seeds (``[N, T]`` for an int). Raises :class:`InvalidArgument` when an
    override makes a probability > 1."""
    case, kh, mask = tmpl.case, tmpl.key_hash, tmpl.rollout.mask
    batched = not isinstance(seeds, int)
    seeds_t = torch.tensor(list(seeds) if batched else [seeds], dtype=torch.long)
    shape = (len(seeds_t), *kh.shape)

    salts = ("old", "ref", "sampler") + (("ratio",) if case.off_policy else ()) + (("entropy",) if case.entropy_all is None else ())
    idx = dict(zip(salts, pick(kh, seeds_t, torch.tensor([SALTS[s] for s in salts]),
                               torch.tensor([len(GRIDS[s]) for s in salts])).unbind(0)))
    log_old = _LOG_GRIDS["old"][idx["old"]]
    log_ratio = _LOG_GRIDS["ratio"][idx["ratio"]] if case.off_policy else torch.zeros(shape, dtype=torch.float64)
    if case.entropy_all is None:
        ent = _VALUE_GRIDS["entropy"][idx["entropy"]]
    else:
        ent = torch.full(shape, float(case.entropy_all), dtype=torch.float64)
    for name, target in (("old", log_old), ("ratio", log_ratio), ("entropy", ent)):
        if name in tmpl.overrides:
            where, value = tmpl.overrides[name]
            target[:, where] = value[where] if name == "entropy" else _log(value[where])
    zero = torch.zeros((), dtype=torch.float64)
    old = torch.where(mask, log_old, zero)
    cur = torch.where(mask, old + log_ratio, zero)
    too_big = (cur > 0) & mask
    if bool(too_big.any()):
        _, i, t = too_big.nonzero()[0].tolist()
        key = (int(tmpl.rollout.group[i]), *tmpl.rollout.tokens[i, : t + 1].tolist())
        raise InvalidArgument(f"Case: event {key} has old prob x ratio > 1; lower the ratio override.")
    out = {
        "old_logprobs": old,
        "logprobs": cur,
        "ref_logprobs": torch.where(mask, _LOG_GRIDS["ref"][idx["ref"]], zero),
        "entropy": torch.where(mask, ent, zero),
        # pi_sampler = pi_old / ratio: a function of the event; capped at log 1 for an
        # overridden old probability the grid's ratios would push above 1
        "sampling_logprobs": torch.where(mask, (old - _LOG_GRIDS["sampler"][idx["sampler"]]).clamp(max=0.0), zero),
    }
    return out if batched else {k: v[0] for k, v in out.items()}


def build(case: Case) -> Rollout:
    """The event-consistent :class:`Rollout` of ``case`` (float64, ``logprobs`` filled):
    its :func:`case_template` with the values of ``case.seed``. Every per-event value is
    picked by :func:`exchange.checker.event_hash.pick` from the event's key hash, so
    identical events get identical values. Linear in the token count, vectorised."""
    tmpl = case_template(case)
    r = tmpl.rollout  # its five value fields replaced, without re-validating what the template fixed
    return Rollout._trusted(tokens=r.tokens, mask=r.mask, rewards=r.rewards, group=r.group,
                            baseline_rewards=r.baseline_rewards, truncated=r.truncated, **case_values(tmpl, case.seed))
