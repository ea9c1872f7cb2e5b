"""Non-vacuity is a property of the record (issue 43, item 3; exchange.theory.nonvacuity).

Every theorem with hypotheses is stated in proofs/spec/Spec.v as ``forall x, H_T x ->
C_T x`` and witnessed by ``W_T := H_T a`` at G >= 2 and advantages of both signs; the
check reads the record's text (no coqc needed), and each planted degenerate record below
must fail it, the T2 witnesses' old tautologies (``... -> 2 == 2``) first.
"""

from __future__ import annotations

import shutil

import pytest

from exchange.theory import nonvacuity
from exchange.theory.coq import default_proofs_dir, strip_comments
from exchange.theory.record import SPEC_FILE, check_record, record_statements, spec_sha256
from exchange.theory.registry import NO_HYPOTHESES, THEOREMS


def _problems(text: str) -> list[str]:
    dev_statements = _statements(text)
    code = " ".join(strip_comments(text).split())
    return nonvacuity.problems(dev_statements, code, THEOREMS, NO_HYPOTHESES)


def _statements(text: str) -> dict[str, str]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "spec").mkdir()
        (Path(tmp) / SPEC_FILE).write_text(text)
        return record_statements(Path(tmp))


@pytest.fixture(scope="module")
def spec() -> str:
    return (default_proofs_dir() / SPEC_FILE).read_text()


def _planted(spec: str, old: str, new: str) -> list[str]:
    assert old in spec, old
    return _problems(spec.replace(old, new, 1))


def test_the_record_has_the_shape_for_every_theorem_with_hypotheses(spec):
    assert _problems(spec) == []
    statements = record_statements(default_proofs_dir())
    stated = {k for k in THEOREMS if nonvacuity.hypothesis_form(statements, k)}
    assert stated == set(THEOREMS) - NO_HYPOTHESES and len(stated) == 45


def test_a_tautological_witness_is_rejected(spec):
    # What W_T2_necessity_binary was before issue 43's item 3: it passed every check.
    problems = _planted(
        spec, "Definition W_T2_necessity_binary : Prop := H_T2_necessity_binary 3 (fun _ => 2) (fun _ => 1).",
        "Definition W_T2_necessity_binary : Prop :=\n  forall i j, (i < 3)%nat -> (j < 3)%nat -> 2 == 2.")
    assert problems == ["statement W_T2_necessity_binary is `forall i j, (i < 3)%nat -> (j < 3)%nat "
                        "-> 2 == 2`, not H_T2_necessity_binary applied to 3 concrete arguments: a "
                        "witness states the theorem's hypotheses at concrete arguments (a tautology "
                        "such as `2 == 2`, or the theorem's conclusion, shows nothing about them)"]


def test_a_witness_stating_the_conclusion_is_rejected(spec):
    problems = _planted(spec, "Definition W_T1_sufficiency : Prop := H_T1_sufficiency 3 cor33_A (fun _ => 2) 2.",
                        "Definition W_T1_sufficiency : Prop := C_T1_sufficiency 3 cor33_A (fun _ => 2) 2.")
    assert len(problems) == 1 and "not H_T1_sufficiency applied to 4" in problems[0]


def test_a_witness_with_too_few_arguments_is_rejected(spec):
    problems = _planted(spec, "Definition W_T1_sufficiency : Prop := H_T1_sufficiency 3 cor33_A (fun _ => 2) 2.",
                        "Definition W_T1_sufficiency : Prop := H_T1_sufficiency 3 cor33_A (fun _ => 2).")
    assert len(problems) == 1 and "not H_T1_sufficiency applied to 4" in problems[0]


def test_a_witness_at_one_response_is_rejected(spec):
    problems = _planted(spec, "Definition W_T5_truncated_ratio : Prop := H_T5_truncated_ratio 3 cor33_A 2 (1#5).",
                        "Definition W_T5_truncated_ratio : Prop := H_T5_truncated_ratio 1 cor33_A 2 (1#5).")
    assert problems[0] == ("W_T5_truncated_ratio is H_T5_truncated_ratio at G = 1: a witness "
                           "instance needs a group of at least two responses (G >= 2), or it "
                           "says nothing about groups")
    # ... and its advantages at G = 1 are not shown to take both signs either.
    assert len(problems) == 2 and "at G = 1 are not shown to take both signs" in problems[1]


def test_advantages_of_one_sign_are_rejected(spec):
    problems = _planted(spec, "Definition W_R_T4_inside_cancels : Prop := H_R_T4_inside_cancels 2 RA2 (1/5) (1/5) 1.",
                        "Definition W_R_T4_inside_cancels : Prop := H_R_T4_inside_cancels 2 (fun _ => 0) (1/5) (1/5) 1.")
    assert problems == ["W_R_T4_inside_cancels's advantages (fun _ => 0) at G = 2 are not shown to "
                        "take both signs: the record needs `Example <name> : Rboth_signs 2 (fun _ => 0).`"]


