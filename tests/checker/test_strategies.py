"""The strategies cover what issue 2 asks for and reject impossible bounds."""

import pytest
from hypothesis import find, given

from exchange import InvalidArgument
from exchange.checker import strategies as xst
from exchange.checker.cases import common_prefix
from exchange.checker.mutations import Mutation


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
def test_reaches_the_documented_bounds():
    assert len(find(xst.group_configs(), lambda g: len(g.responses) == 16).responses) == 16
    assert find(xst.group_configs(), lambda g: max(map(len, g.responses)) == 32)
    assert find(xst.group_configs(), lambda g: min(map(len, g.responses)) == 1)
    assert find(xst.group_configs(), lambda g: len(set(g.responses)) < len(g.responses))  # identical responses
    assert find(xst.group_configs(), lambda g: common_prefix(g.responses) >= 3)
    assert find(xst.group_configs(), lambda g: len(set(g.rewards)) == 1)  # tied
    assert find(xst.group_configs(), lambda g: set(g.rewards) == {0.0, 1.0})  # binary
    assert find(xst.group_configs(), lambda g: any(r not in (0.0, 1.0) for r in g.rewards))
    assert find(xst.cases(), lambda c: len(c.groups) == 4 and c.off_policy)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(min_size=1), "min_size=1 < 2"),
        (dict(min_size=5, max_size=3), "max_size=3 < min_size=5"),
        (dict(min_length=0), "min_length=0 < 1"),
        (dict(vocab=0), "vocab=0"),
    ],
)
def test_impossible_bounds_raise_invalid_argument(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        find(xst.group_configs(**kwargs), lambda g: True)


@given(xst.mutations(off_policy=True))
def test_mutations_keep_the_shared_prefix(example):
    case, mutation = example.case, example.mutation
    variant = mutation.apply(case)
    for g, (a, b) in enumerate(zip(case.groups, variant.groups)):
        p = common_prefix(a.responses)
        assert common_prefix(b.responses) >= p
        assert all(x[:p] == y[:p] for x, y in zip(a.responses, b.responses))
        assert len(a.responses) == len(b.responses) and a.rewards == b.rewards


def test_generated_cases_print_as_constructor_calls():
    case = find(xst.cases(max_groups=1, max_size=2, max_length=3), lambda c: True)
    text = repr(case)
    assert text.startswith("Case(groups=(GroupConfig(responses=")
    with pytest.raises(InvalidArgument):
        Mutation("sideways", 0, 0, 1.0)


def test_strategies_print_as_the_public_call_that_built_them():
    assert repr(xst.cases(max_groups=2)) == "cases(max_groups=2)"
    assert repr(xst.mutations()) == "mutations()"
    assert repr(xst.mutations(off_policy=True, max_size=3)) == "mutations(off_policy=True, max_size=3)"
    assert repr(xst.rollouts(max_length=4)) == "rollouts(max_length=4)"
    assert repr(xst.group_configs(max_size=3)) == "group_configs(max_size=3)"


def test_group_configs_names_the_argument_it_was_given():
    import pytest

    with pytest.raises(InvalidArgument, match="reward_kinds=\\('x',\\)"):
        xst.group_configs(reward_kinds=("x",)).example()
