"""How parts of a composed objective change each other's facets (THEORY.md sections 2 and 4).

The verdict of a composition is :func:`exchange.core.vocabulary.verdict_of` of the facets
its parts carry. Most parts act alone; a few change what another part can do, and each
such dependence is stated here once, as an :class:`Interaction`: when it applies, in
which regimes, what it does to the facets, and why.

The principle behind every rule: **a verdict is a function of what the loss does**. Two
objectives whose token coefficients are equal on every batch of a regime have the same
verdict in that regime, whatever their parts are called, because every property and
every mechanism of THEORY.md is defined on the coefficients (section 2, "Testing these on
a black box"). Each rule below names the objective without the interaction that the
composition equals, and ``tests/objectives/test_interactions.py`` checks that equality
numerically on random batches (so a rule whose claim is false fails there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from exchange.core.vocabulary import REGIMES, Regime

if TYPE_CHECKING:  # pragma: no cover
    from exchange.objectives.composition import Composition

__all__ = ["Interaction", "INTERACTIONS", "apply_interactions"]

ON, OFF = Regime.ON_POLICY, Regime.OFF_POLICY


@dataclass(frozen=True)
class Interaction:
    """One dependence between parts.

    Fields:
        name: a short label (docs/properties.md lists them).
        applies: ``(composition) -> bool``.
        regimes: where the rule acts.
        rewrite: ``facets -> facets`` (a tuple of facet keys, in order).
        equals: the objective the composition equals in those regimes (the claim
            ``tests/objectives/test_interactions.py`` checks).
        why: the derivation, citing THEORY.md.
    """

    name: str
    applies: Callable[["Composition"], bool]
    regimes: tuple[Regime, ...]
    rewrite: Callable[[tuple[str, ...]], tuple[str, ...]]
    equals: str
    why: str


def _mapped(table: dict[str, str]) -> Callable[[tuple[str, ...]], tuple[str, ...]]:
    def rewrite(facets: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(table.get(f, f) for f in facets))
    return rewrite


def _without(*prefixes: str) -> Callable[[tuple[str, ...]], tuple[str, ...]]:
    def rewrite(facets: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(f for f in facets if not f.startswith(prefixes))
    return rewrite


# Facets that break (N) only through tied groups, and what they become once every tied
# group is dropped.
_ON_KEPT = {
    "M6.event_term": "M6.event_term_on_kept",
    "M4.foreign_centre": "M4.not_zero_sum",
    "M7.shaping": "M7.shaping_on_kept",
}


def _part(c: "Composition", kind: str, trait: str) -> bool:
    return trait in c.parts[kind].traits


INTERACTIONS: tuple[Interaction, ...] = (
    Interaction(
        "tied groups dropped",
        lambda c: _part(c, "mask", "drops_tied_groups"),
        REGIMES,
        _mapped(_ON_KEPT),
        "the same objective on the groups whose verifiable rewards differ",
        "section 2: tied groups keep only what does not scale with the advantage; a filter that drops them "
        "removes every (N) break, and a centre that is not the group's own is then only not zero-sum",
    ),
    Interaction(
        "one-signed advantages",
        lambda c: _part(c, "estimator", "one_signed"),
        (OFF,),
        _without("M2."),
        "the same objective with the clip's positive branch applied to every occurrence (a weight of the "
        "event alone, T5_sign_free_weight)",
        "section 4, attribution rules: M2 is only the cause when the occurrences of one event are scaled "
        "differently according to the sign of their advantage; with advantages that are never negative, a "
        "response with A_i = 0 has no coefficient to scale and every other one takes the positive branch",
    ),
    Interaction(
        "constant additive gradient on kept groups",
        lambda c: _part(c, "mask", "drops_tied_groups") and _part(c, "additive", "constant_gradient"),
        (ON,),
        _mapped({"M6.event_term_on_kept": "M6.offset_on_kept"}),
        "on-policy, the same objective with beta added to every kept advantage and no additive term",
        "section 2: on-policy a term whose gradient is beta on every token (k1, an entropy bonus on the sampled "
        "tokens) adds w_i beta to every coefficient, an offset of the advantages; with tied groups dropped no "
        "group has every advantage 0, so (E)'s black-box form (alpha depends only on the rewards) holds and "
        "only (C) shows it",
    ),
    Interaction(
        "additive offset inside a non-zero-sum estimator",
        lambda c: _part(c, "additive", "constant_gradient") and (
            (_part(c, "mask", "drops_tied_groups") and _part(c, "estimator", "not_zero_sum_on_copies"))
            or (_part(c, "estimator", "own_centre_free") and c.shaping != "none"
                and not _part(c, "shaping", "acts_on_truncated_only"))),
        (ON,),
        _without("M6."),
        "on-policy, the same objective with beta folded into the advantages (A_i + beta): a non-zero-sum "
        "estimator of its own",
        "section 2, (Z) on a black box: a remainder of K_e the same for every reward vector, all-equal rewards "
        "included, is M6. Identical responses leave none here: with tied groups dropped, all-equal rewards "
        "give no coefficient, and an estimator that is not zero-sum on identical responses moves K_e with "
        "every mixed reward vector; a greedy baseline next to a shaping of every response keeps A_i = R_i + s_i - b "
        "on copies, so beta is one more constant in s_i (a reward zeroed on truncated responses leaves the others "
        "unshaped, where a common offset stays visible). The offset is part of the M4 (or M7) already named",
    ),
    Interaction(
        "shaping of dropped responses",
        lambda c: _part(c, "shaping", "acts_on_truncated_only") and _part(c, "mask", "drops_truncated"),
        REGIMES,
        _mapped({"M7.shaping": "M4.foreign_centre"}),
        "responses kept if not truncated, centred on mean_g(R * keep): a centre that is not the kept "
        "responses' own",
        "section 4, M7 is shaping of the advantages the loss uses; a reward set to 0 only on truncated "
        "responses, which the mask then drops, reaches the kept responses only through the centre, where it "
        "counts as a 0 among G: the kept advantages of a tied group are then R (1 - n_kept / G), which move "
        "with the group's reward level, as a centre that is not the group's own does (M4)",
    ),
)


def apply_interactions(composition: "Composition", regime: Regime, facets: tuple[str, ...]) -> tuple[str, ...]:
    """``facets`` (the parts' own, in part order) after every :data:`INTERACTIONS` rule
    that applies to ``composition`` in ``regime``, in the order listed."""
    for rule in INTERACTIONS:
        if regime in rule.regimes and rule.applies(composition):
            facets = rule.rewrite(facets)
    return facets
