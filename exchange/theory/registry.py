"""The link between checked properties / mechanisms and machine-checked theorems.

One registry maps each property name and mechanism id to the theorems that back it
(THEORY.md section 3). Backends (Coq today) are named per theorem so another prover
can be added without touching the properties. The Coq development lives in
``proofs/theories`` (logical root ``Exchange``); ``exchange proofs`` compiles it and
checks ``Print Assumptions`` for every theorem named here (see ``exchange.theory.coq``).

A property or mechanism with no theorem is listed in ``PROPERTY_NOTES`` /
``MECHANISM_NOTES`` with the reason, so "no theorem" is always a decision, never an
omission (``tests/theory/test_registry.py`` checks this).
"""

from __future__ import annotations

from dataclasses import dataclass

from exchange.core.vocabulary import MECHANISM_THEOREMS, MECHANISMS, PROPERTY_NAMES, PROPERTY_THEOREMS

__all__ = [
    "Theorem",
    "THEOREMS",
    "PROPERTY_NAMES",
    "MECHANISMS",
    "PROPERTY_THEOREMS",
    "MECHANISM_THEOREMS",
    "PROPERTY_NOTES",
    "MECHANISM_NOTES",
    "NO_HYPOTHESES",
    "SPEC_SHA256",
    "for_property",
    "for_mechanism",
    "note_for",
]


@dataclass(frozen=True)
class Theorem:
    name: str  # qualified name in the proof development, e.g. "Exchange.T1_sufficiency"
    statement: str  # one line, in words
    backend: str = "coq"
    file: str = ""  # path under proofs/
    # Short name of the non-vacuity witness in proofs/theories/Witnesses.v (RealWitnesses.v
    # for the theorems over R, module witness_module): a lemma that
    # the theorem's hypotheses can all hold at once. "" only for theorems without
    # hypotheses (NO_HYPOTHESES says which, and a test checks the pinned statements).
    witness: str = ""
    witness_module: str = "Witnesses"
    # For an iff theorem: a lemma F_<theorem> in Witnesses.v, arguments meeting the
    # hypotheses at which both sides of the iff are false ("" for the others).
    false_witness: str = ""

    @property
    def witness_name(self) -> str:
        """Qualified name of the witness lemma ("" when none)."""
        if not self.witness:
            return ""
        return f"Exchange.{self.witness_module}.{self.witness}"

    @property
    def false_witness_name(self) -> str:
        return f"Exchange.Witnesses.{self.false_witness}" if self.false_witness else ""

    @property
    def short(self) -> str:
        """The theorem's name without its module path (the registry key)."""
        return self.name.rsplit(".", 1)[-1]


def _coq(module: str, short: str, statement: str, witness: str = "",
         false_witness: str = "") -> tuple[str, Theorem]:
    # The registry key is the Coq short name, so the key, the qualified name and the
    # file can never disagree (a test parses the .v files to confirm the name exists).
    return short, Theorem(
        name=f"Exchange.{module}.{short}",
        statement=statement,
        file=f"theories/{module}.v",
        witness=witness,
        witness_module="RealWitnesses" if module == "Real" else "Witnesses",
        false_witness=false_witness,
    )