def test_a_weakened_sign_predicate_is_rejected(spec):
    problems = _planted(spec, "  (exists i, (i < G)%nat /\\ 0 < A i) /\\ (exists j, (j < G)%nat /\\ A j < 0).\n",
                        "  True.\n")
    assert len(problems) == 1 and problems[0].startswith("the record's both_signs is `Definition both_signs")


def test_a_sign_example_inside_a_section_is_rejected(spec):
    problems = _planted(spec, "Example both_signs_cor33 : both_signs 3 cor33_A.",
                        "Section S.\nContext (h : False).\nExample both_signs_cor33 : both_signs 3 cor33_A.")
    assert any("uses `Section`" in p for p in problems)
    assert any("uses `Context`" in p for p in problems)
    problems = _planted(spec, "Example both_signs_cor33 : both_signs 3 cor33_A.",
                        "Notation \"'fake'\" := True.\nExample both_signs_cor33 : both_signs 3 cor33_A.")
    assert any("uses `Notation`" in p for p in problems)


def test_a_theorem_not_in_hypothesis_form_is_rejected(spec):
    problems = _planted(
        spec, "Definition T5_truncated_ratio : Prop := forall G (A : nat -> Q) (rho eps : Q),\n"
        "  H_T5_truncated_ratio G A rho eps -> C_T5_truncated_ratio G A rho eps.",
        "Definition T5_truncated_ratio : Prop := forall G (A : nat -> Q) (rho eps : Q),\n"
        "  sum G A == 0 -> C_T5_truncated_ratio G A rho eps.")
    assert len(problems) == 1
    assert problems[0].startswith("statement T5_truncated_ratio is not `forall x, "
                                  "H_T5_truncated_ratio x -> C_T5_truncated_ratio x`")
    # Its hypotheses applied to other variables than its binders are not the shape either.
    problems = _planted(
        spec, "  H_T5_truncated_ratio G A rho eps -> C_T5_truncated_ratio G A rho eps.",
        "  H_T5_truncated_ratio 3 A rho eps -> C_T5_truncated_ratio G A rho eps.")
    assert len(problems) == 1 and "is not `forall x, H_T5_truncated_ratio x" in problems[0]


def test_a_hypothesis_in_a_no_hypotheses_theorem_is_rejected(spec):
    problems = _planted(spec, "Definition T3_covariance : Prop := forall G (r x : nat -> Q),\n",
                        "Definition T3_covariance : Prop := forall G (r x : nat -> Q), (0 < G)%nat ->\n")
    assert problems == ["T3_covariance is listed in NO_HYPOTHESES but its record statement has the "
                        "hypothesis `(0 < G)%nat`: state it as forall x, H_T3_covariance x -> "
                        "C_T3_covariance x with a witness W_T3_covariance"]


def test_statements_split_into_binders_hypotheses_and_conclusion():
    binders, hyps, concl = nonvacuity.split_statement(
        "Definition X : Prop := forall G (A w : nat -> Q) (w0 : Q), sum G A == 0 -> "
        "(forall i, (i < G)%nat -> w i == w0) -> forall i j, (i < G)%nat -> w i <-> w j.")
    assert binders == [("G", None), ("A", "nat -> Q"), ("w", "nat -> Q"), ("w0", "Q")]
    assert hyps == ["sum G A == 0", "(forall i, (i < G)%nat -> w i == w0)"]
    assert concl == "forall i j, (i < G)%nat -> w i <-> w j"
    assert nonvacuity.split_statement("Definition X : Prop := forall a s1 s2 : Q, ~ a == 0 -> "
                                      "(P <-> Q).")[:2] == (
        [("a", "Q"), ("s1", "Q"), ("s2", "Q")], ["~ a == 0"])
    assert nonvacuity.arguments("H_T 3 (fun _ => 2) (pair 2 (- 1)) 1%nat", "H_T") == [
        "3", "(fun _ => 2)", "(pair 2 (- 1))", "1%nat"]
    assert nonvacuity.arguments("forall i, H_T i", "H_T") is None


def test_the_command_runs_the_check(tmp_path):
    # check_record (run by every `exchange proofs`) reports the shape; a copy of proofs/
    # with a tautological witness, re-hashed so that only the shape is wrong.
    dev = tmp_path / "proofs"
    shutil.copytree(default_proofs_dir(), dev, ignore=shutil.ignore_patterns(".cache", ".build"))
    spec = dev / SPEC_FILE
    spec.write_text(spec.read_text().replace(
        "Definition W_T2_necessity_zero_sum : Prop := H_T2_necessity_zero_sum 3 (fun _ => 2).",
        "Definition W_T2_necessity_zero_sum : Prop :=\n  forall i j, (i < 3)%nat -> (j < 3)%nat -> 2 == 2.",
        1))
    problems = check_record(dev, expected=spec_sha256(dev))
    assert len(problems) == 1 and problems[0].startswith(
        "statement W_T2_necessity_zero_sum is `forall i j")
