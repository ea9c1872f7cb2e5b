"""The checker's generators, written once against :class:`exchange.checker.draw.Draw`.

Hypothesis (:mod:`exchange.checker.strategies`, the per-example search and shrinking)
and the bulk fuzzer (:mod:`exchange.checker.bulk`) both call these functions; only the
draw binding differs. Coverage (issue 2): group sizes 2-16, several groups per batch,
lengths 1-32, shared prefixes of any length, identical responses, binary / continuous /
tied rewards (including all-equal), on- and off-policy log-probs whose ratios straddle
the usual clip ranges, and event-consistent entropies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from exchange.checker.cases import Case, GroupConfig, common_prefix
from exchange.checker.draw import Draw
from exchange.checker.mutations import VOCAB, Mutation

__all__ = ["REWARD_KINDS", "REWARD_VALUES", "Sizes", "DEFAULT_SIZES", "rewards", "group", "identical_group", "case",
           "mutation"]

REWARD_KINDS = ("binary", "continuous", "tied")
REWARD_VALUES = (0.0, 1.0, 0.5, -1.0, 2.0, 0.25, 3.0)
_RATIO_VALUES = (0.5, 0.7, 0.9, 1.1, 1.25, 1.5, 2.0)
_ENTROPY_VALUES = (0.1, 0.5, 1.5, 3.0)


@dataclass(frozen=True)
class Sizes:
    """Bounds of a generated group: responses per group, tokens per response, vocabulary."""

    min_size: int = 2
    max_size: int = 16
    min_length: int = 1
    max_length: int = 32
    vocab: int = VOCAB


# Moderate sizes for the properties keep a 200-example run in seconds; the public
# strategies reach G=16 and L=32 (tests fuzz those bounds directly).
DEFAULT_SIZES = Sizes(max_size=8, max_length=12)


def rewards(d: Draw, size: int, kinds: tuple[str, ...] = REWARD_KINDS, distinct: bool = False) -> tuple[float, ...]:
    """``size`` rewards of one kind among ``kinds``: binary {0, 1}, continuous (a small
    grid, ties possible) or tied (all equal). ``distinct``: not all equal (the first
    reward is moved off the others' common value when they tie)."""
    kind = d.choice(kinds)
    if kind == "tied":
        out = (d.choice(REWARD_VALUES),) * size
    else:
        values = (0.0, 1.0) if kind == "binary" else REWARD_VALUES
        out = tuple(values[i] for i in d.digits(size, len(values)))
    if distinct and len(set(out)) < 2:
        out = (0.0 if out[0] == 1.0 else 1.0,) + out[1:]
    return out


def group(d: Draw, sizes: Sizes = DEFAULT_SIZES) -> tuple[tuple[int, ...], ...]:
    """One group's responses: a shared prefix of any length, then per-response suffixes
    of ``lo..longest`` tokens; each response after the first is a copy of an earlier one
    with probability 1/4, so identical responses occur. A handful of draws per group
    (size, prefix, suffix-length bound, a structure seed), each shrinking towards the
    simplest group."""
    size = d.integer(sizes.min_size, sizes.max_size)
    prefix_len = d.integer(0, sizes.max_length)
    prefix = d.digits(prefix_len, sizes.vocab)
    lo = max(sizes.min_length - prefix_len, 0 if prefix_len else 1)
    hi = max(lo, sizes.max_length - prefix_len)
    longest = d.integer(lo, hi)  # bound on suffix lengths: shrinks to short groups
    rng = random.Random(d.integer(0, 2**32 - 1))  # structure: copies, lengths, tokens
    out: list[tuple[int, ...]] = []
    for i in range(size):
        if i and rng.random() < 0.25:
            out.append(out[rng.randrange(i)])
        else:
            out.append(prefix + tuple(rng.randrange(sizes.vocab) for _ in range(rng.randint(lo, longest))))
    return tuple(out)


def identical_group(d: Draw, sizes: Sizes = DEFAULT_SIZES) -> tuple[tuple[int, ...], ...]:
    """G copies of one response (the (Z) test)."""
    size = d.integer(sizes.min_size, sizes.max_size)
    length = d.integer(sizes.min_length, sizes.max_length)
    return (d.digits(length, sizes.vocab),) * size


def case(d: Draw, groups: list[GroupConfig], off_policy: bool | None) -> Case:
    """A batch of ``groups``: the regime (drawn when ``off_policy`` is None), the seed of
    every per-event value, and sometimes a generation limit at the longest response,
    whose responses then count as truncated."""
    off = d.choice((False, True)) if off_policy is None else off_policy
    limit = None
    if d.choice((False, True)):
        limit = max(len(r) for g in groups for r in g.responses)
    return Case(groups=tuple(groups), off_policy=off, seed=d.integer(0, 2**16), length_limit=limit)


def mutation(d: Draw, c: Case, off_policy: bool) -> Mutation:
    """A change of one response's suffix (length, tokens, entropies, ratios) or of one
    shared event's ratio (off-policy), leaving the group's shared prefix in place."""
    g = d.integer(0, len(c.groups) - 1)
    grp = c.groups[g]
    i = d.integer(0, len(grp.responses) - 1)
    kind = d.choice(("length", "tokens", "entropy") + (("ratio", "shared_ratio") if off_policy else ()))
    p = common_prefix(grp.responses)
    if kind == "length":
        value = d.integer(max(p, 1), max(p, 1) + 8)
    elif kind == "tokens":
        value = d.integer(0, 2**16)
    elif kind in ("ratio", "shared_ratio"):
        value = d.choice(_RATIO_VALUES)
    else:
        value = d.choice(_ENTROPY_VALUES)
    return Mutation(kind=kind, group=g, response=i, value=value, position=d.integer(0, max(p - 1, 0)))
