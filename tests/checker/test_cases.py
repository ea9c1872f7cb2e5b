"""``cases.build``: a declarative group configuration becomes an event-consistent Rollout."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from exchange.checker import cases as C
from exchange.checker import strategies as xst
from exchange.checker.cases import Case, GroupConfig, build, common_prefix
from exchange.core.rollout import Rollout
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


# ---- the vectorised build against the plain oracle: exactly what the definition (one
# key tuple per token, hashed by exchange.checker.event_hash's plain reference) builds.


def _build_oracle(case):
    """One key tuple per token, the reference hash over Python integers, math.log."""
    from exchange.checker.event_hash import reference_pick

    def pick(grid, key, salt):
        return grid[reference_pick(key, case.seed, C.SALTS[salt], len(grid))]

    rows, groups, rewards, baselines = [], [], [], []
    for g, grp in enumerate(case.groups):
        for resp, reward in zip(grp.responses, grp.rewards):
            rows.append(resp), groups.append(g), rewards.append(float(reward)), baselines.append(float(grp.baseline))
    t_max = max(max(len(r) for r in rows), case.pad_to)
    ratio_over, ent_over, old_over = dict(case.ratio), dict(case.entropy), dict(case.old_prob)
    out = {k: [] for k in ("tok", "old", "cur", "ref", "ent", "smp")}
    for resp, g in zip(rows, groups):
        fpad = [0.0] * (t_max - len(resp))
        o, c, rf, e, sm = [], [], [], [], []
        for t in range(len(resp)):
            key = (g, *resp[: t + 1])
            p_old = old_over.get(key) or pick(C.OLD_PROBS, key, "old")
            r = ratio_over.get(key, pick(C.RATIOS, key, "ratio") if case.off_policy else 1.0)
            dh = case.entropy_all if case.entropy_all is not None else pick(C.ENTROPIES, key, "entropy")
            o.append(math.log(p_old)), c.append(math.log(p_old) + math.log(r))
            rf.append(math.log(pick(C.REF_PROBS, key, "ref"))), e.append(ent_over.get(key, dh))
            # the sampler: pi_old / its SAMPLER_RATIOS pick, a probability <= 1
            sm.append(min(math.log(p_old) - math.log(pick(C.SAMPLER_RATIOS, key, "sampler")), 0.0))
        out["tok"].append(list(resp) + [0] * (t_max - len(resp)))
        for name, row in (("old", o), ("cur", c), ("ref", rf), ("ent", e), ("smp", sm)):
            out[name].append(row + fpad)
    return {k: torch.tensor(v, dtype=torch.long if k == "tok" else torch.float64) for k, v in out.items()}


def _assert_same(case):
    want = _build_oracle(case)
    for r in (C.build(case),):
        assert torch.equal(r.tokens, want["tok"])
        for field, name in ((r.old_logprobs, "old"), (r.logprobs, "cur"), (r.ref_logprobs, "ref"), (r.entropy, "ent"),
                            (r.sampling_logprobs, "smp")):
            assert torch.equal(field, want[name]), name


@given(xst.cases(), st.data())
@settings(max_examples=60)
def test_build_matches_the_oracle(case, data):
    # with overrides on some shared and suffix events, as the mutations add them
    g = data.draw(st.integers(0, len(case.groups) - 1))
    keys = case.shared_keys(g) + case.suffix_keys(g, 0)
    chosen = data.draw(st.lists(st.sampled_from(keys), max_size=3)) if keys else []
    case = case.with_ratio(chosen, 0.5).with_entropy(chosen[:1], 0.3)
    _assert_same(case)


def test_build_matches_the_oracle_on_long_responses():
    length = 300
    base = tuple(range(length))
    group = C.GroupConfig(responses=tuple(base[:-1] + (length + i,) for i in range(8)), rewards=(1.0, 0.0) * 4)
    _assert_same(C.Case(groups=(group,), off_policy=True, seed=3))


# ---- the trusted constructor: ``build`` skips re-validation; the validated constructor
# must accept the very same fields and give the same Rollout.


def _fields(r):
    import dataclasses

    return {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.init}


@given(xst.cases())
@settings(max_examples=60)
def test_trusted_build_is_the_validated_rollout(case):
    fast = C.build(case)
    slow = Rollout(**_fields(fast))  # runs the full validation; raises if build were wrong
    for name, value in _fields(fast).items():
        other = getattr(slow, name)
        assert (value is None and other is None) or torch.equal(value, other), name
    assert torch.equal(fast.group_index, slow.group_index) and fast.n_groups == slow.n_groups


def test_trusted_constructor_rejects_missing_and_unknown_fields():
    import pytest

    r = C.build(C.Case(groups=(C.GroupConfig(responses=((1,), (2,)), rewards=(1.0, 0.0)),)))
    fields = _fields(r)
    with pytest.raises(TypeError):
        Rollout._trusted(**{k: v for k, v in fields.items() if k != "tokens"})
    with pytest.raises(TypeError):
        Rollout._trusted(**fields, bogus=1)
