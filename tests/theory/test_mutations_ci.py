"""The second half of the mutation suite (test_mutations.py says what it shows): the benign
controls, which must pass without a re-pin, the CI test path, which must fail on a
mutation as ``exchange proofs`` does, and the costliest mutation. A file of its own so
that CI's ``--dist loadfile`` runs it beside test_mutations.py in another worker; the
baseline fixture is built once per worker (session scope). Slow tier; the time is in
docs/proofs.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .test_mutations import (IN_THE_OTHER_FILE, C, MUTATIONS, REPO, SPEC, _run, baseline, copy,  # noqa: F401 (fixtures)
                             fails_exchange_proofs, resub, sub, theorem)

pytestmark = [pytest.mark.coq, pytest.mark.slow]


@pytest.mark.parametrize("kind", IN_THE_OTHER_FILE)
def test_mutation_fails_exchange_proofs(copy, kind):
    fails_exchange_proofs(copy, kind)


def c_reproved(root):
    resub(root, C, theorem("T1_sufficiency"), """Theorem T1_sufficiency : forall G (A w : nat -> Q) (w0 : Q),
  sum G A == 0 /\\ (forall i, (i < G)%nat -> w i == w0) -> K G A w == 0.
Proof.
  intros G A w w0 [HZ Hw].
  transitivity (sum G (fun i => w0 * A i)).
  - unfold K. apply sum_ext. intros i Hi. rewrite (Hw i Hi). ring.
  - rewrite sum_scale, HZ. ring.
Qed.""")


def c_local_lemma_renamed(root):
    for path in (root / "proofs" / "theories").glob("*.v"):
        path.write_text(re.sub(r"\bsum_scale_r\b", "sum_scale_right", path.read_text()))


def c_reformatted(root):
    path = root / C
    text = path.read_text().replace("\n\n", "\n\n(* reformatted *)\n\n").replace("  intros", "    intros")
    path.write_text(text.replace(" -> K G A w == 0.", " ->\n      K G A w == 0."))


def c_definition_alpha_renamed(root):
    sub(root, C, "Definition K (G : nat) (A w : nat -> Q) : Q := sum G (fun i => A i * w i).",
        "Definition K (n : nat) (adv_ w_ : nat -> Q) : Q := sum n (fun j => adv_ j * w_ j).")


CONTROLS = {"reproved": c_reproved, "local_lemma_renamed": c_local_lemma_renamed,
            "reformatted": c_reformatted, "definition_alpha_renamed": c_definition_alpha_renamed}


@pytest.mark.parametrize("kind", list(CONTROLS))
def test_benign_change_passes_without_a_repin(copy, kind):
    CONTROLS[kind](copy)
    before = (copy / SPEC).read_text(), (copy / "exchange/theory/registry.py").read_text()
    proc = _run(copy, "--no-link")  # the link is not what a benign proof edit is about
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert "theorems checked" in proc.stdout
    assert ((copy / SPEC).read_text(), (copy / "exchange/theory/registry.py").read_text()) == before


# The CI test path runs the whole command too (test_cli_proofs.test_all_theorems_checked):
# on a copy with a mutation it fails, so CI and `exchange proofs` agree.
@pytest.mark.parametrize("kind", ["std_constant", "min_replace_takes_max", "theorem_deleted"])
def test_mutation_fails_the_ci_test_path(copy, kind):
    MUTATIONS[kind][0](copy)
    env = {**os.environ, "CI": "true", "PYTHONPATH": str(copy),
           "EXCHANGE_PROOFS_DIR": str(copy / "proofs")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(REPO / "tests/theory/test_cli_proofs.py") + "::test_all_theorems_checked"],
        cwd=copy, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 1, proc.stdout[-3000:]
