"""Hypothesis strategies for group configurations (public: ``exchange.checker.strategies``).

They follow Hypothesis conventions: keyword-only ``min_*``/``max_*`` bounds, and
``InvalidArgument`` for impossible bounds rather than an empty strategy. Each one binds
a generator of :mod:`exchange.checker.generators` (the ones the bulk fuzzer runs too)
to Hypothesis through :class:`~exchange.checker.draw.HypothesisDraw`. Generated values
are :class:`~exchange.checker.cases.Case` objects (which print as the call that built
them), :class:`~exchange.checker.examples.Example` s, or the :class:`~exchange.Rollout`
they build.
"""

from __future__ import annotations

import inspect

from hypothesis import errors as hypothesis_errors
from hypothesis import strategies as st

from exchange.checker import generators
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.draw import HypothesisDraw
from exchange.checker.examples import Example
from exchange.checker.generators import REWARD_KINDS, Sizes
from exchange.checker.mutations import VOCAB
from exchange.errors import InvalidArgument

__all__ = ["InvalidStrategyArgument", "rewards", "group_configs", "identical_group_configs", "cases", "rollouts",
           "mutations"]


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


def _call(fn, **kwargs) -> str:
    """``fn``'s call as a user writes it: the arguments that differ from its defaults."""
    params = inspect.signature(fn).parameters
    shown = [f"{k}={v!r}" for k, v in kwargs.items() if k not in params or v != params[k].default]
    return f"{fn.__name__}({', '.join(shown)})"


def _check_bounds(name: str, lo: int, hi: int, floor: int) -> None:
    if lo < floor:
        raise InvalidStrategyArgument(f"Cannot have min_{name}={lo} < {floor}.")
    if hi < lo:
        raise InvalidStrategyArgument(f"Cannot have max_{name}={hi} < min_{name}={lo}.")


def _check_kinds(name: str, kinds: tuple[str, ...]) -> None:
    bad = [k for k in kinds if k not in REWARD_KINDS]
    if bad or not kinds:
        raise InvalidStrategyArgument(f"{name}={kinds!r}: choose from {REWARD_KINDS}.")


def _sizes(min_size: int, max_size: int, min_length: int, max_length: int, vocab: int) -> Sizes:
    _check_bounds("size", min_size, max_size, 2)
    _check_bounds("length", min_length, max_length, 1)
    if vocab < 1:
        raise InvalidStrategyArgument(f"Cannot have vocab={vocab} < 1.")
    return Sizes(min_size, max_size, min_length, max_length, vocab)


@st.composite
def _groups(draw, responses, sizes: Sizes, kinds: tuple[str, ...], distinct: bool) -> GroupConfig:
    """One group of ``responses(d, sizes)`` (a generator) and its rewards among ``kinds``."""
    d = HypothesisDraw(draw)
    resp = responses(d, sizes)
    return GroupConfig(resp, generators.rewards(d, len(resp), kinds, distinct))


def rewards(size: int, *, kinds: tuple[str, ...] = REWARD_KINDS) -> st.SearchStrategy[tuple[float, ...]]:
    """``size`` rewards of one kind: binary {0,1}, continuous (a small grid, ties
    possible) or tied (all equal)."""
    _check_kinds("kinds", kinds)
    return st.composite(lambda draw: generators.rewards(HypothesisDraw(draw), size, tuple(kinds)))()


def group_configs(*, min_size: int = 2, max_size: int = 16, min_length: int = 1, max_length: int = 32,
                  vocab: int = VOCAB, reward_kinds: tuple[str, ...] = REWARD_KINDS) -> st.SearchStrategy[GroupConfig]:
    """One group: a shared prefix of any length, then per-response suffixes; some
    responses are copies of an earlier one, so identical responses occur."""
    sizes = _sizes(min_size, max_size, min_length, max_length, vocab)
    _check_kinds("reward_kinds", reward_kinds)
    inner = _groups(generators.group, sizes, tuple(reward_kinds), False)
    return _Named(inner, _call(group_configs, min_size=min_size, max_size=max_size, min_length=min_length,
                                 max_length=max_length, vocab=vocab, reward_kinds=reward_kinds))


def identical_group_configs(*, min_size: int = 2, max_size: int = 16, min_length: int = 1, max_length: int = 32,
                            vocab: int = VOCAB) -> st.SearchStrategy[GroupConfig]:
    """A group of G copies of one response with rewards that are not all equal (Z test)."""
    inner = _groups(generators.identical_group, _sizes(min_size, max_size, min_length, max_length, vocab),
                    ("binary", "continuous"), True)
    return _Named(inner, _call(identical_group_configs, min_size=min_size, max_size=max_size, min_length=min_length,
                               max_length=max_length, vocab=vocab))


def cases(*, min_groups: int = 1, max_groups: int = 4, off_policy: bool | None = None,
          groups: st.SearchStrategy[GroupConfig] | None = None, **group_kwargs) -> st.SearchStrategy[Case]:
    """A batch of groups. ``off_policy=None`` draws both regimes; ``groups`` replaces the
    per-group strategy (default :func:`group_configs` with ``group_kwargs``)."""
    _check_bounds("groups", min_groups, max_groups, 1)
    group_strategy = groups if groups is not None else group_configs(**group_kwargs)
    lists = st.lists(group_strategy, min_size=min_groups, max_size=max_groups)

    @st.composite
    def inner(draw) -> Case:
        return generators.case(HypothesisDraw(draw), list(draw(lists)), off_policy)

    return _Named(inner(), _call(cases, min_groups=min_groups, max_groups=max_groups, off_policy=off_policy,
                                 groups=groups, **group_kwargs))


def rollouts(**case_kwargs) -> st.SearchStrategy:
    """Event-consistent :class:`~exchange.Rollout` s (``cases(...)`` built)."""
    return _Named(cases(**case_kwargs).map(build), _call(rollouts, **case_kwargs))


def mutations(*, off_policy: bool = False, **case_kwargs) -> st.SearchStrategy[Example]:
    """Examples for the exchangeability test: a case and a mutation that changes one
    response's suffix (length, tokens, entropies, ratios) or moves a shared event's
    ratio, leaving the group's shared prefix in place."""
    case_strategy = cases(off_policy=off_policy, **case_kwargs)

    @st.composite
    def inner(draw) -> Example:
        c = draw(case_strategy)
        return Example(c, mutation=generators.mutation(HypothesisDraw(draw), c, off_policy))

    return _Named(inner(), _call(mutations, off_policy=off_policy, **case_kwargs))
