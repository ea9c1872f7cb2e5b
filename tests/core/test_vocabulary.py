"""One rule from mechanisms to verdicts (THEORY.md section 4), applied everywhere.

Every verdict the package predicts (catalog families, transformed variants, library
adapter settings) must be exactly the rule :func:`breaks_of` applied to the facets it
declares: no hand-written break set survives this test, because a verdict built any
other way carries no facets and the rule of no facets breaks nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exchange.core.vocabulary import FACETS, MECHANISMS, PROPERTY_NAMES, Expected, breaks_of, verdict_of

REPO = Path(__file__).resolve().parents[2]


def _predicted_verdicts():
    """(row name, regime, Expected) for every catalog row and variant, every audited
    library row, and every policy loss and estimator each adapter knows (the adapters'
    ``expected`` imports no library)."""
    from exchange import libraries, objectives
    from exchange.libraries.areal import loss as areal
    from exchange.libraries.art import loss as art
    from exchange.libraries.openrlhf import loss as openrlhf
    from exchange.libraries.skyrl import loss as skyrl
    from exchange.libraries.verl import loss as verl

    for name in list(objectives.names()) + list(objectives.VARIANTS):
        for regime, exp in objectives.expected_of(name).items():
            yield name, regime, exp
    for row in libraries.library_rows():
        for regime, exp in row.expected.items():
            yield row.name, regime, exp
    settings = [(f"openrlhf:{e}", {}) for e in openrlhf.ESTIMATORS]
    settings += [(f"skyrl:{p}", {"estimator": e}) for p in skyrl.POLICY_LOSSES for e in skyrl.ESTIMATORS]
    settings += [(f"verl:{p}", {"estimator": e}) for p in verl.POLICY_LOSSES for e in verl.ESTIMATORS]
    settings += [(f"areal:{loss}", {}) for loss in areal.LOSSES] + [(f"art:{loss}", {}) for loss in art.LOSSES]
    for target, params in settings:
        for regime, exp in libraries.expected(target, params).items():
            yield f"{target} {params}", regime, exp


def test_every_predicted_verdict_is_the_rule_applied_to_its_facets():
    wrong = []
    n = 0
    for name, regime, exp in _predicted_verdicts():
        n += 1
        want = verdict_of(*exp.facets)
        if exp != want:
            wrong.append(f"{name} [{regime}]: declared {sorted(exp.breaks)} / {sorted(exp.mechanisms)} with facets "
                         f"{sorted(exp.facets)}; the rule gives {sorted(want.breaks)} / {sorted(want.mechanisms)}")
    assert n >= 94 + 2 * 50, f"only {n} verdicts were collected"
    assert not wrong, "verdicts that are not the rule applied to their facets:\n" + "\n".join(wrong)


def test_a_hand_written_verdict_fails_the_rule():
    """What the test above catches: a break set written by hand has no facets."""
    hand = Expected(frozenset({"zero_sum", "shared_cancellation"}), frozenset({"M4"}))
    assert hand != verdict_of(*hand.facets)
    assert verdict_of("M4.foreign_centre") == Expected(
        frozenset({"zero_sum", "shared_cancellation", "null_on_equal_rewards"}), frozenset({"M4"}),
        frozenset({"M4.foreign_centre"}))


def test_facets_use_theorys_ids_and_properties():
    theory = (REPO / "docs" / "THEORY.md").read_text()
    table_ids = set(re.findall(r"^\| (M\d) \|", theory, flags=re.M))
    assert table_ids == set(MECHANISMS), "docs/THEORY.md section 4's table and MECHANISMS name different ids"
    for key, facet in FACETS.items():
        assert re.fullmatch(r"M\d\.[a-z_]+", key) and facet.mechanism in MECHANISMS, key
        assert facet.breaks and set(facet.breaks) <= set(PROPERTY_NAMES), key
        assert "section" in facet.why or re.search(r"\bT\d", facet.why), f"{key}: cite THEORY.md in why"


@pytest.mark.parametrize(("facets", "breaks"), [
    ((), set()),
    (("M2.sign_clip",), {"exchangeable", "shared_cancellation"}),
    # A greedy baseline keeps (E); a batch whitening also breaks it and (N).
    (("M4.foreign_centre",), {"zero_sum", "shared_cancellation", "null_on_equal_rewards"}),
    (("M4.length_weighted", "M4.foreign_centre"),
     {"zero_sum", "exchangeable", "shared_cancellation", "null_on_equal_rewards"}),
    # A projection that restores (C) over unequal weights leaves (E) only.
    (("M3.projected", "M1.projected"), {"exchangeable"}),
    # Clip-Cov (M2 + M4) and KL-Cov off-policy (M2 + M6), THEORY.md section 4.
    (("M2.advantage_selection", "M4.not_zero_sum"),
     {"zero_sum", "exchangeable", "shared_cancellation", "permutation_invariant"}),
    (("M2.advantage_selection", "M6.event_term"),
     {"exchangeable", "shared_cancellation", "null_on_equal_rewards", "permutation_invariant"}),
    # TRL's entropy quantile per micro-batch: the row order decides the threshold (P).
    (("M5.micro_batch_quantile",), {"exchangeable", "shared_cancellation", "permutation_invariant"}),
    # TRL's off-policy mask with vLLM: a selection by the sign of A that drops after centring.
    (("M2.sign_clip", "M4.not_zero_sum"), {"zero_sum", "exchangeable", "shared_cancellation"}),
])
def test_the_rule_is_the_union_of_facet_breaks(facets, breaks):
    assert breaks_of(facets) == breaks


def test_an_unknown_facet_is_named():
    with pytest.raises(KeyError, match="M2.sign_clipp"):
        breaks_of(["M2.sign_clipp"])


def test_docs_theory_is_the_shared_spec():
    shared = REPO.parent / "shared" / "THEORY.md"
    if not shared.exists():
        pytest.skip("../shared/THEORY.md is not beside this checkout")
    assert (REPO / "docs" / "THEORY.md").read_text() == shared.read_text(), (
        "docs/THEORY.md differs from ../shared/THEORY.md: copy the spec (cp ../shared/THEORY.md docs/THEORY.md)")
