"""Greedy shrinking of a failing example, when Hypothesis finds no failure of its own.

In passes over five kinds of step, smallest structure first: drop a group, drop a
response, drop one token (any position of one response; where the property needs
identical responses, the same position of every response), simplify one reward (to 0,
else to 1), and drop the generation limit, the value seed and the (E) mutation's or (P)
permutation's settings. A step is kept when the property still fails; passes repeat
until one changes nothing. What a step may not break is the property's own
:class:`~exchange.checker.properties.base.ShrinkRules`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

from exchange.checker.cases import GroupConfig
from exchange.checker.examples import Example
from exchange.checker.properties.base import ShrinkRules

__all__ = ["shrink"]

# Candidates tried per shrink at most: a bound on the evaluations of the property one
# failure's shrinking may spend (each candidate is one).
_BUDGET = 400


def _drop_group(ex: Example, rules: ShrinkRules) -> Iterator[Example]:
    case, mut = ex.case, ex.mutation
    for g in range(len(case.groups)):
        if len(case.groups) == 1 or (rules.keep_first_group and g == 0) or (mut is not None and mut.group == g):
            continue
        new_mut = mut if mut is None else replace(mut, group=mut.group - (g < mut.group))
        yield replace(ex, case=replace(case, groups=case.groups[:g] + case.groups[g + 1:]), mutation=new_mut)


def _drop_response(ex: Example, rules: ShrinkRules) -> Iterator[Example]:
    case, mut = ex.case, ex.mutation
    for g, grp in enumerate(case.groups):
        for i in range(len(grp.responses) if len(grp.responses) > 2 else 0):
            if mut is not None and mut.group == g and mut.response == i:
                continue
            new = GroupConfig(grp.responses[:i] + grp.responses[i + 1:], grp.rewards[:i] + grp.rewards[i + 1:])
            if rules.identical_responses and len(set(new.rewards)) < 2:
                continue
            new_mut = mut
            if mut is not None and mut.group == g:
                new_mut = replace(mut, response=mut.response - (i < mut.response))
            yield replace(ex, case=case.with_group(g, new), mutation=new_mut)


def _drop_token(ex: Example, rules: ShrinkRules) -> Iterator[Example]:  # the last token first: it keeps prefixes
    case = ex.case
    for g, grp in enumerate(case.groups):
        if rules.identical_responses:
            resp = grp.responses[0]
            for t in reversed(range(len(resp) if len(resp) > 1 else 0)):
                cut = resp[:t] + resp[t + 1:]
                yield ex.with_case(case.with_group(g, replace(grp, responses=(cut,) * len(grp.responses))))
            continue
        for i, resp in enumerate(grp.responses):
            for t in reversed(range(len(resp) if len(resp) > 1 else 0)):
                yield ex.with_case(case.with_response(g, i, resp[:t] + resp[t + 1:]))


def _simplify_reward(ex: Example, rules: ShrinkRules) -> Iterator[Example]:  # 0 before 1 before the rest: no cycles
    case = ex.case
    for g, grp in enumerate(case.groups):
        if rules.keep_first_group and g == 0:  # the subject group keeps its rewards tied
            for v in (0.0, 1.0):
                if grp.rewards[0] != v and (v == 0.0 or grp.rewards[0] != 0.0):
                    yield ex.with_case(case.with_group(g, replace(grp, rewards=(v,) * len(grp.rewards))))
            continue
        for i, r in enumerate(grp.rewards):
            for v in () if r == 0.0 else (0.0,) if r == 1.0 else (0.0, 1.0):
                rewards = grp.rewards[:i] + (v,) + grp.rewards[i + 1:]
                if not (rules.identical_responses and len(set(rewards)) < 2):
                    yield ex.with_case(case.with_group(g, replace(grp, rewards=rewards)))


def _drop_settings(ex: Example, rules: ShrinkRules) -> Iterator[Example]:
    case, mut = ex.case, ex.mutation
    if case.length_limit is not None:
        yield ex.with_case(replace(case, length_limit=None))
    if case.seed != 0:
        yield ex.with_case(replace(case, seed=0))
    if mut is not None:
        if mut.position != 0:
            yield replace(ex, mutation=replace(mut, position=0))
        if mut.kind == "length" and mut.value > 1:
            yield replace(ex, mutation=replace(mut, value=mut.value - 1))
        if mut.kind == "tokens" and mut.value != 0:
            yield replace(ex, mutation=replace(mut, value=0))
    if ex.perm_seed:
        yield replace(ex, perm_seed=0)


_STEPS = (_drop_group, _drop_response, _drop_token, _simplify_reward, _drop_settings)


def shrink(example: Example, fails: Callable[[Example], bool], rules: ShrinkRules) -> Example:
    """The smallest failing example the greedy steps reach from ``example``, trying at
    most :data:`_BUDGET` candidates. ``fails(candidate)`` must be False for a candidate that
    cannot be evaluated."""
    current, budget = example, _BUDGET
    progress = True
    while progress and budget > 0:
        progress = False
        for step in _STEPS:
            at = 0  # the candidates before ``at`` were tried on this pass and passed (no shrink)
            while budget > 0:
                cands = list(step(current, rules))
                if at >= len(cands):
                    break
                budget -= 1
                if fails(cands[at]):
                    current, progress = cands[at], True  # the list shifts: try the same index next
                else:
                    at += 1
    return current
