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
    found = {r.mechanism for r in run_probes(Engine(resolve(objective)), regime) if r.mechanism}
    assert found == expected
