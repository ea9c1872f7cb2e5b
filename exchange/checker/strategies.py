"""Hypothesis strategies for group configurations (public: ``exchange.checker.strategies``).

They follow Hypothesis conventions: keyword-only ``min_*``/``max_*`` bounds, and
``InvalidArgument`` for impossible bounds rather than an empty strategy. Generated values
are :class:`~exchange.checker.cases.Case` objects (which print as the call that built them) or
the :class:`~exchange.Rollout` they build.

Coverage (issue 2): group sizes 2-16, several groups per batch, lengths 1-32, shared
prefixes of any length, identical responses, binary / continuous / tied rewards
(including all-equal), on- and off-policy log-probs whose ratios straddle the usual clip
ranges, and event-consistent entropies.
"""

from __future__ import annotations

import functools
import random

from hypothesis import errors as hypothesis_errors
from hypothesis import strategies as st

from exchange.checker.cases import Case, GroupConfig, build, common_prefix
from exchange.errors import InvalidArgument

__all__ = [
    "InvalidStrategyArgument",
    "rewards",
    "group_configs",
    "identical_group_configs",
    "cases",
    "rollouts",
    "mutations",
]

REWARD_KINDS = ("binary", "continuous", "tied")
_REWARD_VALUES = (0.0, 1.0, 0.5, -1.0, 2.0, 0.25, 3.0)


class InvalidStrategyArgument(InvalidArgument, hypothesis_errors.InvalidArgument):
    """A strategy was called with bounds it cannot satisfy. Both exchange's
    ``InvalidArgument`` and Hypothesis's, as Hypothesis's own strategies raise: the one
    boundary where this package's errors meet Hypothesis's."""


class _Named(st.SearchStrategy):
    """A strategy that prints as the public call that built it (``cases(max_groups=2)``),
    as Hypothesis's own strategies do, instead of the private composite behind it."""

    def __init__(self, inner: st.SearchStrategy, call: str) -> None:
        super().__init__()
        self._inner = inner
        self._call = call

    def do_draw(self, data):
        return data.draw(self._inner)

    def __repr__(self) -> str:
        return self._call


def _call(name: str, **kwargs) -> str:
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


def _check_bounds(name: str, lo: int, hi: int, floor: int) -> None:
    if lo < floor:
        raise InvalidStrategyArgument(f"Cannot have min_{name}={lo} < {floor}.")
    if hi < lo:
        raise InvalidStrategyArgument(f"Cannot have max_{name}={hi} < min_{name}={lo}.")


@functools.lru_cache(maxsize=4096)
def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    # Strategies built inside a composite are validated on every draw; caching the
    # objects makes generation several times faster.
    return st.integers(lo, hi)


@functools.lru_cache(maxsize=64)
def _choice(values: tuple) -> st.SearchStrategy:
    return st.sampled_from(values)


@functools.lru_cache(maxsize=4096)
def _token_seqs(length: int, vocab: int) -> st.SearchStrategy[tuple[int, ...]]:
    """``length`` token ids in ``0..vocab-1`` from one integer (its base-``vocab`` digits):
    one draw per sequence instead of one per token, and it shrinks towards all zeros."""

    def digits(code: int) -> tuple[int, ...]:
        out = []
        for _ in range(length):
            code, d = divmod(code, vocab)
            out.append(d)
        return tuple(out)

    return _ints(0, vocab**length - 1).map(digits)


def rewards(size: int, *, kinds: tuple[str, ...] = REWARD_KINDS) -> st.SearchStrategy[tuple[float, ...]]:
    """``size`` rewards of one kind: binary {0,1}, continuous (a small grid, ties
    possible) or tied (all equal)."""
    _check_kinds("kinds", kinds)
    return _rewards(size, tuple(kinds))


def _check_kinds(name: str, kinds: tuple[str, ...]) -> None:
    bad = [k for k in kinds if k not in REWARD_KINDS]
    if bad or not kinds:
        raise InvalidStrategyArgument(f"{name}={kinds!r}: choose from {REWARD_KINDS}.")


@functools.lru_cache(maxsize=1024)
def _rewards(size: int, kinds: tuple[str, ...]) -> st.SearchStrategy[tuple[float, ...]]:
    return _rewards_composite(size, kinds)


@st.composite
def _rewards_composite(draw, size: int, kinds: tuple[str, ...]) -> tuple[float, ...]:
    # One integer whose digits index the values: one draw per group, shrinking to 0s.
    kind = draw(_choice(kinds))
    if kind == "tied":
        return (draw(_choice(_REWARD_VALUES)),) * size
    values = (0.0, 1.0) if kind == "binary" else _REWARD_VALUES
    return tuple(values[d] for d in draw(_token_seqs(size, len(values))))


@st.composite
def group_configs(
    draw,
    *,
    min_size: int = 2,
    max_size: int = 16,
    min_length: int = 1,
    max_length: int = 32,
    vocab: int = 4,
    reward_kinds: tuple[str, ...] = REWARD_KINDS,
) -> GroupConfig:
    """One group: a shared prefix of any length, then per-response suffixes; some
    responses are copies of an earlier one, so identical responses occur.

    A handful of draws per group (size, prefix, suffix-length bound, a structure seed,
    rewards) keeps generation fast; each shrinks towards the simplest group."""
    _check_bounds("size", min_size, max_size, 2)
    _check_bounds("length", min_length, max_length, 1)
    if vocab < 1:
        raise InvalidStrategyArgument(f"Cannot have vocab={vocab} < 1.")
    _check_kinds("reward_kinds", reward_kinds)
    size = draw(_ints(min_size, max_size))
    prefix_len = draw(_ints(0, max_length))
    prefix = draw(_token_seqs(prefix_len, vocab))
    lo = max(min_length - prefix_len, 0 if prefix_len else 1)
    hi = max(lo, max_length - prefix_len)
    longest = draw(_ints(lo, hi))  # bound on suffix lengths: shrinks to short groups
    rng = random.Random(draw(_ints(0, 2**32 - 1)))  # structure: copies, lengths, tokens
    responses = _responses(rng, size, prefix, lo, longest, vocab)
    return GroupConfig(responses, draw(rewards(size, kinds=reward_kinds)))


