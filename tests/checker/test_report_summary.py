"""A property's JSON summary is a function of its per-regime results
(exchange.checker.report.summary), and what the twin/loss comparison measured on one
property's layout stays that property's (exchange.checker.twin_verdicts)."""

import random

import torch

from exchange import check
from exchange.checker.precision import Comparison
from exchange.checker.report import FoundBy, PropertyResult, Report
from exchange.objectives.composition import random_composition

REGIMES = ("on_policy", "off_policy")


def _result(regime, holds, residual, **fields):
    return PropertyResult(name="zero_sum", regime=regime, holds=holds, max_residual=residual, examples=16,
                          informative=16, tolerance=1e-8,
                          found_by=None if holds else FoundBy(probe="planted"), **fields)


def _summary(on, off):
    report = Report(objective="planted", regimes=REGIMES, properties=("zero_sum",),
                    results={("zero_sum", "on_policy"): on, ("zero_sum", "off_policy"): off},
                    mechanisms_by_regime={r: frozenset() for r in REGIMES}, seed=0, max_examples=1)
    return report.to_dict()["properties"]["zero_sum"]


def test_a_twin_break_in_one_regime_outranks_a_precision_induced_one_in_the_other():
    """On-policy the loss breaks where its twin holds (precision-induced), off-policy the
    twin itself breaks: the property is BROKEN, and its summary says so with the off-policy
    regime's fields, not "precision-induced" with a twin that holds (the first broken
    regime's, before)."""
    on = _result("on_policy", False, 0.9, precision_induced=True, twin_holds=True, round_off_measured=0.9,
                 note="precision-induced: ...")
    off = _result("off_policy", False, 0.7, twin_holds=False, round_off_measured=0.07, note="probe tied_group")
    entry = _summary(on, off)
    assert entry["verdict"] == "BROKEN" and "precision_induced" not in entry and entry["twin_holds"] is False
    assert entry["note"] == "probe tied_group" and entry["max_residual"] == 0.9 and entry["round_off_measured"] == 0.9
    only = _summary(on, _result("off_policy", True, 1e-12, twin_holds=True))
    assert only["verdict"] == "BROKEN (precision-induced)" and only["precision_induced"] is True


def test_a_summary_that_holds_says_round_off_where_a_regime_needed_it():
    """Both regimes hold, the off-policy one up to float64 round-off (residual above the
    float64 tolerance): the summary's largest residual is that one, so its verdict is
    "holds up to float64 round-off" with that regime's note (plain "holds", before)."""
    on = _result("on_policy", True, 1e-15)
    off = _result("off_policy", True, 1e-7, round_off="float64", note="holds up to float64 round-off (...)")
    entry = _summary(on, off)
    assert entry["holds"] is True and entry["max_residual"] == 1e-7
    assert entry["verdict"] == "holds up to float64 round-off" and entry["note"].startswith("holds up to float64")


def test_the_comparison_keeps_what_it_measured_per_place():
    """The loss/twin difference is recorded per place compared (a property's layout in a
    regime), so a property reports its own, not the largest of the check."""
    c = Comparison("bf16")
    kappa = torch.tensor([[1.0, 2.0], [0.5, 0.0]], dtype=torch.float64)
    c.compare([kappa], [kappa * (1 + 2 ** -8)], "zero_sum (on_policy)", lambda need: [kappa] * len(need))
    c.compare([kappa], [kappa * 1.5], "exchangeable (on_policy)", lambda need: [kappa] * len(need))
    assert c.at["zero_sum (on_policy)"] == 2 ** -8 and c.at["exchangeable (on_policy)"] == 0.5 and c.worst == 0.5


def test_seed_2026_284_summaries_follow_their_regimes_and_keep_their_own_round_off():
    """Benchmark seed 2026 #284 (group_mean_std ... kl_in_reward+log_rho_sq@bf16): the loss
    differs from its twin beyond its round-off on exchangeable's layout (0.92 of the scale),
    which made every property report that 0.92 as its own measured round-off, and (Z), one
    result shared by both regimes, carried its round-off note twice. Now each property
    reports its own layout's, each summary is its ranked regime's, and no note repeats."""
    rng = random.Random(2026)
    comp = [random_composition(rng) for _ in range(285)][284]
    assert comp.precision == "bf16"
    report = check(comp.bind(), max_examples=10, seed=284)
    props = report.to_dict()["properties"]
    measured = {name: entry.get("round_off_measured") for name, entry in props.items()}
    assert len(set(measured.values())) > 1, measured
    for name, entry in props.items():
        per = [report.result(name, r) for r in report.regimes]
        assert entry["holds"] == all(p.holds for p in per)
        assert entry.get("precision_induced", False) == (any(p.precision_induced for p in per)
                                                         and all(p.holds or p.precision_induced for p in per))
        note = entry.get("note", "")
        assert not note or note.count(note.split(";")[0]) == 1, note
