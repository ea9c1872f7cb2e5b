"""The vocabulary of the theory, defined once (THEORY.md sections 2-4).

Every other module imports these names instead of spelling them again: the regimes, the
property names and their one-letter labels, the mechanisms M1-M8 with their
descriptions, the rule from mechanisms to broken properties, and the links from
properties and mechanisms to the machine-checked theorems (by short name; the theorem
statements and the Coq files live in :mod:`exchange.theory.registry`).

"Shared residual" is defined once too, in :func:`exchange.core.events.shared_residual`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping

__all__ = [
    "Regime",
    "REGIMES",
    "REGIME_LABELS",
    "PROPERTY_NAMES",
    "PROPERTY_LETTERS",
    "PROPERTY_SUMMARIES",
    "Expected",
    "Mechanism",
    "MECHANISMS",
    "Facet",
    "FACETS",
    "breaks_of",
    "verdict_of",
    "per_regime",
    "PROPERTY_THEOREMS",
    "MECHANISM_THEOREMS",
]

# On-policy: every ratio is 1. Off-policy: event-consistent ratios on both sides of the
# usual clip ranges (THEORY.md section 2, "Testing these on a black box").
class Regime(str, Enum):
    """A regime of the checks. A ``str`` enum: a member equals, hashes and formats as its
    value (``"on_policy"``), so dictionaries keyed by regime also answer to the names
    reports and JSON files carry; code names the member, never the string."""

    ON_POLICY = "on_policy"
    OFF_POLICY = "off_policy"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def label(self) -> str:
        """``"on-policy"`` / ``"off-policy"``, for tables."""
        return REGIME_LABELS[self]

    @property
    def off_policy(self) -> bool:
        return self is Regime.OFF_POLICY


REGIMES: tuple[Regime, ...] = (Regime.ON_POLICY, Regime.OFF_POLICY)
REGIME_LABELS: dict[Regime, str] = {Regime.ON_POLICY: "on-policy", Regime.OFF_POLICY: "off-policy"}

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
class Mechanism:
    """One mechanism of THEORY.md section 4.

    Fields:
        id: ``"M1"`` .. ``"M8"``.
        title: a few words, for table legends.
        description: one line, for reports.
        defect: ``False`` for a design choice (M7) rather than a cancellation defect.
    """

    id: str
    title: str
    description: str
    defect: bool = True


MECHANISMS: dict[str, Mechanism] = {
    m.id: m
    for m in (
        Mechanism("M1", "sequence coupling",
                  "sequence coupling: a per-response weight built from all the response's ratios"),
        Mechanism("M2", "sign-dependent clipping",
                  "asymmetric piecewise clipping: the clip/gate depends on the sign of the advantage"),
        Mechanism("M3", "per-response 1/L_i",
                  "per-response normalisation (1/L_i)"),
        Mechanism("M4", "advantages not zero-sum",
                  "advantages not zero-sum inside the group"),
        Mechanism("M5", "token weights from response-level statistics",
                  "token weights from response-level statistics"),
        Mechanism("M6", "additive event terms",
                  "additive event terms: a per-occurrence term that does not scale with the advantage "
                  "(pass it as regularizer=)"),
        Mechanism("M7", "response-feature shaping",
                  "response-feature shaping: advantages from a reward shaped by response features "
                  "(a design choice; cancellation intact)",
                  defect=False),
        # A property of the training schedule, not of a loss_fn: no facet of an objective
        # carries it, and a bare check cannot name it (THEORY.md section 4: a recipe audit
        # and a monitor judge one optimizer step).
        Mechanism("M8", "split updates",
                  "split updates: a group's responses fall into different optimizer steps, so each "
                  "step's shared-event coefficients cancel only across steps"),
    )
}


@dataclass(frozen=True)
class Facet:
    """One way a part of an objective carries a mechanism of THEORY.md section 4.

    A mechanism does not always break the same properties: a baseline taken over other
    groups also breaks (N), a greedy baseline keeps (E), a projection that restores (C)
    over unequal weights leaves only (E). A facet is the unit the rule works on: each
    part of an objective (catalog family, transformation, library setting) declares
    the facets it carries, and the expected verdict is :func:`verdict_of` them. Reports
    name the facet's ``mechanism`` (THEORY.md's ids M1-M8; facets add no new id).

    Fields:
        key: ``"M4.foreign_centre"``: the mechanism id, a dot, a short name.
        description: one line: what the part does.
        breaks: the properties it breaks, with the reason in ``why``.
        why: the derivation, citing THEORY.md.
    """

    key: str
    description: str
    breaks: tuple[str, ...]
    why: str

    @property
    def mechanism(self) -> str:
        return self.key.split(".", 1)[0]


_Z, _E, _C, _N, _P = "zero_sum", "exchangeable", "shared_cancellation", "null_on_equal_rewards", "permutation_invariant"

FACETS: dict[str, Facet] = {
    f.key: f
    for f in (
        Facet("M1.sequence_weight", "a per-response weight built from all the response's token ratios",
              (_E, _C), "T2: unequal per-response weights break (C) for some reward vector, so (E) fails too"),
        Facet("M1.projected", "M1's sequence weight, with (C) restored by a projection (Adv-Orthogonal)",
              (_E,), "section 4b: sum_i A_i w_i = 0 cancels shared events; the weights still differ (section 4, "
              "attribution rules: name the mechanism that made them unequal)"),
        Facet("M2.sign_clip", "a clip, mask or soft gate whose test depends on the sign of the advantage",
              (_E, _C), "T4: outside the trust region only one sign survives, K_e = rho_e sum_unclipped A_i"),
        Facet("M2.advantage_selection",
              "occurrences selected by their advantage (a covariance rank), random or positional among ties",
              (_E, _C, _P), "section 4, attribution rules: a selection by the advantage is M2; the pick is by "
              "batch position, so reordering responses changes which copy is selected (P)"),
        Facet("M3.response_norm", "a per-response normaliser (1/L_i, 1/sqrt(L_i))",
              (_E, _C), "T3: K_shared = sum_i A_i / L_i, non-zero when reward and 1/L co-vary"),
        Facet("M3.micro_batch_norm", "a normaliser computed per micro-batch (its token or row count)",
              (_E, _C, _P), "section 4, M3: when a group spans micro-batches the weight depends on the row order"),
        Facet("M3.projected", "M3's 1/L_i weight, with (C) restored by a projection (Adv-Orthogonal)",
              (_E,), "section 4b and the attribution rules: (C) restored by projection, M3 still makes the "
              "weights unequal"),
        Facet("M4.not_zero_sum", "advantages that do not sum to zero inside the group (positive-only, pass@k "
              "credit, one sign scaled, pruning or masking after centring)",
              (_Z, _C), "T1/M4: identical responses give K_e = w sum_i A_i != 0"),
        Facet("M4.length_weighted", "a baseline or scale weighted by token counts (OPO, token-level whitening)",
              (_Z, _E, _C), "section 4, attribution rules: not zero-sum once lengths differ, and one response's "
              "suffix length moves every advantage of the group, so alpha changes direction (E)"),
        Facet("M4.foreign_centre", "a centre that is not the group's own (raw rewards, a batch mean, a greedy "
              "baseline)", (_Z, _C, _N),
              "section 4, M4: a group of equal rewards keeps non-zero advantages (N); a greedy or scalar "
              "baseline does not depend on the suffixes, so (E) holds"),
        Facet("M5.response_statistics", "token weights from response-level statistics (within-response "
              "standardisation, per-response quantiles)", (_E, _C), "T2: the weights differ across responses"),
        Facet("M5.micro_batch_quantile", "a token mask from a quantile of each micro-batch's tokens (TRL's "
              "top_entropy_quantile with several micro-batches)", (_E, _C, _P),
              "section 4, M5, and M3's micro-batch case: copies of one event in different micro-batches meet "
              "different thresholds, and which micro-batch a response joins follows the row order (P)"),
        Facet("M6.event_term", "a per-occurrence term that does not scale with the advantage (KL on sampled "
              "tokens, (log rho)^2, abs(log rho), an entropy bonus on sampled tokens)", (_E, _C, _N),
              "section 4, M6: adds m_e phi(rho_e) to K_e whatever the advantages; a tied group keeps it (N)"),
        Facet("M6.event_term_on_kept", "M6's term, on responses kept only when their advantage is non-zero "
              "(zero-advantage responses dropped first)", (_E, _C),
              "section 4, M6; a tied group drops every response, so (N) holds"),
        Facet("M6.offset_on_kept", "M6's term with the same gradient on every token (k1, an entropy bonus on the "
              "sampled tokens), on responses kept only when their advantage is non-zero, on-policy",
              (_C,), "section 2: on-policy it adds w_i beta to every coefficient, an offset of the advantages; no "
              "tied group is left to show it, so (E)'s black-box form holds, and identical responses keep "
              "K_e = G w beta for every reward vector (M6 through (C))"),
        Facet("M4.mask_after_centring", "responses dropped from the loss after the group's advantages were "
              "centred over all of them (overlong filters, TRL's mask_truncated_completions)", (_Z, _E, _C),
              "section 4, M4 and section 2: the kept advantages are not zero-sum once some responses of a group "
              "are truncated and others are not; a dropped response has A_i != 0 and kappa = 0, and a suffix "
              "that crosses the length limit moves alpha (E)"),
        Facet("M7.shaping", "advantages from a reward shaped by response features (length, format, a KL in "
              "the reward)", (_E, _N),
              "section 4, M7: exchangeable in the shaped reward, cancellation intact; a tied group's "
              "coefficients follow the response features (section 4, attribution rules), so (N) in the "
              "verifiable reward fails by design too"),
        Facet("M8.split_update", "a training schedule whose optimizer step holds part of a generation batch "
              "(TRL: gradient_accumulation_steps not a multiple of steps_per_generation, after its row shuffle; "
              "verl: ppo_mini_batch_size below the train batch with balance_batch or shuffle)",
              (_Z, _C),
              "section 4, M8, each property read on one optimizer step, the step's part S of a group (section "
              "4: a recipe audit judges one step): its advantages sum to sum_{i in S} A_i != 0 although the "
              "group's do (Z), so a shared event keeps K_e = c h(e) sum_{i in S} A_i (C, T1's event coefficient); "
              "(E), (N) and (P) are the loss's own (inside the step the coefficients are the loss's, and "
              "reordering the step's rows permutes them). A bare loss check given the whole generation batch "
              "sees a row outside the step as a zero weight: its (Z) average over reward permutations then "
              "sums over every step, and its (P) probe compares two different steps"),
        Facet("M7.shaping_on_kept", "M7's shaping, on groups kept only when their verifiable rewards differ "
              "(tied groups dropped first)", (_E,), "section 4, M7; a tied group is dropped, so (N) holds"),
    )
}


def breaks_of(facets: Iterable[str]) -> frozenset[str]:
    """The rule from mechanisms to broken properties: the union of each facet's
    ``breaks`` (no facet: nothing breaks). ``facets`` are keys of :data:`FACETS`; an
    unknown key raises ``KeyError`` naming the known ones."""
    out: set[str] = set()
    for key in facets:
        if key not in FACETS:
            raise KeyError(f"facet {key!r} is not defined; known: {', '.join(FACETS)}")
        out |= set(FACETS[key].breaks)
    return frozenset(out)


@dataclass(frozen=True)
class Expected:
    """Expected checker verdict in one regime: the properties that break and why (the
    catalog's and the library adapters' derived verdicts; defined here, torch-free, so
    that an audit's parent process can read them without importing the checker).

    Built from facets with :func:`verdict_of` (``breaks`` and ``mechanisms`` are then
    the rule applied to ``facets``); the bare constructor is for verdicts read back
    from a report or a file, where no facets are known."""

    breaks: frozenset[str] = frozenset()
    mechanisms: frozenset[str] = frozenset()
    facets: frozenset[str] = frozenset()


def per_regime(on_policy: Expected, off_policy: Expected) -> Mapping[Regime, Expected]:
    """The expected verdicts of an objective in both regimes, keyed by :class:`Regime`."""
    return {Regime.ON_POLICY: on_policy, Regime.OFF_POLICY: off_policy}


def verdict_of(*facets: str) -> Expected:
    """The expected verdict of a part or objective carrying ``facets``: the properties
    :func:`breaks_of` them, and their mechanism ids. ``verdict_of()`` is "nothing breaks"."""
    return Expected(breaks_of(facets), frozenset(FACETS[f].mechanism for f in facets), frozenset(facets))


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
        # THEORY.md's "equivalently kappa = c_g * A_i * h(e)": the definition and its
        # product form agree.
        "E_product_form",
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
        "R_T2_necessity_reals",
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
           "T5_adv_orthogonal_projection", "T5_adv_orthogonal_unequal"),
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
        # The package's PPO has the dual clip c: T4_above_negative holds up to c only.
        "T4_dual_agrees_up_to_c",
        "T4_dual_above_negative",
        "T4_dual_above_c",
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
    "M4": ("M4_nonzero_sum_breaks", "T1_event_coefficient",
           # OPO's length-weighted baseline: zero-sum only when L and r do not co-vary.
           "M4_opo_sum", "M4_opo_equal_lengths", "M4_opo_not_zero_sum"),
    # Response-level statistics make the weights differ across responses: T2 applies.
    "M5": ("T2_necessity_binary", "T2_necessity_zero_sum", "T5_min_replace"),
    # An event term adds m_e*phi(rho_e) to K_e whatever the advantages: T1's sum A = 0
    # cannot remove it.
    "M6": ("M6_additive_term", "M6_does_not_vanish", "T1_event_coefficient"),
    # Exchangeable in the shaped reward: T1 still gives (C) when the shaped advantages
    # are zero-sum.
    "M7": ("T1_sufficiency_exchangeable",),
    # K_e sums over every occurrence of the group (T1's event coefficient): an update
    # holding part of the group sums only part of it.
    "M8": ("T1_event_coefficient",),
}