def _responses(rng: random.Random, size: int, prefix: tuple[int, ...], lo: int, longest: int,
               vocab: int) -> tuple[tuple[int, ...], ...]:
    """``size`` responses after a common ``prefix``: each one, after the first, is a copy
    of an earlier one with probability 1/4, else a suffix of ``lo..longest`` tokens
    below ``vocab``. Shared with the bulk fuzzer's layouts (one draw order for both)."""
    responses: list[tuple[int, ...]] = []
    for i in range(size):
        if i and rng.random() < 0.25:
            responses.append(responses[rng.randrange(i)])
            continue
        n = rng.randint(lo, longest)
        responses.append(prefix + tuple(rng.randrange(vocab) for _ in range(n)))
    return tuple(responses)


@st.composite
def identical_group_configs(
    draw, *, min_size: int = 2, max_size: int = 16, min_length: int = 1, max_length: int = 32, vocab: int = 4
) -> GroupConfig:
    """A group of G copies of one response with rewards that are not all equal (Z test)."""
    _check_bounds("size", min_size, max_size, 2)
    _check_bounds("length", min_length, max_length, 1)
    size = draw(_ints(min_size, max_size))
    length = draw(_ints(min_length, max_length))
    resp = draw(_token_seqs(length, vocab))
    rw = draw(rewards(size, kinds=("binary", "continuous")).filter(lambda r: len(set(r)) > 1))
    return GroupConfig((resp,) * size, rw)


def cases(
    *,
    min_groups: int = 1,
    max_groups: int = 4,
    off_policy: bool | None = None,
    groups: st.SearchStrategy[GroupConfig] | None = None,
    **group_kwargs,
) -> st.SearchStrategy[Case]:
    """A batch of groups. ``off_policy=None`` draws both regimes; ``groups`` replaces the
    per-group strategy (default :func:`group_configs` with ``group_kwargs``)."""
    _check_bounds("groups", min_groups, max_groups, 1)
    group_strategy = groups if groups is not None else group_configs(**group_kwargs)
    inner = _cases(st.lists(group_strategy, min_size=min_groups, max_size=max_groups), off_policy)
    given = {k: v for k, v in dict(min_groups=min_groups, max_groups=max_groups, off_policy=off_policy).items()
             if v != {"min_groups": 1, "max_groups": 4, "off_policy": None}[k]}
    if groups is not None:
        given["groups"] = groups
    return _Named(inner, _call("cases", **given, **group_kwargs))


@st.composite
def _cases(draw, group_lists: st.SearchStrategy, off_policy: bool | None) -> Case:
    gs = tuple(draw(group_lists))
    off = draw(_choice((False, True))) if off_policy is None else off_policy
    # Sometimes a generation limit at the longest response: those count as truncated.
    limit = max(len(r) for g in gs for r in g.responses) if draw(_choice((False, True))) else None
    return Case(groups=gs, off_policy=off, seed=draw(_ints(0, 2**16)), length_limit=limit)


def rollouts(**case_kwargs) -> st.SearchStrategy:
    """Event-consistent :class:`~exchange.Rollout` s (``cases(...)`` built)."""
    return _Named(cases(**case_kwargs).map(build), _call("rollouts", **case_kwargs))


# ------------------------------------------------------------------ mutations
@st.composite
def _mutation(draw, case: Case, off_policy: bool):
    from exchange.checker.mutations import Mutation

    g = draw(_ints(0, len(case.groups) - 1))
    grp = case.groups[g]
    i = draw(_ints(0, len(grp.responses) - 1))
    kinds = ("length", "tokens", "entropy") + (("ratio", "shared_ratio") if off_policy else ())
    kind = draw(_choice(kinds))
    p = common_prefix(grp.responses)
    if kind == "length":
        value = draw(_ints(max(p, 1), max(p, 1) + 8))
    elif kind == "tokens":
        value = draw(_ints(0, 2**16))
    elif kind in ("ratio", "shared_ratio"):
        value = draw(_choice((0.5, 0.7, 0.9, 1.1, 1.25, 1.5, 2.0)))
    else:
        value = draw(_choice((0.1, 0.5, 1.5, 3.0)))
    position = draw(_ints(0, max(p - 1, 0)))
    return Mutation(kind=kind, group=g, response=i, value=value, position=position)


def mutations(*, off_policy: bool = False, **case_kwargs) -> st.SearchStrategy:
    """``(case, mutation)`` pairs for the exchangeability test: a mutation changes one
    response's suffix (length, tokens, entropies, ratios) or moves a shared event's
    ratio, leaving the group's shared prefix in place."""
    inner = _with_mutation(cases(off_policy=off_policy, **case_kwargs), off_policy)
    return _Named(inner, _call("mutations", **({"off_policy": True} if off_policy else {}), **case_kwargs))


@st.composite
def _with_mutation(draw, case_strategy: st.SearchStrategy, off_policy: bool):
    case = draw(case_strategy)
    return case, draw(_mutation(case, off_policy))
