"""Compiling the development is a test (THEORY.md section 3; docs/proofs.md)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from exchange.theory.coq import (ALLOWED_AXIOM_REASONS, ALLOWED_AXIOMS, CHECKED, CLOSED, FAILED,
                                 compile_proofs, default_proofs_dir, forbidden_commands)
from exchange.theory.registry import Theorem

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


def test_broken_proof_fails_every_theorem(coqc, tmp_path):
    dev = _cheating_dev(tmp_path, "Lemma wrong : 1 = 2.\nProof. reflexivity. Qed.\n")
    (status,) = compile_proofs(dev, theorems={"wrong": _thm("wrong")}, pin=False)
    assert status.status == FAILED and "make" in status.detail
