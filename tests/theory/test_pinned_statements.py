"""Statements are pinned (proofs/statements.txt) and every hypothesis set is satisfiable.

The two mutations of issue 18 are made on a copy of proofs/ and must fail both
`exchange proofs` and the CI test path (`CI=true pytest tests/theory`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import exchange.theory.coq as coq_driver
from exchange.cli import main
from exchange.theory.cache import CACHE_DIR, cache_dir
from exchange.theory.coq import (CHECKED, FAILED, STATEMENTS_FILE, _statement_mismatch,
                                 compile_proofs, coq_theorem_names, default_proofs_dir,
                                 read_statements)
from exchange.theory.registry import NO_HYPOTHESES, THEOREMS

REPO = Path(__file__).resolve().parents[2]


def test_every_theorem_and_witness_is_pinned_and_nothing_else():
    pinned = read_statements()
    wanted = set(THEOREMS) | {t.witness for t in THEOREMS.values() if t.witness}
    assert set(pinned) == wanted, (wanted - set(pinned), set(pinned) - wanted)
    assert all(text.lstrip().startswith(":") for text in pinned.values())


def test_every_theorem_has_a_witness_or_no_hypotheses():
    declared = coq_theorem_names()
    for key, thm in THEOREMS.items():
        assert bool(thm.witness) != (key in NO_HYPOTHESES), key
        if thm.witness:
            assert thm.witness_name in declared, thm.witness_name


def test_no_hypotheses_claim_matches_the_pinned_statement():
    # A theorem said to have no hypotheses: after its binders, no implication except
    # inside an iff's sides or a binder type. Crude but it fails on "H -> concl".
    pinned = read_statements()
    for key in NO_HYPOTHESES:
        body = pinned[key].lstrip()[1:]
        body = re.sub(r"\([^()]*:[^()]*\)", "", body)  # drop "(x : T)" binders
        body = re.sub(r"forall[^,]*,", "", body)
        if "<->" in body:
            continue  # an iff between two statements: its sides may be implications
        assert " -> " not in body, (key, body)


def test_a_changed_statement_is_reported_with_a_diff():
    pinned = {"t": "     : forall x : nat, x = x"}
    assert _statement_mismatch("t", "M.t", {"M.t": " : forall x : nat,\n x = x"}, pinned) == ""
    why = _statement_mismatch("t", "M.t", {"M.t": "     : True"}, pinned)
    assert "statement of t differs" in why and "-     : forall x" in why and "+     : True" in why
    assert "no pinned statement" in _statement_mismatch("u", "M.u", {"M.u": ": True"}, pinned)


# --- mutations on a copy -------------------------------------------------------------

TRUE_T2 = "Theorem T2_necessity_binary : True.\nProof. exact I. Qed."
CONTRADICTORY_T3 = """Theorem T3_harmonic_mean : forall G (L : nat -> Q) (c : nat), (c < G)%nat ->
  (forall i, (i < G)%nat -> 0 < L i /\\ L i < 0) ->
  (0 < K G (adv G 1 (ind c)) (fun i => / L i) <-> / mean G (fun i => / L i) < L c).
