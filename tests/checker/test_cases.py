"""``cases.build``: a declarative group configuration becomes an event-consistent Rollout."""

from __future__ import annotations

from hypothesis import given

from exchange.checker import strategies as xst
from exchange.checker.cases import Case, GroupConfig, build, common_prefix
from exchange.core.events import events


def test_common_prefix_counts_the_shared_leading_tokens():
    assert common_prefix(((1, 2, 3), (1, 2, 4), (1, 2))) == 2
    assert common_prefix(((1,), (2,))) == 0


def test_build_lays_out_groups_rewards_and_the_shared_prefix():
    case = Case(groups=(GroupConfig(((1, 2, 3), (1, 2, 4, 5)), (1.0, 0.0)),))
    r = build(case)
    assert r.n == 2 and r.lengths.tolist() == [3, 4]
    assert r.rewards.tolist() == [1.0, 0.0]
    ev = events(r)
    assert int(ev.shared.sum()) == 2  # the two prefix tokens occur in both responses


@given(xst.cases(max_groups=2, max_size=4, max_length=6))
def test_every_occurrence_of_one_event_gets_one_ratio_and_one_behaviour_logprob(case):
    """Event-consistency is what makes the (E) test sound: occurrences of one event share
    their context, so their ratios and behaviour probabilities must be equal."""
    r = build(case)
    ev = events(r)
    valid = ev.ids >= 0
    ids, old, cur = ev.ids[valid], r.old_logprobs[valid], r.logprobs[valid]
    for e in ids.unique().tolist():
        sel = ids == e
        assert old[sel].unique().numel() == 1
        assert cur[sel].unique().numel() == 1
