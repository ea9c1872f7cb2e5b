"""Objectives by parts (exchange.compose): derived verdicts, errors, the docs table, and
the checker's agreement with the derivation.

Every part alone on the default objective must agree exactly with the checker, both
regimes, properties and mechanisms: a few representative parts in the fast tier, every
part in the slow tier. Random compositions (several parts at once): 40 in the fast tier,
300 in the slow tier, 2,000 in benchmarks/composition_agreement.py; their known
disagreements are listed in docs/properties.md.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch

import exchange
from exchange.checker.properties import PROPERTIES
from exchange.core.vocabulary import REGIMES, verdict_of
from exchange.errors import InvalidArgument
from exchange.objectives.composition import Composition, compose, random_composition
from exchange.objectives.parts import KINDS, PARTS

ROOT = Path(__file__).resolve().parents[2]
BASE = Composition()
SINGLES = [(kind, name) for kind in KINDS for name in PARTS[kind] if name != getattr(BASE, kind)]
# Four parts whose mechanisms issue 30 taught the checker to separate (the rest: slow tier)
FAST = {("shaping", "length_penalty"), ("additive", "k3_ref"), ("mask", "truncation_after_centring"),
        ("precision", "bf16")}


def _single(kind: str, name: str) -> Composition:
    return Composition(**{kind: name})


def _disagreements(comp: Composition, max_examples: int = 10) -> list[str]:
    torch.set_num_threads(1)
    rep = exchange.check(comp.bind(), max_examples=max_examples, seed=0)
    out = []
    for regime, exp in comp.expected().items():
        got = {p for p in PROPERTIES if not rep.holds(p, regime)}
        if got != set(exp.breaks):
            out.append(f"{comp.name} [{regime}]: breaks expected {sorted(exp.breaks)} got {sorted(got)}")
        if set(rep.mechanisms_in(regime)) != set(exp.mechanisms):
            out.append(f"{comp.name} [{regime}]: mechanisms expected {sorted(exp.mechanisms)} "
                       f"got {sorted(rep.mechanisms_in(regime))}")
    return out


@pytest.mark.parametrize(("kind", "name"), [pytest.param(k, n, marks=[] if (k, n) in FAST else [pytest.mark.slow],
                                                         id=f"{k}={n}") for k, n in SINGLES])
def test_every_part_alone_agrees_with_the_checker(kind: str, name: str) -> None:
    assert _disagreements(_single(kind, name)) == []


def test_expected_is_the_rule_applied_to_the_facets() -> None:
    rng = random.Random(0)
    for _ in range(200):
        comp = random_composition(rng)
        for regime in REGIMES:
            assert comp.expected()[regime] == verdict_of(*comp.facets(regime))


def test_a_zero_std_filter_turns_shaping_into_its_kept_form() -> None:
    shaped = compose(shaping="length_penalty")
    filtered = compose(shaping="length_penalty", mask="zero_std_filter")
    assert "null_on_equal_rewards" in shaped.expected()["on_policy"].breaks
    assert "null_on_equal_rewards" not in filtered.expected()["on_policy"].breaks
    assert set(filtered.expected()["on_policy"].mechanisms) == {"M7"}


def test_the_docs_example_is_what_the_code_derives() -> None:
    """docs/checking.md's exchange.compose example prints what the parts derive."""
    obj = exchange.compose(estimator="group_mean_std", weight="geometric_mean", clip="symmetric",
                           aggregation="seq_mean_token_mean", additive="k3_ref", beta=0.04)
    assert sorted(obj.expected()["off_policy"].mechanisms) == ["M1", "M2", "M3", "M6"]
    assert "# ['M1', 'M2', 'M3', 'M6']" in (ROOT / "docs" / "checking.md").read_text()


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"estimator": "gae"}, "estimator='gae' is not a known part"),
    ({"flavour": "x"}, "no part kind 'flavour'"),
    ({"additive": "k3_ref", "beta": -1.0}, "beta=-1.0 must be a positive finite number"),
    ({"precision": "fp8"}, "precision='fp8' is not a known part"),
])
def test_bad_parts_raise_precise_errors(kwargs, needle) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(needle)):
        compose(**kwargs)


