"""The reviewed record proofs/spec/Spec.v: hash, inventory, diff, re-pin (issue 33).

These run without coqc (the record is checked in Python); the kernel check of every
theorem against the record is in test_coq.py, the mutations in test_mutations.py.
"""

from __future__ import annotations

import re
import shutil

import pytest
from pathlib import Path

from exchange.cli import main
from exchange.theory.coq import (
    applies,
    coq_theorem_names,
    default_proofs_dir,
    strip_comments,
)
from exchange.theory.record import (
    SPEC_FILE,
    accept_record,
    check_record,
    record_diff,
    record_statements,
    spec_sha256,
)
from exchange.theory.registry import NO_HYPOTHESES, SPEC_SHA256, THEOREMS


def _copy(tmp_path: Path) -> Path:
    dev = tmp_path / "proofs"
    shutil.copytree(default_proofs_dir(), dev, ignore=shutil.ignore_patterns(".cache", "*.vo*",
                                                                              "*.glob"))
    return dev


def test_the_record_is_the_reviewed_one_and_lists_exactly_the_registry():
    assert spec_sha256(default_proofs_dir()) == SPEC_SHA256
    assert check_record(default_proofs_dir()) == []
    wanted = set(THEOREMS) | {t.witness for t in THEOREMS.values() if t.witness}
    wanted |= {t.false_witness for t in THEOREMS.values() if t.false_witness}
    # ... and the hypothesis and conclusion predicates of every theorem with hypotheses.
    wanted |= {f"{p}_{k}" for k in set(THEOREMS) - NO_HYPOTHESES for p in "HC"}
    assert set(record_statements(default_proofs_dir())) == wanted


def test_an_edited_statement_is_named(tmp_path):
    dev = _copy(tmp_path)
    spec = dev / SPEC_FILE
    spec.write_text(spec.read_text().replace(
        "(forall r, binary G r -> 0 < sigma r) /\\", "(forall r, binary G r -> 0 < sigma r) /\\ G = 2%nat /\\", 1))
    problems = [p for p in check_record(dev) if "CHANGES" not in p]  # the trail: elsewhere
    assert len(problems) == 1 and "not the reviewed record" in problems[0]
    # The theorem's hypotheses are the predicate H_T2_necessity_binary: named as such.
    assert "statement H_T2_necessity_binary changed" in problems[0]
    summary, diff = record_diff(dev)
    assert summary == ["statement H_T2_necessity_binary changed"]
    assert "+" in diff and "G = 2%nat" in diff


def test_an_edited_definition_is_a_change_of_the_record(tmp_path):
    dev = _copy(tmp_path)
    spec = dev / SPEC_FILE
    spec.write_text(spec.read_text().replace(
        "sqrt (Rmean G (fun i => (r i - Rmean G r) * (r i - Rmean G r))).", "1.", 1))
    (problem,) = check_record(dev)
    assert "definitions, examples or comments of the record changed" in problem


def test_a_deleted_or_renamed_theorem_is_visible():
    registry = {k: t for k, t in THEOREMS.items() if k != "T3_one_correct"}
    problems = check_record(default_proofs_dir(), registry)
    # Its witness W_T3_one_correct and its predicates H_, C_ go with it (no other theorem
    # shares them).
    assert problems == [f"{name} is in the reviewed record but not registered: a theorem "
                        "deleted or renamed (exchange/theory/registry.py)"
                        for name in ("C_T3_one_correct", "H_T3_one_correct", "T3_one_correct",
                                     "W_T3_one_correct")]
    renamed = dict(registry, T3_one_correct_renamed=THEOREMS["T3_one_correct"])
    problems = check_record(default_proofs_dir(), renamed)
    assert any("T3_one_correct_renamed is registered but has no statement" in p for p in problems)


def test_the_record_may_not_require_the_development(tmp_path):
    dev = _copy(tmp_path)
    spec = dev / SPEC_FILE
    spec.write_text(spec.read_text().replace("From Coq Require Import Reals Lra.",
                                             "From Coq Require Import Reals Lra.\n"
                                             "From Exchange Require Import Real.", 1))
    problems = check_record(dev, expected=spec_sha256(dev))
    assert problems == [(f"proofs/{SPEC_FILE} requires Exchange.Real: the record may use "
                         "Coq's standard library only, never the development")]


