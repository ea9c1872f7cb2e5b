"""Declarative group configurations and the event-consistent rollouts they build.

A :class:`Case` lists, per group, the response token sequences and rewards. Every
per-token value (behaviour probability, ratio, reference probability, entropy) is a
function of the token's *event* (group, prefix, token), so identical events always get
identical values, as they do in a real batch. Values come from small grids, picked by a
deterministic hash of ``(seed, event)``, and can be overridden per event.

The checker mutates cases (``with_suffix_length`` ...) to build the variants of
THEORY.md section 2 "Testing these on a black box".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from exchange.errors import InvalidArgument
from exchange.core.rollout import Rollout

__all__ = [
    "GroupConfig",
    "Case",
    "build",
    "common_prefix",
    "RATIOS",
    "OLD_PROBS",
    "ENTROPIES",
]

# Ratios straddle the usual clip ranges (0.2 / 0.28) on both sides; 1.0 first so that
# shrinking moves towards on-policy. max(ratio) * max(old prob) <= 1 keeps log-probs <= 0.
RATIOS = (1.0, 0.9, 1.1, 0.7, 1.5, 0.5, 1.25, 0.85, 2.0)
OLD_PROBS = (0.5, 0.25, 0.4, 0.1, 0.05)
REF_PROBS = (0.5, 0.3, 0.2, 0.45, 0.1)
ENTROPIES = (1.0, 0.5, 1.5, 0.1, 0.8, 2.0)

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

    def __repr__(self) -> str:
        fields = [f"groups={self.groups!r}", f"off_policy={self.off_policy}", f"seed={self.seed}"]
        for name in ("ratio", "entropy", "old_prob"):
            if getattr(self, name):
                fields.append(f"{name}={getattr(self, name)!r}")
        if self.entropy_all is not None:
            fields.append(f"entropy_all={self.entropy_all}")
        if self.length_limit is not None:
            fields.append(f"length_limit={self.length_limit}")
        return "Case(" + ", ".join(fields) + ")"

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


_SALT = {"old": 1, "ratio": 2, "entropy": 3, "ref": 4}


def _pick(grid: tuple[float, ...], seed: int, key: EventKey, salt: str) -> float:
    # hash() of a tuple of ints is deterministic across processes (only str/bytes hashing
    # is randomised), and far cheaper than seeding a generator per event.
    return grid[hash((seed, _SALT[salt], key)) % len(grid)]


# CPython's tuple hash (xxHash-based, Objects/tupleobject.c, 3.8+) folds the items in one
# at a time, so the hash of the event key ``(g, *prefix, token)`` extends the hash of its
# parent's key in O(1): ``build`` is linear in the response length and picks exactly the
# values ``hash((seed, salt, key))`` picks. tests/checker/test_cases.py checks this
# against the builtin ``hash`` and the tuple-building implementation.
_MASK = (1 << 64) - 1
_XX1, _XX2, _XX5 = 11400714785074694791, 14029467366897019727, 2870177450012600261


def _fold(acc: int, item_hash: int) -> int:
    acc = (acc + (item_hash & _MASK) * _XX2) & _MASK
    acc = ((acc << 31) | (acc >> 33)) & _MASK
    return (acc * _XX1) & _MASK


def _finish(acc: int, length: int) -> int:
    acc = (acc + (length ^ (_XX5 ^ 3527539))) & _MASK
    if acc == _MASK:
        return 1546275796
    return acc - (1 << 64) if acc >> 63 else acc


def _picker(grid: tuple[float, ...], seed: int, salt: str):
    """``key_hash -> _pick(grid, seed, key, salt)`` given ``key_hash == hash(key)``."""
    acc = _fold(_fold(_XX5, hash(seed)), hash(_SALT[salt]))
    size = len(grid)
    return lambda key_hash: grid[_finish(_fold(acc, key_hash), 3) % size]


def _signed(x: int) -> int:
    return x - (1 << 64) if x >> 63 else x


def _fold_many(acc: torch.Tensor, item_hash: int | torch.Tensor) -> torch.Tensor:
    """:func:`_fold` on int64 tensors (two's-complement wrap-around = arithmetic mod 2**64)."""
    acc = acc + item_hash * _signed(_XX2)
    acc = (acc << 31) | ((acc >> 33) & ((1 << 31) - 1))
    return acc * _signed(_XX1)


def _pick_many(size: int, seed: int, salt: str, key_hash: torch.Tensor) -> torch.Tensor:
    """Indices ``hash((seed, salt, key)) % size`` for a tensor of ``hash(key)`` values."""
    acc = _fold(_fold(_XX5, hash(seed)), hash(_SALT[salt]))
    acc = _fold_many(torch.full_like(key_hash, _signed(acc)), key_hash)
    acc = acc + (3 ^ (_XX5 ^ 3527539))
    acc = torch.where(acc == -1, torch.full_like(acc, 1546275796), acc)
    return torch.remainder(acc, size)


def _log(x: torch.Tensor) -> torch.Tensor:
    """``math.log`` of each value (bit-identical to the scalar path; few distinct values)."""
    values, inverse = torch.unique(x, return_inverse=True)
    return torch.tensor([math.log(v) for v in values.tolist()], dtype=x.dtype)[inverse]


def build(case: Case) -> Rollout:
    """The event-consistent :class:`Rollout` of ``case`` (float64, ``logprobs`` filled).

    Linear in the token count. Small cases (the checker's) go token by token in Python;
    large ones hash in one Python pass (the chain is sequential) and pick grid values,
    logs and padding with tensor operations. Both give identical rollouts.
    """
    tokens = sum(len(r) for grp in case.groups for r in grp.responses)
    return _build_python(case) if tokens <= _SMALL else _build_tensor(case)


_SMALL = 2048


def _key_hashes(rows, t_max: int) -> list[int]:
    """``hash`` of every token's event key, ``t_max`` per row, padding 0: the chain of
    :func:`build` in one Python pass (it is sequential). ``rows``: (group index,
    response tokens) pairs, in row order. Shared with the bulk fuzzer's layouts."""
    hashes: list[int] = []
    for g, resp in rows:
        acc = _fold(_XX5, hash(g))
        for t, token in enumerate(resp):
            acc = _fold(acc, hash(token))
            hashes.append(_finish(acc, t + 2))
        hashes.extend([0] * (t_max - len(resp)))
    return hashes


def _build_tensor(case: Case) -> Rollout:
    """:func:`build` with tensor picks: faster above ~2k tokens."""
    rows: list[tuple[int, ...]] = []
    groups: list[int] = []
    rewards: list[float] = []
    baselines: list[float] = []
    for g, grp in enumerate(case.groups):
        for resp, reward in zip(grp.responses, grp.rewards):
            rows.append(resp)
            groups.append(g)
            rewards.append(float(reward))
            baselines.append(float(grp.baseline))
    n = len(rows)
    t_max = max(max(len(r) for r in rows), case.pad_to)
    hashes = _key_hashes(zip(groups, rows), t_max)  # padding: 0, masked out below
    tok_rows = [list(resp) + [0] * (t_max - len(resp)) for resp in rows]
    f64 = torch.float64
    key_hash = torch.tensor(hashes, dtype=torch.long).reshape(n, t_max)
    lengths = torch.tensor([len(r) for r in rows])
    tokens = torch.tensor(tok_rows, dtype=torch.long).reshape(n, t_max)
    mask = torch.arange(t_max)[None, :] < lengths[:, None]

    def grid(values: tuple[float, ...], salt: str) -> torch.Tensor:
        return torch.tensor(values, dtype=f64)[_pick_many(len(values), case.seed, salt, key_hash)]

    p_old = grid(OLD_PROBS, "old")
    ratio = grid(RATIOS, "ratio") if case.off_policy else torch.ones(n, t_max, dtype=f64)
    ent = grid(ENTROPIES, "entropy") if case.entropy_all is None else torch.full((n, t_max), float(case.entropy_all), dtype=f64)
    ref = _log(grid(REF_PROBS, "ref"))
    ratio_over, ent_over, old_over = dict(case.ratio), dict(case.entropy), dict(case.old_prob)
    if ratio_over or ent_over or old_over:
        # only positions whose key hash is an overridden key's hash build their key tuple
        overridden = {hash(k) for k in (*ratio_over, *ent_over, *old_over)}
        cand = torch.isin(key_hash, torch.tensor(sorted(overridden), dtype=torch.long)) & mask
        for i, t in cand.nonzero().tolist():
            key = (groups[i], *rows[i][: t + 1])
            if key in old_over and old_over[key]:
                p_old[i, t] = old_over[key]
            if key in ratio_over:
                ratio[i, t] = ratio_over[key]
            if key in ent_over:
                ent[i, t] = ent_over[key]
    too_big = (p_old * ratio > 1.0) & mask
    if bool(too_big.any()):
        i, t = too_big.nonzero()[0].tolist()
        raise InvalidArgument(
            f"Case: event {(groups[i], *rows[i][: t + 1])} has old prob {float(p_old[i, t])} x ratio "
            f"{float(ratio[i, t])} > 1; lower the ratio override."
        )
    zero = torch.zeros((), dtype=f64)
    old = torch.where(mask, _log(p_old), zero)
    cur = torch.where(mask, old + _log(ratio), zero)
    ref = torch.where(mask, ref, zero)
    ent = torch.where(mask, ent, zero)
    return Rollout._trusted(
        tokens=tokens,
        mask=mask,
        rewards=torch.tensor(rewards, dtype=torch.float64),
        group=torch.tensor(groups, dtype=torch.long),
        old_logprobs=old,
        ref_logprobs=ref,
        entropy=ent,
        logprobs=cur,
        baseline_rewards=torch.tensor(baselines, dtype=torch.float64),
        truncated=lengths >= case.length_limit if case.length_limit else torch.zeros(len(rows), dtype=torch.bool),
    )


def _build_python(case: Case) -> Rollout:
    """:func:`build` one token at a time in Python: faster below ~2k tokens."""
    rows: list[tuple[int, ...]] = []
    groups: list[int] = []
    rewards: list[float] = []
    baselines: list[float] = []
    for g, grp in enumerate(case.groups):
        for resp, reward in zip(grp.responses, grp.rewards):
            rows.append(resp)
            groups.append(g)
            rewards.append(float(reward))
            baselines.append(float(grp.baseline))
    t_max = max(max(len(r) for r in rows), case.pad_to)
    ratio_over = dict(case.ratio)
    ent_over = dict(case.entropy)
    old_over = dict(case.old_prob)
    # the hashes of the overridden keys: only positions whose key hash is one of them
    # build their key tuple
    overridden = {hash(k) for k in (*ratio_over, *ent_over, *old_over)}
    # The hash chain and the four picks (``_fold`` / ``_finish`` / ``_picker``) inlined:
    # this loop is the checker's hottest Python. tests/checker/test_cases.py checks it
    # against the tuple-hashing oracle.
    mask64, xx1, xx2, tail = _MASK, _XX1, _XX2, 3 ^ (_XX5 ^ 3527539)

    def salt_acc(salt: str) -> int:
        return _fold(_fold(_XX5, hash(case.seed)), hash(_SALT[salt]))

    a_old, a_ratio, a_ent, a_ref = salt_acc("old"), salt_acc("ratio"), salt_acc("entropy"), salt_acc("ref")
    n_old, n_ratio, n_ent, n_ref = len(OLD_PROBS), len(RATIOS), len(ENTROPIES), len(REF_PROBS)
    off_policy, entropy_all = case.off_policy, case.entropy_all
    log_old = {p: math.log(p) for p in OLD_PROBS}
    log_ref = [math.log(p) for p in REF_PROBS]

    def pick(acc: int, key_hash: int, size: int) -> int:
        acc = (acc + (key_hash & mask64) * xx2) & mask64
        acc = ((((acc << 31) | (acc >> 33)) & mask64) * xx1 + tail) & mask64
        if acc == mask64:
            return 1546275796 % size
        return (acc - (1 << 64) if acc >> 63 else acc) % size

    # Python lists first, one tensor each at the end: per-element tensor writes are slow.
    tok_rows, old_rows, cur_rows, ref_rows, ent_rows = [], [], [], [], []
    seen: dict[int, tuple[float, float, float, float]] = {}
    for resp, g in zip(rows, groups):
        pad = [0] * (t_max - len(resp))
        fpad = [0.0] * (t_max - len(resp))
        old_row, cur_row, ref_row, ent_row = [], [], [], []
        acc = _fold(_XX5, hash(g))
        for t, token in enumerate(resp):
            acc = (acc + (hash(token) & mask64) * xx2) & mask64
            acc = ((((acc << 31) | (acc >> 33)) & mask64) * xx1) & mask64
            h_key = _finish(acc, t + 2)
            hit = seen.get(h_key)
            if hit is not None:  # a shared event seen in an earlier row: same picks
                old_row.append(hit[0]), cur_row.append(hit[1]), ref_row.append(hit[2]), ent_row.append(hit[3])
                continue
            p_old = OLD_PROBS[pick(a_old, h_key, n_old)]
            r = RATIOS[pick(a_ratio, h_key, n_ratio)] if off_policy else 1.0
            h = entropy_all if entropy_all is not None else ENTROPIES[pick(a_ent, h_key, n_ent)]
            if h_key in overridden:
                key = (g, *resp[: t + 1])
                p_old = old_over.get(key) or p_old
                r = ratio_over.get(key, r)
                h = ent_over.get(key, h)
            if p_old * r > 1.0:
                key = (g, *resp[: t + 1])
                raise InvalidArgument(
                    f"Case: event {key} has old prob {p_old} x ratio {r} > 1; lower the ratio override."
                )
            lo = log_old[p_old] if p_old in log_old else math.log(p_old)
            old_row.append(lo)
            cur_row.append(lo if r == 1.0 else lo + math.log(r))
            ref_row.append(log_ref[pick(a_ref, h_key, n_ref)])
            ent_row.append(h)
            if h_key not in overridden:  # picks depend on the key hash alone
                seen[h_key] = (old_row[-1], cur_row[-1], ref_row[-1], h)
        tok_rows.append(list(resp) + pad)
        old_rows.append(old_row + fpad)
        cur_rows.append(cur_row + fpad)
        ref_rows.append(ref_row + fpad)
        ent_rows.append(ent_row + fpad)
    f64 = torch.float64
    lengths = torch.tensor([len(r) for r in rows])
    tokens = torch.tensor(tok_rows, dtype=torch.long)
    mask = torch.arange(t_max)[None, :] < lengths[:, None]
    old = torch.tensor(old_rows, dtype=f64)
    cur = torch.tensor(cur_rows, dtype=f64)
    ref = torch.tensor(ref_rows, dtype=f64)
    ent = torch.tensor(ent_rows, dtype=f64)
    return Rollout._trusted(
        tokens=tokens,
        mask=mask,
        rewards=torch.tensor(rewards, dtype=torch.float64),
        group=torch.tensor(groups, dtype=torch.long),
        old_logprobs=old,
        ref_logprobs=ref,
        entropy=ent,
        logprobs=cur,
        baseline_rewards=torch.tensor(baselines, dtype=torch.float64),
        truncated=lengths >= case.length_limit if case.length_limit else torch.zeros(len(rows), dtype=torch.bool),
    )