THEOREMS: dict[str, Theorem] = dict(
    [
        # THEORY.md T1 sufficiency.
        _coq("Cancellation", "T1_event_coefficient",
             "T1: with kappa_i = c*A_i*h at m occurrences per response, K = c*h*m*sum_i A_i."),
        _coq("Cancellation", "T1_sufficiency_exchangeable",
             "T1: zero-sum advantages (Z) and exchangeable coefficients (E) give K = 0 (C).", witness="W_T1_sufficiency_exchangeable"),
        _coq("Cancellation", "T1_sufficiency",
             "T1: zero-sum advantages and equal weights give K = sum_i A_i*w_i = 0.", witness="W_T1_sufficiency"),
        # THEORY.md T2 necessity.
        _coq("Cancellation", "T2_necessity_binary",
             "T2: K = 0 for every binary reward vector under group-mean advantages "
             "(divided by any positive group constant) forces w_1 = ... = w_G.", witness="W_T2_necessity_binary"),
        _coq("Cancellation", "T2_necessity_zero_sum",
             "T2 (general): K = 0 for every zero-sum advantage vector forces equal weights.", witness="W_T2_necessity_zero_sum"),
        _coq("Cancellation", "T2_characterisation",
             "T1+T2: K = 0 for all zero-sum advantages iff all weights are equal.",
             false_witness="F_T2_characterisation"),
        # THEORY.md section 4 subtlety / Cor 3.3.
        _coq("Cancellation", "Cor33_cancellation_unequal_weights",
             "Cor 3.3: A=(1,1,-2), w=(1,3,2) is zero-sum and cancels with unequal weights."),
        _coq("Cancellation", "M1_two_responses",
             "M1: with A=(a,-a), a != 0, sequence weights cancel iff s_1 = s_2.", witness="W_M1_two_responses",
             false_witness="F_M1_two_responses"),
        _coq("Cancellation", "M4_nonzero_sum_breaks",
             "M4: with equal weights w0 != 0, K = w0*sum_i A_i != 0 when sum_i A_i != 0.", witness="W_M4_nonzero_sum_breaks"),
        # THEORY.md section 4, M6: an additive event term survives zero-sum advantages.
        _coq("Cancellation", "M6_additive_term",
             "M6: with zero-sum advantages and equal weights, a per-occurrence term phi "
             "gives K = G*phi (one occurrence per response).", witness="W_T5_zero_sum"),
        _coq("Cancellation", "M6_does_not_vanish",
             "M6: G > 0, phi != 0 and zero-sum advantages: K = sum_i (A_i*w0 + phi) != 0.",
             witness="W_M6_does_not_vanish"),
        _coq("Cancellation", "null_on_equal_rewards",
             "Equal rewards give zero group-mean advantages, so every A_i*w_i = 0.", witness="W_null_on_equal_rewards"),
        # THEORY.md T3 length normalisation.
        _coq("LengthNorm", "T3_covariance",
             "T3: K = sum_i A_i*x_i equals sum_i (r_i - mean r)(x_i - mean x) (x_i = 1/L_i)."),
        _coq("LengthNorm", "T3_one_correct",
             "T3: one correct response c, kappa_i = A_i/L_i: K = 1/L_c - (1/G) sum_i 1/L_i.", witness="W_T3_one_correct"),
        _coq("LengthNorm", "T3_sign",
             "T3: K > 0 iff 1/L_c exceeds the mean of 1/L_i.", witness="W_T3_one_correct",
             false_witness="F_T3_sign"),
        _coq("LengthNorm", "T3_harmonic_mean",
             "T3: with positive lengths, K > 0 iff L_c is below the harmonic mean of the L_i.", witness="W_T3_harmonic_mean",
             false_witness="F_T3_harmonic_mean"),
        # THEORY.md T4 sign-dependent clipping.
        _coq("Clipping", "T4_above_event_coefficient",
             "T4: rho > 1+eps_high: K = rho * sum_i min(A_i, 0) under PPO-clip.", witness="W_T4_above"),
        _coq("Clipping", "T4_above_negative",
             "T4: rho > 1+eps_high and some A_i < 0: K < 0.", witness="W_T4_above"),
        _coq("Clipping", "T4_below_event_coefficient",
             "T4: rho < 1-eps_low: K = rho * sum_i max(A_i, 0) under PPO-clip.", witness="W_T4_below"),
        _coq("Clipping", "T4_below_positive",
             "T4: 0 < rho < 1-eps_low and some A_i > 0: K > 0.", witness="W_T4_below"),
        _coq("Clipping", "T4_inside_cancels",
             "T4: inside the trust region nothing is clipped and zero-sum advantages cancel.", witness="W_T4_inside_cancels"),
        # The dual clip c of the package's ppo (verl 'vanilla'): T4 holds up to c.
        _coq("Clipping", "T4_dual_agrees_up_to_c",
             "T4 dual clip: for rho <= c the dual-clipped coefficient is PPO-clip's.",
             witness="W_T4_dual_agrees_up_to_c"),
        _coq("Clipping", "T4_dual_above_negative",
             "T4 dual clip: 1+eps_high < rho <= c and some A_i < 0: K < 0.",
             witness="W_T4_dual_above"),
        _coq("Clipping", "T4_dual_above_c",
             "T4 dual clip: rho > c >= 1+eps_high: every coefficient is 0, so K = 0.",
             witness="W_T4_dual_above_c"),
        # THEORY.md T5 restoration (section 4b).
        _coq("Restoration", "T5_min_replace",
             "T5: Min-Replace weights (group minimum) cancel for zero-sum advantages.", witness="W_T5_zero_sum"),
        _coq("Restoration", "T5_constant_normaliser",
             "T5: one normaliser constant per group cancels for zero-sum advantages.", witness="W_T5_zero_sum"),
        _coq("Restoration", "T5_adv_orthogonal",
             "T5: Adv-Orthogonal weights w - (A.w/A.A) A give sum_i A_i w'_i = 0 when A != 0.", witness="W_T5_adv_orthogonal"),
        _coq("Restoration", "T5_sign_free_weight",
             "T5: a weight h(rho_e) of the event ratio alone cancels for zero-sum advantages.", witness="W_T5_zero_sum"),
        _coq("Restoration", "T5_truncated_ratio",
             "T5: CISPO's truncated weight min(rho, 1+eps) cancels for zero-sum advantages.", witness="W_T5_zero_sum"),
        # THEORY.md 4b as defined, any G and any weights.
        _coq("Restoration", "T5_min_replace_general",
             "T5: Min-Replace maps any weights to equal ones, each the group minimum "
             "(a lower bound attained by a response); zero-sum advantages then cancel.",
             witness="W_T5_min_replace_general"),
        _coq("Restoration", "T5_adv_orthogonal_projection",
             "T5: Adv-Orthogonal's result is orthogonal to A and differs from w by a "
             "multiple of A (the orthogonal projection), for A != 0.",
             witness="W_T5_adv_orthogonal"),
        _coq("Restoration", "T5_adv_orthogonal_unequal",
             "T5: Adv-Orthogonal restores (C), not (E): on A=(1,1,-2), w=(1,3,2) its "
             "weights cancel and stay unequal."),
        _coq("Restoration", "T5_event_clip",
             "T5: a clip decision that is any function of the event alone (its ratio), "
             "with any event weight h(rho), cancels for zero-sum advantages.",
             witness="W_T5_zero_sum"),
        # The same theorems over R (Coq's standard Reals; issue 18): the std with sqrt,
        # GSPO's exponential weight, a positivity hypothesis wherever a division needs it.
        _coq("Real", "R_T1_sufficiency",
             "T1 over R: zero-sum advantages and equal weights give K = 0.",
             witness="W_R_T1_sufficiency"),
        _coq("Real", "R_T2_necessity_onehot",
             "T2 over R: K = 0 for every one-hot reward vector, advantages divided by any "
             "group constant positive on those vectors, forces w_1 = ... = w_G.",
             witness="W_R_T2_necessity_onehot"),
        _coq("Real", "R_T2_necessity_std",
             "T2 over R with GRPO's std (sqrt of the population variance) as the divisor, "
             "G >= 2: cancellation on the one-hot rewards forces equal weights.",
             witness="W_R_T2_necessity_std"),
        _coq("Real", "R_T2_necessity_reals",
             "T2 over real reward vectors, G >= 2: K = 0 for every non-constant real reward "
             "vector, advantages divided by any group constant positive on those, forces "
             "equal weights.", witness="W_R_T2_necessity_reals"),
        _coq("Real", "R_null_on_equal_rewards",
             "Over R: equal rewards and a positive scale give every A_i*w_i = 0.",
             witness="W_R_null_on_equal_rewards"),
        _coq("Real", "R_T3_one_correct",
             "T3 over R: one correct response c, kappa_i = A_i/L_i: K = 1/L_c - mean_i 1/L_i.",
             witness="W_R_T3_one_correct"),
        _coq("Real", "R_T3_harmonic_mean",
             "T3 over R: positive lengths: K > 0 iff L_c is below the harmonic mean.",
             witness="W_R_T3_harmonic_mean"),
        _coq("Real", "R_T4_above_event_coefficient",
             "T4 over R: rho > 1+eps_high: K = rho * sum_i min(A_i, 0) under PPO-clip.",
             witness="W_R_T4_above"),
        _coq("Real", "R_T4_above_negative",
             "T4 over R: rho > 1+eps_high and some A_i < 0: K < 0.", witness="W_R_T4_above"),
        _coq("Real", "R_T4_below_event_coefficient",
             "T4 over R: rho < 1-eps_low: K = rho * sum_i max(A_i, 0) under PPO-clip.",
             witness="W_R_T4_below"),
        _coq("Real", "R_T4_below_positive",
             "T4 over R: 0 < rho < 1-eps_low and some A_i > 0: K > 0.", witness="W_R_T4_below"),
        _coq("Real", "R_T4_inside_cancels",
             "T4 over R: inside the trust region zero-sum advantages cancel.",
             witness="W_R_T4_inside_cancels"),
        _coq("Real", "R_M1_gspo",
             "M1 over R, any G >= 2: with GSPO's s_i = exp(mean_t log rho_it), per-token "
             "coefficient A_i*s_i/L_i, K = 0 for every one-hot reward (std) iff all s_i/L_i "
             "are equal.", witness="W_R_M1_gspo"),
        _coq("Real", "R_M1_gspo_equal_lengths",
             "M1 over R, equal lengths: cancellation iff all GSPO weights s_i are equal "
             "(exp being injective, the codimension G-1 set of equal mean log-ratios; "
             "that last step is not formalised).",
             witness="W_R_M1_gspo_equal_lengths"),
        _coq("Real", "R_Cor33_hyperplane",
             "Cor 3.3 over R, any G: for a fixed non-zero A the cancelling weight vectors "
             "are closed under linear combinations, miss A, and every w is one of them "
             "plus t*A (a hyperplane).", witness="W_R_Cor33_hyperplane"),
    ]
)

