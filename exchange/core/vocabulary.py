"""The vocabulary of the theory, defined once (THEORY.md sections 2-4).

Every other module imports these names instead of spelling them again: the regimes, the
property names and their one-letter labels, the mechanisms M1-M7 with their
descriptions, the rule from mechanisms to broken properties, and the links from
properties and mechanisms to the machine-checked theorems (by short name; the theorem
statements and the Coq files live in :mod:`exchange.theory.registry`).

"Shared residual" is defined once too, in :func:`exchange.core.events.shared_residual`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

__all__ = [
    "REGIMES",
    "REGIME_LABELS",
    "PROPERTY_NAMES",
    "PROPERTY_LETTERS",
    "PROPERTY_SUMMARIES",
    "Expected",
    "Mechanism",
    "MECHANISMS",
    "CANCELLATION_BREAKS",
    "breaks_of",
    "PROPERTY_THEOREMS",
    "MECHANISM_THEOREMS",
]

# On-policy: every ratio is 1. Off-policy: event-consistent ratios on both sides of the
# usual clip ranges (THEORY.md section 2, "Testing these on a black box").
REGIMES: tuple[str, ...] = ("on_policy", "off_policy")
REGIME_LABELS: dict[str, str] = {"on_policy": "on-policy", "off_policy": "off-policy"}

# The stable names the checker reports, in report order.
PROPERTY_NAMES: tuple[str, ...] = (
    "zero_sum",
    "exchangeable",
    "shared_cancellation",
    "null_on_equal_rewards",
    "permutation_invariant",
    "finite",
)
PROPERTY_LETTERS: dict[str, str] = {
    "zero_sum": "Z",
    "exchangeable": "E",
    "shared_cancellation": "C",
    "null_on_equal_rewards": "N",
    "permutation_invariant": "P",
    "finite": "F",
}

# One line per property, for report legends (docs/audit.md, `exchange check`).
PROPERTY_SUMMARIES: dict[str, str] = {
    "zero_sum": "(Z) identical responses on-policy: every event is shared and K_e vanishes",
    "exchangeable": "(E) shared-event coefficient vectors stay parallel when one response's suffix changes",
    "shared_cancellation": "(C) events present in every response of a group have K_e = 0",
    "null_on_equal_rewards": "a group whose rewards are all equal gets zero coefficients",
    "permutation_invariant": "reordering responses and relabelling groups permutes the coefficients",
    "finite": "the loss and every coefficient are finite (tied rewards, length-1 responses, far ratios)",
}


@dataclass(frozen=True)
class Expected:
    """Expected checker verdict in one regime: the properties that break and why (the
    catalog's and the library adapters' derived verdicts; defined here, torch-free, so
    that an audit's parent process can read them without importing the checker)."""

    breaks: frozenset[str] = frozenset()
    mechanisms: frozenset[str] = frozenset()

    @classmethod
    def of(cls, breaks: tuple[str, ...] = (), mechanisms: tuple[str, ...] = ()) -> "Expected":
        return cls(frozenset(breaks), frozenset(mechanisms))


# (E) and (C): what a mechanism that makes per-response weights differ breaks (T2).
CANCELLATION_BREAKS: tuple[str, ...] = ("exchangeable", "shared_cancellation")


@dataclass(frozen=True)
class Mechanism:
    """One mechanism of THEORY.md section 4.

    Fields:
        id: ``"M1"`` .. ``"M7"``.
        title: a few words, for table legends.
        description: one line, for reports.
        breaks: the properties it breaks wherever it acts.
        defect: ``False`` for a design choice (M7) rather than a cancellation defect.
    """

    id: str
    title: str
    description: str
    breaks: tuple[str, ...]
    defect: bool = True


MECHANISMS: dict[str, Mechanism] = {
    m.id: m
    for m in (
        Mechanism("M1", "sequence coupling",
                  "sequence coupling: a per-response weight built from all the response's ratios",
                  CANCELLATION_BREAKS),
        Mechanism("M2", "sign-dependent clipping",
                  "asymmetric piecewise clipping: the clip/gate depends on the sign of the advantage",
                  CANCELLATION_BREAKS),
        Mechanism("M3", "per-response 1/L_i",
                  "per-response normalisation (1/L_i)",
                  CANCELLATION_BREAKS),
        Mechanism("M4", "advantages not zero-sum",
                  "advantages not zero-sum inside the group",
                  ("zero_sum", *CANCELLATION_BREAKS)),
        Mechanism("M5", "token weights from response-level statistics",
                  "token weights from response-level statistics",
                  CANCELLATION_BREAKS),
        Mechanism("M6", "additive event terms",
                  "additive event terms: a per-occurrence term that does not scale with the advantage "
                  "(pass it as regularizer=)",
                  CANCELLATION_BREAKS),
        Mechanism("M7", "response-feature shaping",
                  "response-feature shaping: advantages from a reward shaped by response features "
                  "(a design choice; cancellation intact)",
                  ("exchangeable",), defect=False),
    )
}


def breaks_of(mechanisms: Iterable[str]) -> frozenset[str]:
    """The properties broken when ``mechanisms`` act: the union of each one's ``breaks``
    (none: nothing breaks). Unknown ids raise ``KeyError``."""
    out: set[str] = set()
    for m in mechanisms:
        out |= set(MECHANISMS[m].breaks)
    return frozenset(out)


# Links to the machine-checked theorems, by short name (exchange.theory.registry holds
# the statements; tests/theory checks every name here is registered).
PROPERTY_THEOREMS: dict[str, tuple[str, ...]] = {
    # (Z): identical responses share every event, so K = w*sum A vanishes iff sum A = 0.
    "zero_sum": ("T1_event_coefficient", "M4_nonzero_sum_breaks", "T2_necessity_zero_sum"),
    # (E): sufficient for (C) by T1, and necessary for (C) over all rewards by T2.
    "exchangeable": (
        "T1_sufficiency_exchangeable",
        "T2_necessity_binary",
        "T2_necessity_zero_sum",
        "T2_characterisation",
    ),
    # (C): T1 proves it, T2 says when it must fail, Cor 3.3 why one reward vector is not (E).
    "shared_cancellation": (
        "T1_sufficiency",
        "T1_sufficiency_exchangeable",
        "T2_necessity_binary",
        "Cor33_cancellation_unequal_weights",
        # The same over R (issue 18): std normalisation with sqrt, Cor 3.3 as a hyperplane.
        "R_T1_sufficiency",
        "R_T2_necessity_onehot",
        "R_T2_necessity_std",
        "R_Cor33_hyperplane",
    ),
    "null_on_equal_rewards": ("null_on_equal_rewards", "R_null_on_equal_rewards"),
    "permutation_invariant": (),
    "finite": (),
}

MECHANISM_THEOREMS: dict[str, tuple[str, ...]] = {
    # Each mechanism: the theorem that explains the break, then the one that repairs it.
    "M1": ("M1_two_responses", "R_M1_gspo", "R_M1_gspo_equal_lengths", "T2_necessity_binary",
           "T5_min_replace", "T5_adv_orthogonal", "T5_min_replace_general",
           "T5_adv_orthogonal_projection"),
    "M2": (
        "T4_above_event_coefficient",
        "T4_above_negative",
        "T4_below_event_coefficient",
        "T4_below_positive",
        "T4_inside_cancels",
        "R_T4_above_event_coefficient",
        "R_T4_above_negative",
        "R_T4_below_event_coefficient",
        "R_T4_below_positive",
        "R_T4_inside_cancels",
        "T5_sign_free_weight",
        "T5_truncated_ratio",
        "T5_event_clip",
    ),
    "M3": (
        "T3_one_correct",
        "T3_sign",
        "T3_harmonic_mean",
        "T3_covariance",
        "R_T3_one_correct",
        "R_T3_harmonic_mean",
        "T5_constant_normaliser",
    ),
    "M4": ("M4_nonzero_sum_breaks", "T1_event_coefficient"),
    # Response-level statistics make the weights differ across responses: T2 applies.
    "M5": ("T2_necessity_binary", "T2_necessity_zero_sum", "T5_min_replace"),
    # An event term adds m_e*phi(rho_e) to K_e whatever the advantages: T1's sum A = 0
    # cannot remove it.
    "M6": ("T1_event_coefficient",),
    # Exchangeable in the shaped reward: T1 still gives (C) when the shaped advantages
    # are zero-sum.
    "M7": ("T1_sufficiency_exchangeable",),
}
