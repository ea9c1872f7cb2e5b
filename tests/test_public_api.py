"""The declared public surface matches what exists and what the docs name."""

import re
from pathlib import Path

import exchange
from exchange import strategies
from exchange.checker.properties import PROPERTIES

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
    from exchange.checker.probes import PROBES

    documented_probes = set(re.findall(r"`(\w+)`", probes.split("##")[0]))
    assert {p.name for p in PROBES} - {"shared_ratio_low", "shared_ratios_low"} <= documented_probes
    assert {"zero_sum", "exchangeable", "shared_cancellation", "null_on_equal_rewards", "permutation_invariant", "finite"} <= set(PROPERTIES)
    assert exchange.property_names() == list(PROPERTIES)


def test_every_property_links_to_theorems_or_a_reason():
    from exchange.theory.registry import PROPERTY_NOTES, for_property

    for name in PROPERTIES:
        assert for_property(name) or name in PROPERTY_NOTES, name


def test_all_is_exactly_what_the_package_exports():
    """``__all__`` is checked against the real exports (as Hypothesis checks its
    strategies): every public name resolves, and dir() offers nothing public beyond it."""
    import types

    for name in exchange.__all__:
        getattr(exchange, name)
    # Python also sets each imported subpackage as an attribute; those are not exports.
    public = {n for n in dir(exchange) if n.isidentifier() and not n.startswith("_")
              and not (isinstance(getattr(exchange, n), types.ModuleType) and n not in exchange.__all__)}
    assert public == set(exchange.__all__), public ^ set(exchange.__all__)
    assert exchange.strategies.__name__ == "exchange.checker.strategies"
    assert exchange.check is exchange.checker.check


def test_unknown_attribute_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        exchange.nope  # noqa: B018


def test_import_exchange_loads_neither_torch_nor_the_checker():
    import subprocess
    import sys

    code = "import sys, exchange; print(sorted(m for m in ('torch', 'hypothesis', 'exchange.checker') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
