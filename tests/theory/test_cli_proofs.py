"""`exchange proofs`: exit codes 0 checked / 1 failed / 2 coqc missing or usage."""

from __future__ import annotations

import pytest

from exchange.cli import main


def test_no_compile_lists_the_registry(capsys):
    assert main(["proofs", "--no-compile"]) == 0
    out = capsys.readouterr().out
    assert "T2_necessity_binary" in out and "permutation_invariant" in out


def test_missing_coqc_is_exit_2_with_the_fix(monkeypatch, capsys):
    monkeypatch.setenv("COQC", "no-such-coqc-binary")
    assert main(["proofs"]) == 2
    assert "apt-get install -y coq" in capsys.readouterr().out


def test_bad_proofs_dir_is_a_usage_error(tmp_path, capsys):
    assert main(["proofs", "--proofs-dir", str(tmp_path)]) == 2
    assert "--proofs-dir" in capsys.readouterr().err


@pytest.mark.coq
def test_all_theorems_checked(coqc, capsys):
    assert main(["proofs"]) == 0
    from exchange.theory.registry import THEOREMS

    out = capsys.readouterr().out
    assert out.startswith("checking proofs in ")
    assert f"all {len(THEOREMS)} theorems checked" in out.replace("\n", " ")


@pytest.mark.coq
def test_failed_proof_is_exit_1(coqc, tmp_path, capsys):
    (tmp_path / "theories").mkdir()
    (tmp_path / "theories" / "Bad.v").write_text("Lemma x : 1 = 2.\nProof. reflexivity. Qed.\n")
    (tmp_path / "_CoqProject").write_text("-Q theories Exchange\ntheories/Bad.v\n")
    (tmp_path / "Makefile").write_text(
        "all:\n\tcoq_makefile -f _CoqProject -o Makefile.coq && $(MAKE) -f Makefile.coq\n")
    assert main(["proofs", "--proofs-dir", str(tmp_path)]) == 1
