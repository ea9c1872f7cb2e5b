"""The one example type the checker evaluates, and a property's layout of one.

An :class:`Example` is a :class:`~exchange.checker.cases.Case` plus what one property
adds to it: the (E) variant's :class:`~exchange.checker.mutations.Mutation`, or the (P)
permutation's seed. A :class:`Layout` is an example whose rewards and value seed are
still open, with the reward kinds each group may take: the bulk fuzzer draws many
configurations per layout, Hypothesis one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from exchange.checker import generators
from exchange.checker.cases import Case, GroupConfig
from exchange.checker.draw import Draw
from exchange.checker.mutations import Mutation

__all__ = ["Example", "Layout", "placeholder"]


@dataclass(frozen=True)
class Example:
    """One checked example: ``case``, and ``mutation`` (the (E) variant) or
    ``perm_seed`` (the (P) permutation) where the property needs one."""

    case: Case
    mutation: Mutation | None = None
    perm_seed: int | None = None

    def with_case(self, case: Case) -> "Example":
        return replace(self, case=case)

    def __repr__(self) -> str:
        extra = f", mutation={self.mutation!r}" if self.mutation is not None else ""
        extra += f", perm_seed={self.perm_seed!r}" if self.perm_seed is not None else ""
        return f"Example({self.case!r}{extra})"


@dataclass(frozen=True)
class Layout:
    """``example`` with placeholder rewards (0.0) and value seed 0; ``kinds[g]``: the
    reward kinds group ``g`` may take; ``distinct[g]``: its rewards must not all be
    equal."""

    example: Example
    kinds: tuple[tuple[str, ...], ...]
    distinct: tuple[bool, ...]

    def rewards(self, d: Draw) -> list[tuple[float, ...]]:
        """Each group's rewards among its kinds (the one reward draw of both fuzzers)."""
        groups = self.example.case.groups
        return [generators.rewards(d, len(g.responses), k, dist) for g, k, dist in zip(groups, self.kinds, self.distinct)]

    def complete(self, rewards: Sequence[Sequence[float]], seed: int) -> Example:
        """The example with ``rewards[g]`` for group ``g`` and value seed ``seed``."""
        case = self.example.case
        groups = tuple(replace(grp, rewards=tuple(float(x) for x in rw)) for grp, rw in zip(case.groups, rewards))
        return self.example.with_case(replace(case, groups=groups, seed=seed))


def placeholder(responses: tuple[tuple[int, ...], ...]) -> GroupConfig:
    """A group of ``responses`` whose rewards a layout leaves open."""
    return GroupConfig(responses, (0.0,) * len(responses))