def test_write_statements_shows_the_diff_and_records_only_with_accept(tmp_path, capsys):
    dev = _copy(tmp_path)
    spec = dev / SPEC_FILE
    spec.write_text(spec.read_text().replace(
        "Definition W_M1_two_responses : Prop := H_M1_two_responses 1 2 2.",
                                             "Definition W_M1_two_responses : Prop := True.", 1))
    registry = tmp_path / "registry.py"
    shutil.copy(Path(__import__("exchange.theory.registry", fromlist=["x"]).__file__), registry)
    before = registry.read_text()
    assert main(["proofs", "--proofs-dir", str(dev), "--write-statements"]) == 1
    out = capsys.readouterr().out
    assert "statement W_M1_two_responses changed" in out and "+Definition W_M1_two_responses" in out
    assert "not recorded" in out and registry.read_text() == before
    new = accept_record(dev, registry)
    assert new == spec_sha256(dev) and f'SPEC_SHA256 = "{new}"' in registry.read_text()
    log = (dev / "CHANGES").read_text()
    assert "statement W_M1_two_responses changed" in log and new[:12] in log


def test_accept_needs_write_statements(capsys):
    assert main(["proofs", "--accept"]) == 2
    assert "--write-statements" in capsys.readouterr().err


def _top_level_arrows(statement: str) -> list[str]:
    """The top-level connectives of a statement after its leading ``forall ... ,``:
    ``->`` and ``<->`` outside parentheses (a top-level ``->`` is a hypothesis)."""
    body = statement.split(":=", 1)[1].strip()
    while body.startswith("forall"):
        depth = 0
        for k, ch in enumerate(body):
            depth += ch == "("
            depth -= ch == ")"
            if ch == "," and depth == 0:
                body = body[k + 1:].strip()
                break
    out, depth, k = [], 0, 0
    while k < len(body):
        if body[k] == "(":
            depth += 1
        elif body[k] == ")":
            depth -= 1
        elif depth == 0 and body.startswith("<->", k):
            out.append("<->")
            k += 3
            continue
        elif depth == 0 and body.startswith("->", k):
            out.append("->")
        k += 1
    return out


def test_no_hypotheses_claim_matches_the_record():
    # No exemption for an iff: its sides sit in parentheses, so a top-level "->" is a
    # hypothesis whatever the conclusion is.
    statements = record_statements(default_proofs_dir())
    for key in NO_HYPOTHESES:
        assert "->" not in _top_level_arrows(statements[key]), (key, statements[key])
    # The check can fail: every theorem outside it has a top-level hypothesis.
    for key in set(THEOREMS) - NO_HYPOTHESES:
        assert "->" in _top_level_arrows(statements[key]), key


def test_comments_and_strings_are_stripped_like_coq_does():
    assert strip_comments('a (* b "*)" c *) d') == "a  d"
    code = strip_comments('Definition x := "(*". Axiom cheat : False.')
    assert "Axiom cheat" in code
    assert "Admitted" not in strip_comments('(* (* nested *) Admitted *) Qed.')


def test_every_theorem_has_a_witness_or_no_hypotheses():
    declared = coq_theorem_names()
    for key, thm in THEOREMS.items():
        # A theorem with hypotheses has a witness; one without may too only if it is
        # an iff (its W_ applies the right-to-left direction).
        assert bool(thm.witness) or key in NO_HYPOTHESES, key
        if thm.witness and key in NO_HYPOTHESES:
            assert thm.false_witness, key
        if thm.witness:
            assert thm.witness == f"W_{key}", key
            assert thm.witness_name in declared, thm.witness_name


def _concludes_with_an_iff(statement: str, statements: dict[str, str] | None = None) -> bool:
    """The part after the last top-level ``->`` is (in parentheses or not) an iff; for a
    statement ``forall x, H_T x -> C_T x``, the body of ``C_T``."""
    body = statement.split(":=", 1)[1].strip()
    name = statement.split()[1]
    if statements and f"C_{name}" in statements and f"C_{name} " in body:
        return _concludes_with_an_iff("x := " + statements[f"C_{name}"].split(":=", 1)[1])
    depth, last = 0, 0
    for k, ch in enumerate(body):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and body.startswith("->", k) and body[k - 1:k] != "<":
            last = k + 2
    conclusion = body[last:].strip().rstrip(".")
    if conclusion.startswith("(") and conclusion.endswith(")"):
        conclusion = conclusion[1:-1]
    return "<->" in _top_level_arrows("x := " + conclusion)


