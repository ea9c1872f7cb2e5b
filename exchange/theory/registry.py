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
    "PINS_SHA256",
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
    # for the theorems over R, module witness_module): the theorem's hypotheses at concrete
    # arguments, W_T := H_T a in the record (so they can all hold at once; G >= 2,
    # advantages of both signs: exchange.theory.nonvacuity). For an iff in NO_HYPOTHESES,
    # its right-to-left direction applied at concrete arguments (exchange proofs checks
    # that the witness's proof term is the theorem applied). "" only for theorems without
    # hypotheses (NO_HYPOTHESES says which; the record check confirms it).
    witness: str = ""
    witness_module: str = "Witnesses"
    # For an iff theorem: a lemma F_<theorem> in the witness module, arguments meeting
    # the hypotheses at which both sides of the iff are false ("" for the others).
    false_witness: str = ""

    @property
    def witness_name(self) -> str:
        """Qualified name of the witness lemma ("" when none)."""
        if not self.witness:
            return ""
        return f"Exchange.{self.witness_module}.{self.witness}"

    @property
    def false_witness_name(self) -> str:
        return f"Exchange.{self.witness_module}.{self.false_witness}" if self.false_witness else ""

    @property
    def short(self) -> str:
        """The theorem's name without its module path (the registry key)."""
        return self.name.rsplit(".", 1)[-1]


# Marks a theorem whose witness is the lemma W_<theorem> (a hypothesis witness that
# applies the theorem) or F_<theorem> (both sides of an iff false): the names follow
# from the theorem's, so no two theorems share a witness.
WITNESS = "W_"
FALSE_WITNESS = "F_"


def _coq(module: str, short: str, statement: str, witness: str = "",
         false_witness: str = "") -> tuple[str, Theorem]:
    # The registry key is the Coq short name, so the key, the qualified name and the
    # file can never disagree (a test parses the .v files to confirm the name exists).
    return short, Theorem(
        name=f"Exchange.{module}.{short}",
        statement=statement,
        file=f"theories/{module}.v",
        witness=f"{witness}{short}" if witness else "",
        witness_module="RealWitnesses" if module == "Real" else "Witnesses",
        false_witness=f"{false_witness}{short}" if false_witness else "",
    )


