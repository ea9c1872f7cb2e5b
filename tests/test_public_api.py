"""The declared public surface matches what exists and what the docs name."""

import re
from pathlib import Path

import exchange
from exchange import strategies
from exchange.properties import PROPERTIES

ROOT = Path(__file__).resolve().parent.parent


def test_all_names_exist_and_nothing_private_leaks():
    for module in (exchange, strategies):
        assert sorted(set(module.__all__)) == sorted(module.__all__), "duplicates in __all__"
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is declared but missing"
            assert not name.startswith("_")


def test_property_registry_matches_docs_and_issue_names():
    text = (ROOT / "docs/properties.md").read_text()
    props, probes = text.split("## Probes and mechanisms")
    assert set(re.findall(r"^\| `(\w+)` \|", props, flags=re.M)) == set(PROPERTIES)
    from exchange.probes import PROBES

    documented_probes = set(re.findall(r"`(\w+)`", probes.split("##")[0]))
    assert {p.name for p in PROBES} - {"shared_ratio_low"} <= documented_probes
    assert {"zero_sum", "exchangeable", "shared_cancellation", "null_on_equal_rewards", "permutation_invariant", "finite"} <= set(PROPERTIES)
    assert exchange.property_names() == list(PROPERTIES)


def test_every_property_links_to_theorems_or_a_reason():
    from exchange.theorems import PROPERTY_NOTES, for_property

    for name in PROPERTIES:
        assert for_property(name) or name in PROPERTY_NOTES, name