# The reviewed record (proofs/spec/Spec.v, exchange.theory.record): its sha256. Every
# registered theorem and witness is checked by the kernel against the statement of the
# same name there. Changing this line is a re-pin: `exchange proofs --write-statements
# --accept` does it and logs the diff in proofs/CHANGES.
SPEC_SHA256 = "68c021351a9c5ea49dd664d4b0a9990c961c6127363f47cf81dc7e7a68e8b628"

# Theorems with no hypotheses (an identity, an iff between two statements, or a closed
# proposition), so no witness is needed; a test checks that each registered theorem is
# either here or has a witness.
NO_HYPOTHESES: frozenset[str] = frozenset(
    {"T1_event_coefficient", "T2_characterisation", "Cor33_cancellation_unequal_weights",
     "T3_covariance", "T5_adv_orthogonal_unequal"}
)

# Why a property or mechanism has no (or only partial) machine-checked backing.
PROPERTY_NOTES: dict[str, str] = {
    "permutation_invariant": (
        "No theorem: relabelling responses is a property of the implementation's "
        "indexing, not of the theory; every theorem is stated for an arbitrary indexing "
        "of the group, and the invariance itself is tested numerically."
    ),
    "finite": (
        "No theorem: NaN/inf hygiene is floating-point behaviour, outside the exact "
        "rational model used by the proofs; it is tested numerically."
    ),
}
MECHANISM_NOTES: dict[str, str] = {
    "M5": (
        "Covered through T2 (unequal per-response weights break (C) for some binary "
        "reward vector); the HAPO-specific formula K = alpha*c_e*(n_pos - n_neg) of "
        "THEORY.md section 6 is not machine-checked."
    ),
}


def for_property(name: str) -> tuple[Theorem, ...]:
    """Theorems behind a property verdict (empty when none is registered)."""
    return tuple(THEOREMS[t] for t in PROPERTY_THEOREMS.get(name, ()))


def for_mechanism(mechanism: str) -> tuple[Theorem, ...]:
    """Theorems that explain a mechanism id ("M1".."M7")."""
    return tuple(THEOREMS[t] for t in MECHANISM_THEOREMS.get(mechanism, ()))


def note_for(name: str) -> str:
    """Why a property or mechanism has no or partial theorem backing ("" if fully backed)."""
    return PROPERTY_NOTES.get(name) or MECHANISM_NOTES.get(name, "")
