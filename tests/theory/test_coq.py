"""Compiling the development is a test (THEORY.md section 3; docs/proofs.md)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from exchange.theory.coq import (ALLOWED_AXIOM_REASONS, ALLOWED_AXIOMS, CHECKED, CLOSED, FAILED,
                                 _full_status, allowed_axioms, compile_proofs,
                                 default_proofs_dir, forbidden_commands)
from exchange.theory.development import coqchk_problems, development_problems, project_flags
from exchange.theory.registry import THEOREMS, Theorem

pytestmark = pytest.mark.coq


def test_make_builds_the_development(coqc):
    proc = subprocess.run(["make", "-C", str(default_proofs_dir())],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_admitted_axiom_or_hypothesis_in_sources():
    # Runs without coqc: a plain scan of the .v files, comments stripped.
    assert forbidden_commands() == []


def test_every_registered_theorem_is_checked(statuses):
    bad = {k: (s.status, s.detail) for k, s in statuses.items() if s.status != CHECKED}
    assert not bad, bad


def test_the_whole_development_passes_flags_scan_and_coqchk(coqc, statuses):
    assert development_problems(default_proofs_dir(), coqc) == []


def test_a_q_theorem_with_the_reals_axioms_fails_its_module_rule():
    # Per-module rule: the same axioms pass for a theorem of Exchange.Real and fail for
    # one of the QArith modules.
    reals = tuple(sorted(ALLOWED_AXIOMS))
    q_thm, r_thm = THEOREMS["T1_sufficiency"], THEOREMS["R_T1_sufficiency"]
    assert allowed_axioms(q_thm) == frozenset() and allowed_axioms(r_thm) == ALLOWED_AXIOMS
    found = {q_thm.name: reals, q_thm.witness_name: (), r_thm.name: reals,
             r_thm.witness_name: reals}
    bad = _full_status("T1_sufficiency", q_thm, found, "", None)
    assert bad.status == FAILED and "does not allow (no axiom" in bad.detail
    assert _full_status("R_T1_sufficiency", r_thm, found, "", None).status == CHECKED
    # A witness is held to its theorem's rule.
    found[q_thm.name], found[q_thm.witness_name] = (), reals
    bad = _full_status("T1_sufficiency", q_thm, found, "", None)
    assert bad.status == FAILED and "witness" in bad.detail


def test_rational_theorems_are_axiom_free_and_real_ones_use_only_reals_axioms(statuses):
    # QArith needs no axiom at all; the theorems over R (module Real) depend on the
    # standard Reals axioms, each allow-listed by name with a reason.
    for key, s in statuses.items():
        if ".Real." in s.name:
            assert s.axioms and set(s.axioms) <= ALLOWED_AXIOMS, (key, s.axioms)
        else:
            assert s.detail == CLOSED and s.axioms == (), (key, s.axioms)
    assert set(ALLOWED_AXIOM_REASONS) == ALLOWED_AXIOMS
    assert all(len(why) > 20 for why in ALLOWED_AXIOM_REASONS.values())


# --- the checks can fail: a throw-away development that cheats -----------------------

CHEAT = """
Axiom cheat : False.
Theorem bogus : 1 = 2.
Proof. destruct cheat. Qed.
Lemma honest : 1 = 1.
Proof. reflexivity. Qed.
Lemma skipped : 2 = 3.
Proof. Admitted.
"""


def _cheating_dev(tmp_path, body=CHEAT):
    (tmp_path / "theories").mkdir()
    (tmp_path / "theories" / "Cheat.v").write_text(body)
    (tmp_path / "_CoqProject").write_text("-Q theories Fake\ntheories/Cheat.v\n")
    shutil.copy(default_proofs_dir() / "Makefile", tmp_path / "Makefile")
    return tmp_path


def _thm(short):
    return Theorem(name=f"Fake.Cheat.{short}", statement=short, file="theories/Cheat.v")


def test_axiom_and_admitted_fail_the_allow_list(coqc, tmp_path):
    dev = _cheating_dev(tmp_path)
    registry = {k: _thm(k) for k in ("bogus", "honest", "skipped", "missing_name")}
    got = {s.key: s for s in compile_proofs(dev, theorems=registry, pin=False)}
    assert got["honest"].status == CHECKED
    assert got["bogus"].status == FAILED and "Cheat.cheat" in got["bogus"].detail
    assert got["skipped"].status == FAILED and "skipped" in got["skipped"].detail
    assert got["missing_name"].status == FAILED and "not found" in got["missing_name"].detail
    assert len(forbidden_commands(dev)) == 2  # Axiom, Admitted


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
def test_an_unused_axiom_hidden_after_a_string_is_caught(coqc, tmp_path):
    # The issue-33 hiding place: "(*" inside a string fooled the old comment stripper.
    dev = _cheating_dev(tmp_path, 'From Coq Require Import String.\n'
                        'Definition s : string := "(*"%string.\nAxiom hidden : False.\n'
                        "Lemma honest : 1 = 1.\nProof. reflexivity. Qed.\n")
    (status,) = compile_proofs(dev, theorems={"honest": _thm("honest")}, pin=False)
    assert status.status == CHECKED  # no registered theorem uses it ...
    assert any("hidden" in hit and "Axiom" in hit for hit in forbidden_commands(dev))
    assert coqchk_problems(dev, coqc) == [  # ... and coqchk names it
        "coqchk: axiom Fake.Cheat.hidden is declared in the development (an Axiom, "
        "Parameter or Admitted proof): none is allowed"]


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
def test_logical_flags_in_coqproject_are_reported_and_rebuild(coqc, tmp_path):
    dev = _cheating_dev(tmp_path, "Lemma honest : 1 = 1.\nProof. reflexivity. Qed.\n")
    assert compile_proofs(dev, theorems={"honest": _thm("honest")}, pin=False)[0].ok
    assert project_flags(dev) == []
    (dev / "_CoqProject").write_text("-Q theories Fake\n-arg -type-in-type\ntheories/Cheat.v\n")
    (flag,) = project_flags(dev)
    assert "`-arg -type-in-type`" in flag
    # exchange proofs builds with its own coqc calls and only the -Q/-R flags, so the
    # flag never reaches the build (project_flags reports it, and the command stops).
    assert not any("type-in-type" in p for p in coqchk_problems(dev, coqc))


def test_broken_proof_fails_every_theorem(coqc, tmp_path):
    dev = _cheating_dev(tmp_path, "Lemma wrong : 1 = 2.\nProof. reflexivity. Qed.\n")
    (status,) = compile_proofs(dev, theorems={"wrong": _thm("wrong")}, pin=False)
    assert status.status == FAILED and "coqc build of proofs/ failed" in status.detail
    assert "failed in theories/Cheat.v at wrong (line 2)" in status.detail