# Iff theorems without such a witness (none now; a new one must say why in docs/proofs.md).
IFF_WITHOUT_FALSE_SIDES: set[str] = set()


def test_every_iff_theorem_has_an_input_where_both_sides_are_false():
    statements = record_statements(default_proofs_dir())
    iffs = {k for k in THEOREMS if _concludes_with_an_iff(statements[k], statements)}
    assert iffs >= {"T2_characterisation", "T3_sign", "M1_two_responses", "E_product_form",
                    "R_T3_harmonic_mean", "R_M1_gspo"}, iffs
    with_witness = {k for k, t in THEOREMS.items() if t.false_witness}
    assert with_witness == iffs - IFF_WITHOUT_FALSE_SIDES
    declared = coq_theorem_names()
    for key in with_witness:
        name = THEOREMS[key].false_witness
        assert THEOREMS[key].false_witness_name in declared
        # Both sides negated: "~ (...) /\ ~ (...)", possibly under "exists x : T," (the
        # arguments chosen by the proof, as F_R_M1_gspo_equal_lengths does).
        assert re.fullmatch(r"Definition \S+ : Prop := (exists \w+ : \w+,\s*)?~ .* /\\ ~ .*",
                            statements[name], re.DOTALL), name


def test_an_orphaned_or_dangling_link_is_reported(monkeypatch):
    from exchange.core import vocabulary

    monkeypatch.setitem(vocabulary.MECHANISM_THEOREMS, "M6",
                        ("M6_additive_term", "T1_event_coefficient", "M6_gone"))
    assert check_record(default_proofs_dir()) == [
        "exchange/core/vocabulary.py links M6_gone, which is not registered",
        ("M6_does_not_vanish is registered but backs no property or mechanism "
         "(exchange/core/vocabulary.py)")]


def test_a_witness_must_apply_its_theorem():
    # What coqc prints for a witness's proof term: the theorem by a suffix of its name.
    thm = "Exchange.Cancellation.T1_sufficiency"
    assert applies(thm, "W = Exchange.Cancellation.T1_sufficiency 3 cor33_A ...")
    assert applies(thm, "W = Cancellation.T1_sufficiency 3 cor33_A")
    assert applies(thm, "W = (T1_sufficiency 3 cor33_A)")
    # A proof by computation, or one naming another theorem, does not apply it.
    assert not applies(thm, "W = eq_refl : K 3 cor33_A (fun _ => 2) == 0")
    assert not applies(thm, "W = Exchange.Cancellation.T1_sufficiency_exchangeable 3")
    assert not applies(thm, "W = Exchange.Real.R_T1_sufficiency 2")


# The commit that made proofs/CHANGES append-only (changes_shrank, issue 43); two earlier
# commits rewrote it (a reformat, reasons added to entries), before the rule existed.
_APPEND_ONLY_SINCE = "334bf60"


def test_changes_only_grows_relative_to_the_last_commit():
    """proofs/CHANGES is append-only (issue 43): the working tree against git's HEAD (a
    local edit) and every committed version since the rule against the one before it, so
    that CI, on a clean clone where the tree is HEAD, fails on a commit that removed text.
    Without git (an sdist) there is nothing to compare with."""
    import shutil
    import subprocess

    from exchange.theory.record import changes_shrank, trail_problems

    root = default_proofs_dir()
    assert trail_problems(root) == []
    if shutil.which("git") is None:
        pytest.skip("git not installed: nothing to compare proofs/CHANGES with")

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)

    revs = git("log", "--format=%H", "--", "CHANGES").stdout.split()
    if not revs:
        pytest.skip("no committed proofs/CHANGES (not a git checkout of the project)")
    since = git("rev-parse", "--verify", "-q", _APPEND_ONLY_SINCE + "^{commit}").stdout.strip()
    versions = []  # (commit, text), newest first, back to the rule's commit
    for rev in revs:
        versions.append((rev, git("show", f"{rev}:./CHANGES").stdout))
        if since and git("merge-base", "--is-ancestor", rev, since).returncode == 0:
            break
    now = (root / "CHANGES").read_text()
    assert not changes_shrank(versions[0][1], now), "proofs/CHANGES lost text since HEAD"
    for (new_rev, new), (old_rev, old) in zip(versions, versions[1:]):
        assert not changes_shrank(old, new), f"proofs/CHANGES lost text in {new_rev[:8]} (against {old_rev[:8]})"
    assert changes_shrank(now, now[:-10])  # the check can fail