def test_loss_runs_in_the_parts_precision_and_follows_the_device() -> None:
    from exchange.checker.cases import build
    from exchange.checker.probes import PROBES

    rollout = build(PROBES[0].case)
    lp = rollout.logprobs.clone().requires_grad_(True)
    loss = compose(precision="bf16", additive="k1_ref")(lp, rollout)
    assert loss.dtype == torch.float64 and loss.device == lp.device
    loss.backward()
    # bf16 inside: every non-zero gradient is an exact bf16 value
    g = lp.grad[lp.grad != 0]
    assert bool((g.to(torch.bfloat16).to(torch.float64) == g).all())


def test_docs_table_lists_every_part_with_its_facets() -> None:
    text = (ROOT / "docs/properties.md").read_text()
    for kind in KINDS:
        for name, part in PARTS[kind].items():
            on = ",".join(part.facets_in(REGIMES[0])) or "-"
            off = ",".join(part.facets_in(REGIMES[1])) or "-"
            row = f"| {kind} | `{name}` | {part.description} | {on} | {off} |"
            assert row in text, f"docs/properties.md lacks or misstates: {row}"


def test_public_api_exports_compose() -> None:
    assert exchange.compose is compose and "compose" in exchange.__all__ and "Composition" in exchange.__all__


# Random compositions (several parts at once), checked as benchmarks/composition_agreement.py
# checks them (the checker seeded by the composition's index): issue 30's target is
# agreement on at least 99% of (composition, property, regime) cells and of mechanism sets.
# The seeds were fixed before the runs (the fast tier's 40 leave no disagreement to spare:
# 99% of 80 sets is 80). The remaining disagreements are listed in docs/properties.md.
TARGET = 0.99


def _agreement(seed: int, n: int) -> tuple[float, float, list[str]]:
    rng = random.Random(seed)
    cells = sets = 0
    bad = []
    for index in range(n):
        comp = random_composition(rng)
        rep = exchange.check(comp.bind(), max_examples=10, seed=index)
        for regime, exp in comp.expected().items():
            got = {p for p in PROPERTIES if not rep.holds(p, regime)}
            cells += sum((p in got) == (p in exp.breaks) for p in PROPERTIES)
            same = set(rep.mechanisms_in(regime)) == set(exp.mechanisms)
            sets += same
            if not same or got != set(exp.breaks):
                bad.append(f"{comp.name} [{regime}]")
    return cells / (n * 2 * len(PROPERTIES)), sets / (n * 2), bad


@pytest.mark.parametrize(("seed", "n"), [pytest.param(2027, 40, id="fast-40"),
                                         pytest.param(2026, 300, id="slow-300", marks=pytest.mark.slow)])
def test_random_compositions_agree_with_the_checker(seed: int, n: int) -> None:
    torch.set_num_threads(1)
    cells, sets, bad = _agreement(seed, n)
    assert cells >= TARGET and sets >= TARGET, (cells, sets, bad)


def test_a_compositions_report_reproduces_from_its_own_line() -> None:
    """No CLI target names a composition: its reproduce line is the Python call, and
    running that call gives the same report."""
    comp = compose(estimator="loo_std", shaping="length_penalty", additive="k3_ref", beta=0.001, precision="float32")
    rep = exchange.check(comp.bind(), max_examples=3, seed=4, regimes=("off_policy",))
    match = re.fullmatch(r'python -c "import exchange; print\((exchange\.check\(.*\))\)"', rep.reproduce)
    assert match, rep.reproduce
    again = eval(match.group(1), {"exchange": exchange})  # noqa: S307 - the line the report printed
    assert again.to_dict() == rep.to_dict()