THEOREMS: dict[str, Theorem] = dict(
    [
        # THEORY.md T1 sufficiency.
        _coq("Cancellation", "T1_event_coefficient",
             "T1: with kappa_i = c*A_i*h at m occurrences per response, K = c*h*m*sum_i A_i."),
        _coq("Cancellation", "T1_sufficiency_exchangeable",
             "T1: zero-sum advantages (Z) and exchangeable coefficients (E) give K = 0 (C).", witness=WITNESS),
        _coq("Cancellation", "T1_sufficiency",
             "T1: zero-sum advantages and equal weights give K = sum_i A_i*w_i = 0.", witness=WITNESS),
        # THEORY.md T2 necessity.
        _coq("Cancellation", "T2_necessity_binary",
             "T2: K = 0 for every binary reward vector under group-mean advantages "
             "(divided by any positive group constant) forces w_1 = ... = w_G.", witness=WITNESS),
        _coq("Cancellation", "T2_necessity_zero_sum",
             "T2 (general): K = 0 for every zero-sum advantage vector forces equal weights.", witness=WITNESS),
        _coq("Cancellation", "T2_characterisation",
             "T1+T2: K = 0 for all zero-sum advantages iff all weights are equal.",
             witness=WITNESS, false_witness=FALSE_WITNESS),
        # THEORY.md section 4 subtlety / Cor 3.3.
        _coq("Cancellation", "Cor33_cancellation_unequal_weights",
             "Cor 3.3: A=(1,1,-2), w=(1,3,2) is zero-sum and cancels with unequal weights."),
        _coq("Cancellation", "M1_two_responses",
             "M1: with A=(a,-a), a != 0, sequence weights cancel iff s_1 = s_2.", witness=WITNESS,
             false_witness=FALSE_WITNESS),
        _coq("Cancellation", "M4_nonzero_sum_breaks",
             "M4: with equal weights w0 != 0, K = w0*sum_i A_i != 0 when sum_i A_i != 0.", witness=WITNESS),
        # THEORY.md section 4, attribution rules: OPO's length-weighted baseline (M4).
        _coq("Cancellation", "M4_opo_sum",
             "M4 (OPO): with baseline b = sum_j L_j r_j / sum_j L_j, sum_i (r_i - b) times "
             "sum_j L_j is -G times sum_i (L_i - mean L)(r_i - mean r): zero-sum exactly "
             "when lengths and rewards do not co-vary.", witness=WITNESS),
        _coq("Cancellation", "M4_opo_equal_lengths",
             "M4 (OPO): with equal non-zero lengths the length-weighted baseline is the "
             "group mean, and the advantages are zero-sum.", witness=WITNESS),
        _coq("Cancellation", "M4_opo_not_zero_sum",
             "M4 (OPO): lengths (1, 2), rewards (1, 0): the advantages sum to 1/3, not 0."),
        # THEORY.md section 2: (E) and its product form.
        _coq("Cancellation", "E_product_form",
             "(E): for shared events of any type, equal ratios kappa_i(e)/A_i over the "
             "responses with A_i != 0 and kappa_i(e) = 0 where A_i = 0 hold iff "
             "kappa_i(e) = A_i * h(e) for one function h of the event.",
             witness=WITNESS, false_witness=FALSE_WITNESS),
        # THEORY.md section 4, M6: an additive event term survives zero-sum advantages.
        _coq("Cancellation", "M6_additive_term",
             "M6: with zero-sum advantages and equal weights, a per-occurrence term phi "
             "gives K = G*phi (one occurrence per response).", witness=WITNESS),
        _coq("Cancellation", "M6_does_not_vanish",
             "M6: G > 0, phi != 0 and zero-sum advantages: K = sum_i (A_i*w0 + phi) != 0.",
             witness=WITNESS),
        _coq("Cancellation", "null_on_equal_rewards",
             "Equal rewards give zero group-mean advantages, so every A_i*w_i = 0.", witness=WITNESS),
        # THEORY.md T3 length normalisation.
        _coq("LengthNorm", "T3_covariance",
             "T3: K = sum_i A_i*x_i equals sum_i (r_i - mean r)(x_i - mean x) (x_i = 1/L_i)."),
        _coq("LengthNorm", "T3_one_correct",
             "T3: one correct response c, kappa_i = A_i/L_i: K = 1/L_c - (1/G) sum_i 1/L_i.", witness=WITNESS),
        _coq("LengthNorm", "T3_sign",
             "T3: K > 0 iff 1/L_c exceeds the mean of 1/L_i.", witness=WITNESS,
             false_witness=FALSE_WITNESS),
        _coq("LengthNorm", "T3_harmonic_mean",
             "T3: with positive lengths, K > 0 iff L_c is below the harmonic mean of the L_i.", witness=WITNESS,
             false_witness=FALSE_WITNESS),
        # THEORY.md T4 sign-dependent clipping.
        _coq("Clipping", "T4_above_event_coefficient",
             "T4: rho > 1+eps_high: K = rho * sum_i min(A_i, 0) under PPO-clip.", witness=WITNESS),
        _coq("Clipping", "T4_above_negative",
             "T4: rho > 1+eps_high and some A_i < 0: K < 0.", witness=WITNESS),
        _coq("Clipping", "T4_below_event_coefficient",
             "T4: rho < 1-eps_low: K = rho * sum_i max(A_i, 0) under PPO-clip.", witness=WITNESS),
        _coq("Clipping", "T4_below_positive",
             "T4: 0 < rho < 1-eps_low and some A_i > 0: K > 0.", witness=WITNESS),
        _coq("Clipping", "T4_inside_cancels",
             "T4: inside the trust region nothing is clipped and zero-sum advantages cancel.", witness=WITNESS),
        # The dual clip c of the package's ppo (verl 'vanilla'): T4 holds up to c.
        _coq("Clipping", "T4_dual_agrees_up_to_c",
             "T4 dual clip: for rho <= c the dual-clipped coefficient is PPO-clip's.",
             witness=WITNESS),
        _coq("Clipping", "T4_dual_above_negative",
             "T4 dual clip: 1+eps_high < rho <= c and some A_i < 0: K < 0.",
             witness=WITNESS),
        _coq("Clipping", "T4_dual_above_c",
             "T4 dual clip: rho > c >= 1+eps_high: every coefficient is 0, so K = 0.",
             witness=WITNESS),
        # THEORY.md T5 restoration (section 4b).
        _coq("Restoration", "T5_min_replace",
             "T5: Min-Replace weights (group minimum) cancel for zero-sum advantages.", witness=WITNESS),
        _coq("Restoration", "T5_constant_normaliser",
             "T5: one normaliser constant per group cancels for zero-sum advantages.", witness=WITNESS),
        _coq("Restoration", "T5_adv_orthogonal",
             "T5: Adv-Orthogonal weights w - (A.w/A.A) A give sum_i A_i w'_i = 0 when A != 0.", witness=WITNESS),
        _coq("Restoration", "T5_sign_free_weight",
             "T5: a weight h(rho_e) of the event ratio alone cancels for zero-sum advantages.", witness=WITNESS),
        _coq("Restoration", "T5_truncated_ratio",
             "T5: CISPO's truncated weight min(rho, 1+eps) cancels for zero-sum advantages.", witness=WITNESS),
        # THEORY.md 4b as defined, any G and any weights.
        _coq("Restoration", "T5_min_replace_general",
             "T5: Min-Replace maps any weights to equal ones, each the group minimum "
             "(a lower bound attained by a response); zero-sum advantages then cancel.",
             witness=WITNESS),
        _coq("Restoration", "T5_adv_orthogonal_projection",
             "T5: Adv-Orthogonal's result is orthogonal to A and differs from w by a "
             "multiple of A (the orthogonal projection), for A != 0.",
             witness=WITNESS),
        _coq("Restoration", "T5_adv_orthogonal_unequal",
             "T5: Adv-Orthogonal restores (C), not (E): on A=(1,1,-2), w=(1,3,2) its "
             "weights cancel and stay unequal."),
        _coq("Restoration", "T5_event_clip",
             "T5: a clip decision that is any function of the event alone (its ratio), "
             "with any event weight h(rho), cancels for zero-sum advantages.",
             witness=WITNESS),
        # The same theorems over R (Coq's standard Reals; issue 18): the std with sqrt,
        # GSPO's exponential weight, a positivity hypothesis wherever a division needs it.
        _coq("Real", "R_T1_sufficiency",
             "T1 over R: zero-sum advantages and equal weights give K = 0.",
             witness=WITNESS),
        _coq("Real", "R_T2_necessity_onehot",
             "T2 over R: K = 0 for every one-hot reward vector, advantages divided by any "
             "group constant positive on those vectors, forces w_1 = ... = w_G.",
             witness=WITNESS),
        _coq("Real", "R_T2_necessity_std",
             "T2 over R with GRPO's std (sqrt of the population variance) as the divisor, "
             "G >= 2: cancellation on the one-hot rewards forces equal weights.",
             witness=WITNESS),
        _coq("Real", "R_T2_necessity_reals",
             "T2 over real reward vectors, G >= 2: K = 0 for every non-constant real reward "
             "vector, advantages divided by any group constant positive on those, forces "
             "equal weights.", witness=WITNESS),
        _coq("Real", "R_null_on_equal_rewards",
             "Over R: equal rewards and a positive scale give every A_i*w_i = 0.",
             witness=WITNESS),
        _coq("Real", "R_T3_one_correct",
             "T3 over R: one correct response c, kappa_i = A_i/L_i: K = 1/L_c - mean_i 1/L_i.",
             witness=WITNESS),
        _coq("Real", "R_T3_harmonic_mean",
             "T3 over R: positive lengths: K > 0 iff L_c is below the harmonic mean.",
             witness=WITNESS, false_witness=FALSE_WITNESS),
        _coq("Real", "R_T4_above_event_coefficient",
             "T4 over R: rho > 1+eps_high: K = rho * sum_i min(A_i, 0) under PPO-clip.",
             witness=WITNESS),
        _coq("Real", "R_T4_above_negative",
             "T4 over R: rho > 1+eps_high and some A_i < 0: K < 0.", witness=WITNESS),
        _coq("Real", "R_T4_below_event_coefficient",
             "T4 over R: rho < 1-eps_low: K = rho * sum_i max(A_i, 0) under PPO-clip.",
             witness=WITNESS),
        _coq("Real", "R_T4_below_positive",
             "T4 over R: 0 < rho < 1-eps_low and some A_i > 0: K > 0.", witness=WITNESS),
        _coq("Real", "R_T4_inside_cancels",
             "T4 over R: inside the trust region zero-sum advantages cancel.",
             witness=WITNESS),
        _coq("Real", "R_M1_gspo",
             "M1 over R, any G >= 2: with GSPO's s_i = exp(mean_t log rho_it), per-token "
             "coefficient A_i*s_i/L_i, K = 0 for every one-hot reward (std) iff all s_i/L_i "
             "are equal.", witness=WITNESS, false_witness=FALSE_WITNESS),
        _coq("Real", "R_M1_gspo_equal_lengths",
             "M1 over R, equal lengths: cancellation iff all GSPO weights s_i are equal "
             "(exp being injective, the codimension G-1 set of equal mean log-ratios; "
             "that last step is not formalised).",
             witness=WITNESS, false_witness=FALSE_WITNESS),
        _coq("Real", "R_Cor33_hyperplane",
             "Cor 3.3 over R, any G: for a fixed non-zero A the cancelling weight vectors "
             "are closed under linear combinations, miss A, and every w is one of them "
             "plus t*A (a hyperplane).", witness=WITNESS),
    ]
)

