"""The Python side of the record and the re-pin trail (issue 43): fast, no coqc.

``exchange proofs`` runs ``pin_problems`` and ``trail_problems``; here each is shown to
pass on the package's tree and to fail on a copy with one thing removed or edited, so
the inventory is single (a theorem, witness or link gone from any one place fails).
"""

from __future__ import annotations

import json
import shutil

import pytest

from exchange.theory import link
from exchange.theory.coq import default_proofs_dir
from exchange.theory.pins import PINS_FILE, pin_problems, pins_sha256, python_side
from exchange.theory.record import trail_problems
from exchange.theory.registry import PINS_SHA256, SPEC_SHA256


@pytest.fixture
def proofs(tmp_path):
    src = default_proofs_dir()
    dst = tmp_path / "proofs"
    dst.mkdir()
    shutil.copytree(src / "spec", dst / "spec", ignore=shutil.ignore_patterns("*.vo*", "*.glob", ".*"))
    for name in ("_CoqProject", "Makefile", "CHANGES"):
        shutil.copy(src / name, dst / name)
    return dst


def test_the_package_matches_its_pins_and_trail():
    root = default_proofs_dir()
    assert pins_sha256(root) == PINS_SHA256
    assert pin_problems(root) == []
    assert trail_problems(root) == []


def test_a_theorem_removed_from_the_pins_is_named(proofs):
    data = json.loads((proofs / PINS_FILE).read_text())
    del data["theorems"]["T4_above_negative"]
    data["mechanism_links"]["M2"].remove("T4_above_negative")
    (proofs / PINS_FILE).write_text(json.dumps(data))
    problems = "\n".join(pin_problems(proofs))
    assert "PINS_SHA256" in problems
    assert "pins.theorems.T4_above_negative is in the code but not pinned" in problems
    assert "pins.mechanism_links.M2" in problems


def test_a_changed_python_value_is_named(proofs, monkeypatch):
    monkeypatch.setattr(link, "REL_TOL", 1e-3)
    assert any("pins.link.rel_tol" in p for p in pin_problems(proofs))


def test_a_make_hook_or_an_extra_root_fails_the_layout(proofs):
    (proofs / "Makefile.coq.local").write_text("post-all::\n")
    with open(proofs / "_CoqProject", "a") as f:
        f.write("-Q other ExchangeSpec\n")
    problems = "\n".join(pin_problems(proofs))
    assert "Makefile.coq.local exists" in problems and "_CoqProject maps" in problems


def test_the_trail_must_name_the_current_hashes(proofs):
    text = (proofs / "CHANGES").read_text()
    first_named = text.rfind("\n## ", 0, text.index("\nspec "))
    (proofs / "CHANGES").write_text(text[:first_named] + "\n")  # issue 43's entries dropped
    problems = "\n".join(trail_problems(proofs))
    assert f"SPEC_SHA256 {SPEC_SHA256[:12]}" in problems
    assert f"PINS_SHA256 {PINS_SHA256[:12]}" in problems


def test_the_python_side_holds_every_registered_theorem():
    side = python_side()
    from exchange.theory.registry import THEOREMS

    assert set(side["theorems"]) == set(THEOREMS)
    assert side["axiom_policy"]["real_modules"] == ["Exchange.Real"]
    assert len(side["axiom_policy"]["axiom_free"]) == sum(".Real." not in t.name
                                                          for t in THEOREMS.values())


def test_the_link_self_tests_pass_and_can_fail(monkeypatch):
    assert link.self_test_problems() == []
    monkeypatch.setattr(link, "REL_TOL", 10.0)  # a comparison that accepts anything
    assert len(link.self_test_problems()) == 4
