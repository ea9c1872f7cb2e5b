"""The mutation suite of issue 33: every kind of change of meaning fails `exchange proofs`.

Each mutation is applied to a copy of the package and of proofs/ (never to the reviewed
record, except where the mutation is an unrecorded edit of it) and `python -m exchange
proofs` runs on the copy in a subprocess, the copy first on PYTHONPATH: the command alone
must exit 1 and name what changed. The benign controls (a theorem re-proved, a local
lemma renamed, a file reformatted, a definition alpha-renamed) must pass without a
re-pin. One build and one checked baseline are shared: every copy links the baseline's
cache (proofs/.cache), so its own coqc build takes the stored .vo of every module whose
source and requirements are unchanged and compiles only the mutated file and its
dependents; per-module Print Assumptions answers, coqchk's run over identical .vo bytes,
Coq's values for the code link's terms (a Python mutation is compared again in full
against them) and the link's pass are reused where the mutation cannot change them.
Slow tier; the time is in docs/proofs.md. The benign controls and the CI-path runs are in
test_mutations_ci.py, a file of its own so that CI's ``--dist loadfile`` runs the two halves
in two workers (the baseline is built once per worker).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exchange.theory.coq import default_proofs_dir

from .conftest import require_coqc

pytestmark = [pytest.mark.coq, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
_IGNORE = shutil.ignore_patterns("__pycache__", ".cache", ".build")


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    """`exchange proofs` on the copy ``root``, with the package's caches on even in CI.

    ``CI`` is dropped from the child's environment: under ``CI=true`` the command reuses
    nothing (a cache restored on a runner is not evidence), so every mutation would
    rebuild and re-ask everything from clean (about 30-40 s of CPU each, the suite then
    several times the slow tier's 6 minutes). The only cache these runs can read is
    ``<baseline>/proofs/.cache``, written in this session by the baseline's build of a copy
    taken without any ``.cache`` or ``.build``: nothing from outside the run. The CI path
    itself, from clean, is run by ``test_mutation_fails_the_ci_test_path`` (``CI=true``
    set explicitly) and ``test_cli_proofs`` on the real tree."""
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}
    env.pop("EXCHANGE_PROOFS_DIR", None)
    env.pop("CI", None)
    return subprocess.run([sys.executable, "-m", "exchange", "proofs", "--proofs-dir",
                           str(root / "proofs"), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="session")
def baseline(tmp_path_factory) -> Path:
    """A copy of exchange/ and proofs/, built and checked once (its cache warmed)."""
    require_coqc()
    root = tmp_path_factory.mktemp("mutation-baseline")
    shutil.copytree(REPO / "exchange", root / "exchange", ignore=_IGNORE)
    shutil.copytree(default_proofs_dir(), root / "proofs", ignore=_IGNORE)
    proc = _run(root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root


@pytest.fixture
def copy(baseline, tmp_path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(baseline / "exchange", root / "exchange")
    shutil.copytree(baseline / "proofs", root / "proofs", ignore=_IGNORE)
    (root / "proofs" / ".cache").symlink_to(baseline / "proofs" / ".cache",
                                            target_is_directory=True)
    return root


def sub(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert old in text, (rel, old)
    path.write_text(text.replace(old, new, 1))


def resub(root: Path, rel: str, pattern: str, new: str) -> None:
    path = root / rel
    text, n = re.subn(pattern, lambda _: new, path.read_text(), count=1, flags=re.DOTALL)
    assert n == 1, (rel, pattern)
    path.write_text(text)


def theorem(name: str) -> str:
    """A regex for ``Theorem name ... Qed.``."""
    return rf"Theorem {name}\b.*?\nQed\."


C = "proofs/theories/Cancellation.v"
R = "proofs/theories/Real.v"
LN = "proofs/theories/LengthNorm.v"
RS = "proofs/theories/Restoration.v"
SPEC = "proofs/spec/Spec.v"


def m_std_constant(root):
    sub(root, R, "  sqrt (Rmean G (fun i => (r i - Rmean G r) * (r i - Rmean G r))).", "  1.")
    resub(root, R, r"(Lemma R_std_onehot_pos .*?\nProof\.).*?\nQed\.",
          "Lemma R_std_onehot_pos : forall G j, (2 <= G)%nat -> (j < G)%nat -> "
          "0 < Rstd G (Rind j).\nProof. intros. unfold Rstd. lra.\nQed.")


def m_gspo_constant(root):
    sub(root, R, "Definition gspo_weight (L : nat) (logrho : nat -> R) : R := exp (Rsum L logrho / INR L).",
        "Definition gspo_weight (L : nat) (logrho : nat -> R) : R := 1.")


def m_binary_widened(root):
    sub(root, C, "forall i, (i < G)%nat -> r i == 0 \\/ r i == 1.",
        "forall i, (i < G)%nat -> r i == 0 \\/ r i == 1 \\/ r i == 2.")
    sub(root, C, "{ intros i _. unfold ind. destruct (Nat.eqb i j); [right|left]; reflexivity. }",
        "{ intros i _. unfold ind. destruct (Nat.eqb i j); [right; left|left]; reflexivity. }")


def m_printing_notation(root):
    # A vacuous conclusion that prints exactly like the real one.
    resub(root, RS, theorem("T5_constant_normaliser"), """Definition K_zero (G : nat) (A w : nat -> Q) : Prop := True.
Notation "'K' G A w == 0" := (K_zero G A w)
  (at level 70, G at level 0, A at level 0, w at level 0, only printing).
Theorem T5_constant_normaliser : forall G (A : nat -> Q) (C : Q),
  sum G A == 0 -> K_zero G A (fun _ => / C).
Proof. intros. exact I. Qed.""")


TRUE_T2 = "Theorem T2_necessity_binary : True.\nProof. exact I. Qed."


def m_statement_true(root):
    resub(root, C, theorem("T2_necessity_binary"), TRUE_T2)


def m_statement_true_repinned(root):
    m_statement_true(root)
    resub(root, SPEC, r"Definition T2_necessity_binary : Prop :=.*?C_T2_necessity_binary G w sigma\.",
          "Definition T2_necessity_binary : Prop := True.")


def m_extra_hypothesis(root):
    sub(root, RS, "Theorem T5_event_clip : forall G (A : nat -> Q) (clip : Q -> bool) (h : Q -> Q) (rho : Q),\n",
        "Theorem T5_event_clip : forall G (A : nat -> Q) (clip : Q -> bool) (h : Q -> Q) (rho : Q),\n"
        "  G = 2%nat ->\n")
    sub(root, RS, "  intros G A clip h rho HZ.", "  intros G A clip h rho _ HZ.")


def m_contradictory(root):
    resub(root, "proofs/theories/LengthNorm.v", theorem("T3_harmonic_mean"),
          """Theorem T3_harmonic_mean : forall G (L : nat -> Q) (c : nat),
  (c < G)%nat /\\ (forall i, (i < G)%nat -> 0 < L i /\\ L i < 0) ->
  (0 < K G (adv G 1 (ind c)) (fun i => / L i) <-> L c < / mean G (fun i => / L i)).
Proof. intros G L c [Hc HL]. exfalso. destruct (HL c Hc). lra. Qed.""")


def m_contradictory_repinned(root):
    # The review's case: contradictory hypotheses and a deliberate re-pin of the record
    # (H_T3_harmonic_mean edited in Spec.v and accepted). The witness W_T3_harmonic_mean
    # is H_T3_harmonic_mean at concrete arguments, which no proof can meet now.
    from exchange.theory.record import accept_record

    m_contradictory(root)
    sub(root, SPEC, "Definition H_T3_harmonic_mean (G : nat) (L : nat -> Q) (c : nat) : Prop :=\n"
        "  (c < G)%nat /\\\n  (forall i, (i < G)%nat -> 0 < L i).",
        "Definition H_T3_harmonic_mean (G : nat) (L : nat -> Q) (c : nat) : Prop :=\n"
        "  (c < G)%nat /\\\n  (forall i, (i < G)%nat -> 0 < L i /\\ L i < 0).")
    accept_record(root / "proofs", root / "exchange/theory/registry.py")


def m_witness_weakened(root):
    resub(root, "proofs/theories/Witnesses.v", r"Lemma W_T4_above_negative :.*?\nQed\.",
          "Lemma W_T4_above_negative : exists G : nat, (1 < G)%nat.\nProof. exists 2%nat. lia. Qed.")


def m_witness_by_computation(root):
    # The same pinned statement, proved without the theorem: an F_ witness (both sides of
    # an iff false) must refute the left side through the theorem. (A W_ witness proves
    # the hypotheses H_T a, so how it is proved does not matter.)
    resub(root, "proofs/theories/Witnesses.v", r"(Lemma F_T3_sign :.*?\nProof\.).*?\nQed\.",
          "Lemma F_T3_sign :\n  ~ (0 < K 2 (adv 2 1 (ind 1)) (fun i => / L12 i)) /\\\n"
          "  ~ (mean 2 (fun i => / L12 i) < / L12 1%nat).\n"
          "Proof. split; vm_compute; intro H; discriminate H.\nQed.")


def _drop_from_registry(root, name, new_name=None):
    reg = root / "exchange/theory/registry.py"
    text, n = re.subn(rf'_coq\("Restoration", "{name}",', f'_coq("Restoration", "{new_name}",'
                      if new_name else "DROP(", reg.read_text(), count=1)
    assert n == 1
    if not new_name:
        text = re.sub(r"        DROP\(.*?\),\n", "", text, count=1, flags=re.DOTALL)
    reg.write_text(text)
    voc = root / "exchange/core/vocabulary.py"
    voc.write_text(voc.read_text().replace(f'"{name}",', f'"{new_name}",' if new_name else "", 1))


def m_theorem_deleted(root):
    resub(root, "proofs/theories/Restoration.v", theorem("T5_truncated_ratio"), "")
    _drop_from_registry(root, "T5_truncated_ratio")


def m_theorem_renamed(root):
    sub(root, "proofs/theories/Restoration.v", "Theorem T5_truncated_ratio ",
        "Theorem T5_truncated_ratio_cispo ")
    _drop_from_registry(root, "T5_truncated_ratio", "T5_truncated_ratio_cispo")


def m_classical_in_q(root):
    sub(root, C, "From Exchange Require Import Sums.",
        "From Exchange Require Import Sums.\nFrom Coq Require Import Classical.")
    sub(root, C, "  intros G A w w0 HZ Hw. unfold K.\n",
        "  destruct (classic True) as [_|_]; intros G A w w0 HZ Hw; unfold K.\n")
    sub(root, C, "  rewrite sum_scale_r, HZ. ring.\nQed.\n\n(** ** T2 necessity *)",
        "  rewrite sum_scale_r, HZ; ring.\n  all: rewrite (sum_ext G _ (fun i => A i * w0)) by "
        "(intros i Hi; rewrite (Hw i Hi); ring); rewrite sum_scale_r, HZ; ring.\nQed.\n\n"
        "(** ** T2 necessity *)")


def _append(root, rel, text):
    path = root / rel
    path.write_text(path.read_text() + text)


# The cheats go in LengthNorm.v: a QArith module the code link does not use, so that only
# what depends on it is checked again (the time of the suite, not what it shows).
def m_string_hidden_axiom(root):
    _append(root, LN, '\nFrom Coq Require Import String.\n'
            'Definition exchange_opening : string := "(*"%string.\nAxiom hidden : False.\n')


def m_admitted_unused(root):
    _append(root, LN, "\nLemma unused_admitted : (1 + 1 = 3)%nat.\nProof. Admitted.\n")


def m_guard_unset(root):
    _append(root, LN, "\nUnset Guard Checking.\nFixpoint loop (n : nat) : nat := loop n.\n"
            "Set Guard Checking.\n")


def m_type_in_type(root):
    sub(root, "proofs/_CoqProject", "-Q spec ExchangeSpec\n", "-Q spec ExchangeSpec\n-arg -type-in-type\n")


def m_impredicative_set(root):
    sub(root, "proofs/_CoqProject", "-Q spec ExchangeSpec\n",
        "-Q spec ExchangeSpec\n-arg -impredicative-set\n")


def m_spec_definition_edited(root):
    sub(root, SPEC, "  sqrt (Rmean G (fun i => (r i - Rmean G r) * (r i - Rmean G r))).", "  1.")


O = "exchange/objectives/"


def m_min_replace_max(root):
    sub(root, O + "restoring.py", "return rollout.group_min(", "return rollout.group_max(")


def m_adv_orthogonal_scaled(root):
    sub(root, O + "restoring.py", "return (w - coef * a).detach()", "return (w - 1.1 * coef * a).detach()")


def m_dual_clip_removed(root):
    sub(root, O + "_common.py", "    return torch.where((adv < 0) & (ratio > clip_c), floor, clipped)",
        "    return clipped")


def m_clip_widened(root):
    sub(root, O + "_common.py", "clipped = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))",
        "clipped = ((adv > 0) & (ratio > 1.01 + eps_high)) | ((adv < 0) & (ratio < 0.99 - eps_low))")


# --- issue 43's five kinds -------------------------------------------------------------
# 1. the compiled record is the hashed one: extra roots, make hooks, a changed Makefile.
def m_second_spec_folder(root):
    (root / "proofs" / "spec2").mkdir()
    (root / "proofs" / "spec2" / "Spec.v").write_text((root / SPEC).read_text())
    sub(root, "proofs/_CoqProject", "-Q spec ExchangeSpec\n", "-Q spec ExchangeSpec\n-Q spec2 ExchangeSpec\n")


def m_make_hook(root):
    (root / "proofs" / "Makefile.coq.local").write_text("post-all::\n\tcp other.vo spec/Spec.vo\n")


def m_makefile_changed(root):
    _append(root, "proofs/Makefile", "\n# rebuilds spec/Spec.vo from elsewhere\n")


# 2. axioms by origin: a Coq root, a top-level Context.
def m_coq_root(root):
    (root / "proofs" / "evil").mkdir()
    (root / "proofs" / "evil" / "Helper.v").write_text("Context (helper_fact : forall P : Prop, P).\n")
    sub(root, "proofs/_CoqProject", "-Q spec ExchangeSpec\n", "-Q spec ExchangeSpec\n-Q evil Coq\n")


def m_top_level_context(root):
    _append(root, LN, "\nContext (helper_fact :\n  forall P : Prop, P).\n")


# 3. re-pins leave a trail: Spec.v edited and SPEC_SHA256 rewritten by hand, no CHANGES.
def m_repinned_by_hand(root):
    import hashlib

    m_spec_definition_edited(root)
    new = hashlib.sha256((root / SPEC).read_bytes()).hexdigest()
    resub(root, "exchange/theory/registry.py", r'SPEC_SHA256 = "[0-9a-f]*"', f'SPEC_SHA256 = "{new}"')


# 3b. witnesses: a dead `pose proof` naming the theorem; a theorem weakened to G <= 1,
# re-pinned with --accept and witnessed at G = 1.
def m_dead_pose_proof(root):
    # W_T2_characterisation (an iff without hypotheses: its W_ applies the right-to-left
    # direction) proved directly, the theorem named only in a dead `pose proof`.
    sub(root, "proofs/theories/Witnesses.v",
        "Proof. apply (proj2 (T2_characterisation 2 (fun _ => 2))). intros; reflexivity. Qed.",
        "Proof. pose proof T2_characterisation as unused. intros A HZ. unfold K. simpl in *. lra. Qed.")


def m_weakened_to_one_response(root):
    # T5_truncated_ratio (used by no other proof) gets the hypothesis G <= 1; Spec.v is
    # edited to match, the witness moved to G = 1, and the whole re-pinned with --accept.
    from exchange.theory.record import accept_record

    sub(root, RS, "Theorem T5_truncated_ratio : forall G (A : nat -> Q) (rho eps : Q),\n  sum G A == 0 ->",
        "Theorem T5_truncated_ratio : forall G (A : nat -> Q) (rho eps : Q),\n"
        "  (G <= 1)%nat /\\ sum G A == 0 ->")
    sub(root, RS, "  intros G A rho eps HZ. apply", "  intros G A rho eps [_ HZ]. apply")
    sub(root, SPEC, "Definition H_T5_truncated_ratio (G : nat) (A : nat -> Q) (rho eps : Q) : Prop :=\n"
        "  sum G A == 0.", "Definition H_T5_truncated_ratio (G : nat) (A : nat -> Q) (rho eps : Q) : Prop :=\n"
        "  (G <= 1)%nat /\\ sum G A == 0.")
    sub(root, "proofs/theories/Witnesses.v",
        "Lemma W_T5_truncated_ratio : hyp_of (T5_truncated_ratio 3 cor33_A 2 (1#5)).\n"
        "Proof. exact cor33_zero_sum. Qed.",
        "Lemma W_T5_truncated_ratio : hyp_of (T5_truncated_ratio 1 (fun _ => 0) 2 (1#5)).\n"
        "Proof. red. split; [lia|reflexivity]. Qed.")
    sub(root, SPEC, "Definition W_T5_truncated_ratio : Prop := H_T5_truncated_ratio 3 cor33_A 2 (1#5).",
        "Definition W_T5_truncated_ratio : Prop := H_T5_truncated_ratio 1 (fun _ => 0) 2 (1#5).")
    accept_record(root / "proofs", root / "exchange/theory/registry.py")


def m_tautological_witness_repinned(root):
    # The T2 witnesses used to be tautologies (`... -> 2 == 2`), which passed every check.
    # Planted back into Spec.v (proved by reflexivity) and re-pinned with --accept: the
    # record's shape check rejects a witness that is not H_T at concrete arguments.
    from exchange.theory.record import accept_record

    sub(root, SPEC, "Definition W_T2_necessity_binary : Prop := H_T2_necessity_binary 3 (fun _ => 2) (fun _ => 1).",
        "Definition W_T2_necessity_binary : Prop :=\n  forall i j, (i < 3)%nat -> (j < 3)%nat -> 2 == 2.")
    resub(root, "proofs/theories/Witnesses.v", r"Lemma W_T2_necessity_binary :.*?\nQed\.",
          "Lemma W_T2_necessity_binary :\n  forall i j, (i < 3)%nat -> (j < 3)%nat -> 2 == 2.\n"
          "Proof. intros; reflexivity. Qed.")
    accept_record(root / "proofs", root / "exchange/theory/registry.py")


# 4. the Python side: prose, links, axiom policy, tolerance, a key checked as another theorem.
def m_prose_flipped(root):
    sub(root, "exchange/theory/registry.py", "T4: rho > 1+eps_high and some A_i < 0: K < 0.",
        "T4: rho > 1+eps_high and some A_i < 0: K > 0.")


def m_links_swapped(root):
    voc = root / "exchange/core/vocabulary.py"
    text = voc.read_text()
    text = text.replace('"M2": (', '"M_tmp": (', 1).replace('"M3": (', '"M2": (', 1)
    voc.write_text(text.replace('"M_tmp": (', '"M3": (', 1))


def m_real_modules_widened(root):
    sub(root, "exchange/theory/coq.py", 'frozenset({"Exchange.Real"})',
        'frozenset({"Exchange.Real", "Exchange.Cancellation"})')


def m_link_tolerance(root):
    sub(root, "exchange/theory/link.py", "REL_TOL = 1e-9", "REL_TOL = 1e-2")


def m_key_is_another_theorem(root):
    _append(root, "exchange/theory/registry.py",
            '\nTHEOREMS["T4_above_negative"] = THEOREMS["T4_below_positive"]\n')


def m_link_removed(root):
    sub(root, "exchange/core/vocabulary.py", '"T4_above_negative",\n', "")


def m_witness_unregistered(root):
    sub(root, "exchange/theory/registry.py",
        '"T4: rho > 1+eps_high and some A_i < 0: K < 0.", witness=WITNESS)',
        '"T4: rho > 1+eps_high and some A_i < 0: K < 0.")')


# 5. the code link probes densely: the review's two planted bugs.
def m_ppo_drops_negative_push_down(root):
    sub(root, O + "_common.py", "    return torch.where((adv < 0) & (ratio > clip_c), floor, clipped)",
        "    band = (adv < 0) & (ratio > 1.4) & (ratio < 1.9)\n"
        "    clipped = torch.where(band, clipped.detach(), clipped)\n"
        "    return torch.where((adv < 0) & (ratio > clip_c), floor, clipped)")


def m_gspo_arithmetic_mean(root):
    sub(root, O + "gspo.py", "    return torch.exp(sequence_log_ratio(logprobs, rollout))",
        "    m = rollout.fmask.to(logprobs.dtype)\n"
        "    return (torch.exp(logprobs - rollout.old_logprobs) * m).sum(1) / m.sum(1).clamp(min=1.0)")


# (mutation, what the output must name); every message line starts with FAILED.
MUTATIONS = {
    "std_constant": (m_std_constant, ["statement of R_T2_necessity_std differs", "Rstd"]),
    # The witnesses apply their theorems, so a change that breaks one fails the build
    # at the witness, which names the theorem (W_<theorem>, F_<theorem>).
    "gspo_weight_constant": (m_gspo_constant, ["theories/RealWitnesses.v at F_R_M1_gspo"]),
    "binary_widened": (m_binary_widened, ["statement of T2_necessity_binary differs", "binary"]),
    # Its hypotheses are unchanged (the witness still builds); the kernel sees K_zero.
    "printing_only_notation": (m_printing_notation,
                               ["statement of T5_constant_normaliser differs"]),
    "statement_true": (m_statement_true, ["theories/Witnesses.v at W_T2_necessity_binary"]),
    "statement_true_repinned": (m_statement_true_repinned,
                                ["not the reviewed record", "statement T2_necessity_binary changed"]),
    "extra_hypothesis": (m_extra_hypothesis, ["theories/Witnesses.v at W_T5_event_clip"]),
    # The witness W_T3_harmonic_mean applies the theorem: it no longer builds.
    "contradictory_hypotheses": (m_contradictory, ["theories/Witnesses.v at W_T3_harmonic_mean"]),
    "contradictory_hypotheses_repinned": (m_contradictory_repinned,
                                          ["theories/Witnesses.v at W_T3_harmonic_mean"]),
    "witness_weakened": (m_witness_weakened,
                         ["non-vacuity witness Exchange.Witnesses.W_T4_above_negative",
                          "statement of W_T4_above_negative differs"]),
    "witness_not_applying_its_theorem": (m_witness_by_computation,
                                         ["non-vacuity witness Exchange.Witnesses.F_T3_sign",
                                          "does not apply Exchange.LengthNorm.T3_sign"]),
    "theorem_deleted": (m_theorem_deleted, ["T5_truncated_ratio is in the reviewed record but not registered"]),
    "theorem_renamed": (m_theorem_renamed, ["T5_truncated_ratio is in the reviewed record but not registered",
                                            "T5_truncated_ratio_cispo is registered but has no statement"]),
    "classical_axiom_in_q": (m_classical_in_q, ["Exchange.Cancellation.T1_sufficiency",
                                                "does not allow", "Classical_Prop.classic"]),
    "axiom_hidden_after_string": (m_string_hidden_axiom, ["axiom Exchange.LengthNorm.hidden",
                                                          "Axiom"]),
    "admitted_unused_lemma": (m_admitted_unused, ["Exchange.LengthNorm.unused_admitted", "Admitted"]),
    "guard_checking_unset": (m_guard_unset, ["Unset Guard Checking", "unsafe"]),
    "type_in_type_flag": (m_type_in_type, ["`-arg -type-in-type`"]),
    "impredicative_set_flag": (m_impredicative_set, ["`-arg -impredicative-set`"]),
    "spec_definition_edited": (m_spec_definition_edited,
                               ["not the reviewed record", "definitions, examples or comments"]),
    "min_replace_takes_max": (m_min_replace_max, ["code link", "T5 Min-Replace"]),
    "adv_orthogonal_scaled": (m_adv_orthogonal_scaled, ["code link", "T5 Adv-Orthogonal"]),
    "dual_clip_removed": (m_dual_clip_removed, ["code link", "T4 dual-clip rho"]),
    "clip_bounds_widened": (m_clip_widened, ["code link", "T4 dual-clip rho"]),
    # issue 43
    "witness_with_dead_pose_proof": (m_dead_pose_proof,
                                     ["is not Exchange.Cancellation.T2_characterisation applied"]),
    "weakened_to_one_response_repinned": (m_weakened_to_one_response,
                                          ["W_T5_truncated_ratio is H_T5_truncated_ratio at G = 1"]),
    "tautological_witness_repinned": (m_tautological_witness_repinned,
                                      ["statement W_T2_necessity_binary is `forall i j",
                                       "not H_T2_necessity_binary applied to 3 concrete arguments"]),
    "second_folder_bound_to_the_record": (m_second_spec_folder, ["_CoqProject maps"]),
    "make_hook": (m_make_hook, ["Makefile.coq.local exists"]),
    "makefile_changed": (m_makefile_changed, ["proofs/Makefile has sha256"]),
    "coq_root_with_context": (m_coq_root, ["logical root Coq"]),
    "top_level_context": (m_top_level_context, ["Context (top level", "helper_fact"]),
    "repinned_by_hand_without_changes": (m_repinned_by_hand,
                                         ["does not name the current SPEC_SHA256"]),
    "registry_prose_flipped": (m_prose_flipped, ["pins.theorems.T4_above_negative.statement"]),
    "vocabulary_links_swapped": (m_links_swapped, ["pins.mechanism_links.M2"]),
    "real_modules_widened": (m_real_modules_widened, ["pins.axiom_policy"]),
    "link_tolerance_loosened": (m_link_tolerance, ["pins.link.rel_tol"]),
    "key_checked_as_another_theorem": (m_key_is_another_theorem,
                                       ["registry key T4_above_negative names"]),
    "link_removed": (m_link_removed, ["pins.mechanism_links.M2",
                                      "T4_above_negative is registered but backs no"]),
    "witness_unregistered": (m_witness_unregistered, ["W_T4_above_negative is in the reviewed "
                                                      "record but not registered"]),
    "ppo_drops_negative_push_down": (m_ppo_drops_negative_push_down,
                                     ["code link", "T4 dual-clip rho=1.5 (grid)"]),
    "gspo_arithmetic_mean": (m_gspo_arithmetic_mean, ["code link", "gspo M1 off-policy"]),
}


# Run in test_mutations_ci.py's worker: the costliest mutation (about 50 s of CPU: 74
# theorems re-asked), so that CI's two workers end at about the same time.
IN_THE_OTHER_FILE = ("classical_axiom_in_q",)


@pytest.mark.parametrize("kind", [k for k in MUTATIONS if k not in IN_THE_OTHER_FILE])
def test_mutation_fails_exchange_proofs(copy, kind):
    fails_exchange_proofs(copy, kind)


def fails_exchange_proofs(copy: Path, kind: str) -> None:
    """``exchange proofs`` on ``copy`` with mutation ``kind`` exits 1 naming what changed."""
    mutate, names = MUTATIONS[kind]
    mutate(copy)
    # A mutation the code link is not about runs with --no-link: every other check is
    # the same, and a Coq or Python edit would otherwise re-run ~600 Coq evaluations
    # (about 30 s of CPU) that say nothing about it. The baseline and the CI-path runs
    # check the link in full.
    proc = _run(copy, *([] if any("code link" in n for n in names) else ["--no-link"]))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    # One failing check must not make the ones after it fail (each coqc pass resumes
    # after the unit that stopped it, with every module it needs).
    assert "was not found in the current environment" not in out, out[-6000:]
    failed = "\n".join(line for line in out.split("FAILED")[1:])
    missing = [n for n in names if n not in failed]
    assert not missing, (missing, out[-6000:])