# The reviewed record (proofs/spec/Spec.v, exchange.theory.record): its sha256. Every
# registered theorem and witness is checked by the kernel against the statement of the
# same name there. Changing this line is a re-pin: `exchange proofs --write-statements
# --accept` does it and logs the diff in proofs/CHANGES.
SPEC_SHA256 = "443bd48dc48eb9211f51556387043cb13b20ccc5372665f4766bd9a77ac0ce62"
# The Python side of the record (proofs/spec/pins.json, exchange.theory.pins): this map's
# keys, witnesses and prose, the vocabulary's links, the axiom policy, the code link's
# tolerance, groups and factors, the layout of proofs/. Re-pinned with SPEC_SHA256.
PINS_SHA256 = "a6a661997dd22aaab57e6e9738d091244facda8aba0d9665ab13d4a394814b20"

# Theorems with no hypotheses (an identity, an iff between two statements, or a closed
# proposition), so no hypothesis witness is needed; a test checks that each registered
# theorem is either here or has a witness. An iff here may still have one (W_ applies
# its right-to-left direction), and has an F_ witness (both sides false).
NO_HYPOTHESES: frozenset[str] = frozenset(
    {"T1_event_coefficient", "T2_characterisation", "Cor33_cancellation_unequal_weights",
     "T3_covariance", "T5_adv_orthogonal_unequal", "M4_opo_not_zero_sum", "E_product_form"}
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
