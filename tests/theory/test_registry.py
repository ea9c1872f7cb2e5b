"""The registry links every property and mechanism to real, compiled theorems."""

from __future__ import annotations

import pytest

import exchange.theory.registry as theorems_mod
from exchange.theory.coq import CHECKED, coq_theorem_names, default_proofs_dir
from exchange.theory.registry import (MECHANISM_NOTES, MECHANISM_THEOREMS, MECHANISMS,
                               PROPERTY_NAMES, PROPERTY_NOTES, PROPERTY_THEOREMS, THEOREMS,
                               Theorem, for_mechanism, for_property, note_for)


def test_public_surface_is_declared():
    for name in theorems_mod.__all__:
        assert hasattr(theorems_mod, name), name


def test_registry_covers_exactly_the_stable_names():
    assert set(PROPERTY_THEOREMS) == set(PROPERTY_NAMES)
    assert set(MECHANISM_THEOREMS) == set(MECHANISMS)
    assert set(PROPERTY_NOTES) <= set(PROPERTY_NAMES)
    assert set(MECHANISM_NOTES) <= set(MECHANISMS)


@pytest.mark.parametrize("name", PROPERTY_NAMES + tuple(MECHANISMS))
def test_no_theorem_is_an_explicit_decision(name):
    linked = PROPERTY_THEOREMS.get(name) or MECHANISM_THEOREMS.get(name)
    assert linked or note_for(name), f"{name} has neither theorems nor a note saying why"


def test_links_name_registered_theorems_and_none_is_orphaned():
    linked = {t for ts in [*PROPERTY_THEOREMS.values(), *MECHANISM_THEOREMS.values()]
              for t in ts}
    assert linked <= set(THEOREMS), linked - set(THEOREMS)
    assert set(THEOREMS) <= linked, set(THEOREMS) - linked


def test_lookup_functions_return_theorems():
    assert for_property("shared_cancellation")[0] is THEOREMS["T1_sufficiency"]
    assert all(isinstance(t, Theorem) for t in for_mechanism("M2"))
    assert for_property("finite") == () and "No theorem" in note_for("finite")
    assert for_property("no_such_property") == ()


def test_registry_names_match_the_coq_sources():
    # Parses the .v files, so it runs without coqc.
    declared = coq_theorem_names()
    for key, thm in THEOREMS.items():
        assert thm.short == key
        assert thm.name in declared, f"{thm.name} not declared in proofs/"
        assert declared[thm.name] == str(default_proofs_dir() / thm.file)


@pytest.mark.coq
@pytest.mark.parametrize("name", PROPERTY_NAMES + tuple(MECHANISMS))
def test_every_link_compiled(statuses, name):
    for thm in for_property(name) + for_mechanism(name):
        assert statuses[thm.short].status == CHECKED, (name, statuses[thm.short])


def test_theory_section_3_is_covered():
    # One theorem per THEORY.md section-3 item, so dropping one from the registry fails.
    prefixes = ("T1_", "T2_", "T3_", "T4_", "T5_", "Cor33_", "M1_")
    for prefix in prefixes:
        assert any(k.startswith(prefix) for k in THEOREMS), prefix
