"""Hypothesis strategies for group configurations (public: ``exchange.strategies``).

They follow Hypothesis conventions: keyword-only ``min_*``/``max_*`` bounds, and
``InvalidArgument`` for impossible bounds rather than an empty strategy. Generated values
are :class:`~exchange.cases.Case` objects (which print as the call that built them) or
the :class:`~exchange.Rollout` they build.

Coverage (issue 2): group sizes 2-16, several groups per batch, lengths 1-32, shared
prefixes of any length, identical responses, binary / continuous / tied rewards
(including all-equal), on- and off-policy log-probs whose ratios straddle the usual clip
ranges, and event-consistent entropies.
"""

from __future__ import annotations

from hypothesis import strategies as st

from exchange.cases import Case, GroupConfig, build, common_prefix
from exchange.errors import InvalidArgument

__all__ = [
    "rewards",
    "group_configs",
    "identical_group_configs",
    "cases",
    "rollouts",
    "mutations",
]

REWARD_KINDS = ("binary", "continuous", "tied")
_REWARD_VALUES = (0.0, 1.0, 0.5, -1.0, 2.0, 0.25, 3.0)


def _check_bounds(name: str, lo: int, hi: int, floor: int) -> None:
    if lo < floor:
        raise InvalidArgument(f"Cannot have min_{name}={lo} < {floor}.")
    if hi < lo:
        raise InvalidArgument(f"Cannot have max_{name}={hi} < min_{name}={lo}.")


def _token_seqs(length: int, vocab: int) -> st.SearchStrategy[tuple[int, ...]]:
    """``length`` token ids in ``0..vocab-1`` from one integer (its base-``vocab`` digits):
    one draw per sequence instead of one per token, and it shrinks towards all zeros."""

    def digits(code: int) -> tuple[int, ...]:
        out = []
        for _ in range(length):
            code, d = divmod(code, vocab)
            out.append(d)
        return tuple(out)

    return st.integers(0, vocab**length - 1).map(digits)


@st.composite
def rewards(draw, size: int, *, kinds: tuple[str, ...] = REWARD_KINDS) -> tuple[float, ...]:
    """``size`` rewards of one kind: binary {0,1}, continuous (a small grid, ties
    possible) or tied (all equal)."""
    bad = [k for k in kinds if k not in REWARD_KINDS]
    if bad or not kinds:
        raise InvalidArgument(f"kinds={kinds!r}: choose from {REWARD_KINDS}.")
    kind = draw(st.sampled_from(kinds))
    if kind == "binary":
        return tuple(draw(st.lists(st.sampled_from((1.0, 0.0)), min_size=size, max_size=size)))
    if kind == "continuous":
        return tuple(draw(st.lists(st.sampled_from(_REWARD_VALUES), min_size=size, max_size=size)))
    value = draw(st.sampled_from(_REWARD_VALUES))
    return (value,) * size


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
    """One group: a shared prefix of any length, then per-response suffixes (some
    responses copied verbatim from another, so identical responses occur)."""
    _check_bounds("size", min_size, max_size, 2)
    _check_bounds("length", min_length, max_length, 1)
    if vocab < 1:
        raise InvalidArgument(f"Cannot have vocab={vocab} < 1.")
    size = draw(st.integers(min_size, max_size))
    prefix_len = draw(st.integers(0, max_length))
    prefix = draw(_token_seqs(prefix_len, vocab))
    responses: list[tuple[int, ...]] = []
    for i in range(size):
        if i and draw(st.booleans()):
            responses.append(responses[draw(st.integers(0, i - 1))])
            continue
        lo = max(min_length - len(prefix), 0 if prefix else 1)
        hi = max_length - len(prefix)
        suffix_len = draw(st.integers(lo, max(lo, hi)))
        responses.append(prefix + draw(_token_seqs(suffix_len, vocab)))
    return GroupConfig(tuple(responses), draw(rewards(size, kinds=reward_kinds)))


@st.composite
def identical_group_configs(
    draw, *, min_size: int = 2, max_size: int = 16, min_length: int = 1, max_length: int = 32, vocab: int = 4
) -> GroupConfig:
    """A group of G copies of one response with rewards that are not all equal (Z test)."""
    _check_bounds("size", min_size, max_size, 2)
    _check_bounds("length", min_length, max_length, 1)
    size = draw(st.integers(min_size, max_size))
    length = draw(st.integers(min_length, max_length))
    resp = draw(_token_seqs(length, vocab))
    rw = draw(rewards(size, kinds=("binary", "continuous")).filter(lambda r: len(set(r)) > 1))
    return GroupConfig((resp,) * size, rw)


@st.composite
def cases(
    draw,
    *,
    min_groups: int = 1,
    max_groups: int = 4,
    off_policy: bool | None = None,
    groups=None,
    **group_kwargs,
) -> Case:
    """A batch of groups. ``off_policy=None`` draws both regimes; ``groups`` replaces the
    per-group strategy (default :func:`group_configs` with ``group_kwargs``)."""
    _check_bounds("groups", min_groups, max_groups, 1)
    group_strategy = groups if groups is not None else group_configs(**group_kwargs)
    gs = tuple(draw(st.lists(group_strategy, min_size=min_groups, max_size=max_groups)))
    off = draw(st.booleans()) if off_policy is None else off_policy
    return Case(groups=gs, off_policy=off, seed=draw(st.integers(0, 2**16)))


def rollouts(**case_kwargs) -> st.SearchStrategy:
    """Event-consistent :class:`~exchange.Rollout` s (``cases(...)`` built)."""
    return cases(**case_kwargs).map(build)


# ------------------------------------------------------------------ mutations
@st.composite
def _mutation(draw, case: Case, off_policy: bool):
    from exchange.mutations import Mutation

    g = draw(st.integers(0, len(case.groups) - 1))
    grp = case.groups[g]
    i = draw(st.integers(0, len(grp.responses) - 1))
    kinds = ["length", "tokens", "entropy"] + (["ratio", "shared_ratio"] if off_policy else [])
    kind = draw(st.sampled_from(kinds))
    p = common_prefix(grp.responses)
    if kind == "length":
        value = draw(st.integers(max(p, 1), max(p, 1) + 8))
    elif kind == "tokens":
        value = draw(st.integers(0, 2**16))
    elif kind in ("ratio", "shared_ratio"):
        value = draw(st.sampled_from((0.5, 0.7, 0.9, 1.1, 1.25, 1.5, 2.0)))
    else:
        value = draw(st.sampled_from((0.1, 0.5, 1.5, 3.0)))
    position = draw(st.integers(0, max(p - 1, 0)))
    return Mutation(kind=kind, group=g, response=i, value=value, position=position)


@st.composite
def mutations(draw, *, off_policy: bool = False, **case_kwargs):
    """``(case, mutation)`` pairs for the exchangeability test: a mutation changes one
    response's suffix (length, tokens, entropies, ratios) or moves a shared event's
    ratio, leaving the group's shared prefix in place."""
    case = draw(cases(off_policy=off_policy, **case_kwargs))
    return case, draw(_mutation(case, off_policy))
