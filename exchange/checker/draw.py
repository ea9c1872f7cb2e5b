"""A small draw interface, so that every generator of the checker is written once.

The generators (:mod:`exchange.checker.generators`) ask a :class:`Draw` for integers and
choices. Two bindings implement it: :class:`HypothesisDraw` inside a Hypothesis
``@composite`` (so Hypothesis shrinks every choice towards its first option and the
lowest integer) and :class:`RandomDraw` over a seeded ``random.Random`` (the bulk
fuzzer: no per-draw bookkeeping).
"""

from __future__ import annotations

import functools
import random
from typing import Protocol, Sequence, TypeVar

from hypothesis import strategies as st

__all__ = ["Draw", "HypothesisDraw", "RandomDraw"]

T = TypeVar("T")


class Draw(Protocol):
    def integer(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]`` (shrinks towards ``lo``)."""

    def choice(self, values: Sequence[T]) -> T:
        """One of ``values`` (shrinks towards the first)."""

    def digits(self, length: int, base: int) -> tuple[int, ...]:
        """``length`` integers in ``[0, base)`` (shrinks towards all zeros)."""


@functools.lru_cache(maxsize=4096)
def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    # Strategies built inside a composite are validated on every draw; caching the
    # objects makes generation several times faster.
    return st.integers(lo, hi)


@functools.lru_cache(maxsize=256)
def _choices(values: tuple) -> st.SearchStrategy:
    return st.sampled_from(values)


class HypothesisDraw:
    """:class:`Draw` inside a Hypothesis ``@composite`` (``draw`` is its draw function)."""

    def __init__(self, draw) -> None:
        self._draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self._draw(_ints(lo, hi))

    def choice(self, values: Sequence[T]) -> T:
        return self._draw(_choices(tuple(values)))

    def digits(self, length: int, base: int) -> tuple[int, ...]:
        # One draw for the whole sequence (its base-``base`` digits) instead of one per
        # item: generation stays fast and still shrinks towards zeros.
        code = self._draw(_ints(0, base**length - 1))
        out = []
        for _ in range(length):
            code, d = divmod(code, base)
            out.append(d)
        return tuple(out)


class RandomDraw:
    """:class:`Draw` over a seeded ``random.Random``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, values: Sequence[T]) -> T:
        return values[self.rng.randrange(len(values))]

    def digits(self, length: int, base: int) -> tuple[int, ...]:
        return tuple(self.rng.randrange(base) for _ in range(length))