Proof. intros G L c Hc HL. exfalso. destruct (HL c Hc). lra. Qed."""


@pytest.fixture(scope="session")
def checked_baseline(tmp_path_factory, statuses) -> Path:
    """One copy of proofs/, built and checked once for all the mutation tests.

    ``statuses`` has built and checked proofs/ itself: the copy takes its .vo files
    (``shutil.copytree`` keeps their times, so make finds it up to date) and its result
    cache (so checking the copy is a hit). Each test then copies the baseline in turn,
    .vo files included, so make recompiles only the file its mutation touched and the
    files requiring it; and every copy links its ``.cache`` to the baseline's: entries
    are keyed by content, so a mutation misses but does not ask again about the
    theorems of the modules it cannot affect.
    """
    dev = tmp_path_factory.mktemp("baseline") / "proofs"
    shutil.copytree(default_proofs_dir(), dev)
    make = subprocess.run(["make", "-C", str(dev)], capture_output=True, text=True)
    assert make.returncode == 0, make.stdout + make.stderr
    got = compile_proofs(dev)
    assert all(s.status == CHECKED for s in got), [s for s in got if s.status != CHECKED]
    return dev


@pytest.fixture(scope="session")
def mutate(checked_baseline, tmp_path_factory):
    """``mutate(file, theorem, replacement)``: a built copy of the baseline with
    ``theorem`` replaced, its own folder per call (``mutate(None)``: an unchanged copy).
    A mutation is built once a session (tests that make the same one get copies of the
    same build)."""
    built: dict[tuple[str, str, str], Path] = {}

    def copy(src: Path) -> Path:
        dev = tmp_path_factory.mktemp("mutated") / "proofs"
        shutil.copytree(src, dev, ignore=shutil.ignore_patterns(CACHE_DIR))
        (dev / CACHE_DIR).symlink_to(cache_dir(checked_baseline), target_is_directory=True)
        return dev

    def make(file: str | None, theorem: str = "", replacement: str = "") -> Path:
        if file is None:  # the baseline itself
            return copy(checked_baseline)
        if (file, theorem, replacement) not in built:
            dev = copy(checked_baseline)
            _replace(dev, file, theorem, replacement)
            proc = subprocess.run(["make", "-C", str(dev)], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            built[(file, theorem, replacement)] = dev
        return copy(built[(file, theorem, replacement)])

    return make


def _replace(dev: Path, file: str, theorem: str, replacement: str) -> None:
    vfile = dev / "theories" / file
    text = vfile.read_text()
    pattern = re.compile(rf"Theorem {theorem}\b.*?\nQed\.", re.S)
    assert pattern.search(text), theorem
    vfile.write_text(pattern.sub(lambda _: replacement, text, count=1))


MUTATIONS = [
    ("Cancellation.v", "T2_necessity_binary", TRUE_T2),
    ("LengthNorm.v", "T3_harmonic_mean", CONTRADICTORY_T3),
]


@pytest.mark.coq
# ~8-10 s: the slow tier (the full suite, what CI runs, includes it; -m "not slow" stays under 3 minutes)
@pytest.mark.slow
@pytest.mark.parametrize("file,theorem,replacement", MUTATIONS, ids=["weakened", "contradictory"])
def test_mutated_statement_fails_exchange_proofs(coqc, mutate, capsys, file, theorem,
                                                 replacement):
    dev = mutate(file, theorem, replacement)
    got = {s.key: s for s in compile_proofs(dev)}
    assert got[theorem].status == FAILED, got[theorem]
    assert f"statement of {theorem} differs" in got[theorem].detail
    assert all(s.status == CHECKED for k, s in got.items() if k != theorem)
    assert main(["proofs", "--proofs-dir", str(dev)]) == 1
    out = capsys.readouterr().out
    assert theorem in out and "differs" in out


@pytest.mark.coq
# ~12 s when it builds its mutation alone: the slow tier (the full suite, what CI runs, includes it)
@pytest.mark.slow
def test_mutated_statement_fails_the_ci_test_path(coqc, mutate):
    dev = mutate(*MUTATIONS[0])
    env = {**os.environ, "CI": "true", "EXCHANGE_PROOFS_DIR": str(dev)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/theory/test_coq.py::test_every_registered_theorem_is_checked"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "T2_necessity_binary" in proc.stdout


@pytest.mark.coq
def test_pinned_copy_passes(coqc, mutate):
    # Control: the unmutated copy checks, so the failures above come from the mutation.
    dev = mutate("Restoration.v", "T5_truncated_ratio",
                 re.search(r"Theorem T5_truncated_ratio\b.*?\nQed\.",
                           (default_proofs_dir() / "theories" / "Restoration.v").read_text(),
                           re.S).group(0))
    assert all(s.status == CHECKED for s in compile_proofs(dev))
    assert (dev / STATEMENTS_FILE).is_file()


@pytest.mark.coq
def test_the_cache_sees_a_mutated_v_file(coqc, mutate, monkeypatch):
    dev = mutate(None)
    runs = []
    real = coq_driver._run_coq
    monkeypatch.setattr(coq_driver, "_run_coq", lambda *a, **k: runs.append(1) or real(*a, **k))
    # The copy of the checked baseline is answered from the cache, without coqc ...
    assert all(s.status == CHECKED for s in compile_proofs(dev)) and not runs
    # ... and the same folder, one .v file mutated, is not.
    _replace(dev, *MUTATIONS[0])
    got = {s.key: s for s in compile_proofs(dev)}
    assert got["T2_necessity_binary"].status == FAILED
    assert "statement of T2_necessity_binary differs" in got["T2_necessity_binary"].detail
