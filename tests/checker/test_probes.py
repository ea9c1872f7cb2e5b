"""The targeted probes: each isolates one mechanism on a minimal group."""

from __future__ import annotations

import pytest

from exchange.checker.probes import PROBES, run_probes
from exchange.core.coefficients import Engine
from exchange.core.vocabulary import MECHANISMS, PROPERTY_NAMES
from exchange.objectives import resolve


def test_every_probe_names_a_known_mechanism_and_property():
    for probe in PROBES:
        assert probe.mechanism in MECHANISMS, probe.name
        assert probe.property_name in PROPERTY_NAMES, probe.name


def test_probe_names_are_unique():
    names = [p.name for p in PROBES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    "objective, regime, expected",
    [
        ("dr_grpo", "on_policy", set()),  # exchangeable on-policy: no probe fires
        ("grpo", "on_policy", {"M3"}),  # 1/L_i
        ("dapo", "off_policy", {"M2"}),  # sign-dependent clip
        ("reinforce_pp", "on_policy", {"M4"}),  # batch baseline: not zero-sum in a group
    ],
)
def test_probes_find_exactly_the_mechanism_that_acts(objective, regime, expected):
    found = {m for r in run_probes(Engine(resolve(objective)), regime) for m in r.mechanisms}
    assert found == expected


def _filtered_clip(lp, ro):
    """A PPO clip behind DAPO-style dynamic sampling that keeps a group only when
    ``0 < mean(r) < 1``: the M2 probes' groups (rewards 1, -1, -1, 1, mean 0) are dropped
    whole, so the probes re-run with their rewards mapped onto [0, 1]."""
    import torch

    g = ro.group_index
    n = torch.zeros(ro.n_groups, dtype=ro.rewards.dtype).index_add_(0, g, torch.ones_like(ro.rewards))
    mean = (torch.zeros(ro.n_groups, dtype=ro.rewards.dtype).index_add_(0, g, ro.rewards) / n)[g]
    keep = ((mean > 0) & (mean < 1)).to(lp.dtype)[:, None]
    adv = (ro.rewards - mean)[:, None]
    ratio = torch.exp(lp - ro.old_logprobs)
    m = ro.mask.to(lp.dtype)
    return -(keep * torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv) * m).sum() / m.sum()


def test_a_probe_whose_group_is_dropped_is_reprobed_on_kept_rewards():
    results = run_probes(Engine(_filtered_clip), "off_policy")
    assert "M2" in {m for r in results for m in r.mechanisms}
    assert not any(r.dropped for r in results)


def test_a_probe_no_reward_range_keeps_says_so_and_is_no_evidence():
    import torch

    def drops_everything_mixed(lp, ro):
        g = ro.group_index
        hi = torch.zeros(ro.n_groups, dtype=ro.rewards.dtype).index_reduce_(0, g, ro.rewards, "amax", include_self=False)
        lo = torch.zeros(ro.n_groups, dtype=ro.rewards.dtype).index_reduce_(0, g, ro.rewards, "amin", include_self=False)
        tied = (hi == lo).to(lp.dtype)[g][:, None]
        return -(tied * lp * ro.mask).sum()

    results = run_probes(Engine(drops_everything_mixed), "on_policy")
    dropped = [r for r in results if r.dropped]
    assert dropped and all(not r.found for r in dropped)
    assert "no evidence" in dropped[0].dropped
