"""``Mutation``: one response's suffix changes; the group's shared prefix stays in place."""

from __future__ import annotations

import pytest
from hypothesis import given

from exchange.checker import strategies as xst
from exchange.checker.cases import Case, GroupConfig, common_prefix
from exchange.checker.mutations import Mutation
from exchange.errors import InvalidArgument

CASE = Case(groups=(GroupConfig(((1, 2, 3), (1, 2, 0, 1)), (1.0, 0.0)),))


def test_length_mutation_truncates_or_extends_only_the_suffix():
    short = Mutation("length", group=0, response=1, value=2).apply(CASE)
    assert short.groups[0].responses[1] == (1, 2)
    longer = Mutation("length", group=0, response=0, value=5).apply(CASE)
    assert longer.groups[0].responses[0][:3] == (1, 2, 3) and len(longer.groups[0].responses[0]) == 5


def test_unknown_kind_is_a_precise_error():
    with pytest.raises(InvalidArgument, match="Mutation.kind='bogus'"):
        Mutation("bogus", group=0, response=0, value=1)


@given(xst.mutations(max_groups=2, max_size=4, max_length=6))
def test_a_mutation_never_moves_the_shared_prefix(example):
    case, mutation = example.case, example.mutation
    before = case.groups[mutation.group].responses
    after = mutation.apply(case).groups[mutation.group].responses
    p = common_prefix(before)
    assert all(r[:p] == before[0][:p] for r in after)
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert set(changed) <= {mutation.response}
