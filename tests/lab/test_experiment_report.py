"""The report from typed results: pilot first, P-keys from PREDICTIONS, verdicts from the
rule, claims rows and the one markdown-section helper."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.lab.config import load_experiment
from exchange.lab.experiment import run_experiment
from exchange.lab.dose_rule import decide_dose
from exchange.lab.experiment_decision import ExperimentResult, Row
from exchange.lab.experiment_report import (
    CLAIMS_BEGIN,
    CLAIMS_END,
    claims_rows,
    replace_section,
    report_experiments,
)
from exchange.lab.pilot import FrozenPilot
from exchange.lab.predictions import PREDICTIONS
from exchange.lab.verdict import Orientation, Pilot, decide_signed

THREE_ARMS = """
name = "tiny3"
description = "tiny three-arm experiment"
mechanism = "M3"
seeds = [0, 1]
pilot_seeds = [10, 11]
target_accuracy = 0.5
[task]
name = "countdown"
style_p = 0.5
[model]
d_model = 16
n_heads = 2
n_layers = 1
[sft]
steps = 150
batch = 32
lr = 0.01
[train]
steps = 3
prompts_per_step = 4
group_size = 4
epochs = 1
minibatches = 1
eval_every = 3
eval_prompts = 16
probe_prompts = 4
ckpt_every = 3
max_response_len = 8
[[arms]]
name = "grpo"
objective = "grpo"
role = "baseline"
[[arms]]
name = "grpo+surgical"
objective = "grpo+surgical"
role = "surgical"
[[arms]]
name = "grpo+gcn"
objective = "grpo+group_constant_norm"
role = "treatment"
"""


def _result(labels_effect: bool, dose=None) -> ExperimentResult:
    pilot = Pilot(delta_hat=1.0, sd=0.1, seeds=(9, 10))
    rows = []
    for p in PREDICTIONS:
        diffs = [1.0, 1.1, 0.9, 1.05] if labels_effect else [-0.01, 0.01, 0.0, 0.005]
        rows.append(Row(p, p.against, [0.0] * 4, [0.0] * 4, diffs, decide_signed(p.key, diffs, pilot),
                        dose=dose if p.key == "P2" else None))
    fp = FrozenPilot("pair", (9, 10), {"P1": pilot, "P2": pilot, "P3": pilot}, {"P1": 1, "P2": 1, "P3": -1},
                     Orientation(1, 4, 4, 4), 0.5, 1.0, 0.1, True)
    return ExperimentResult({"name": "pair", "source": "c.toml"}, fp, rows, {}, {}, {"surgical": True}, True, 0.02, 1.0)


def _dose(first_order: bool):
    full = np.array([1.0, 1.1, 0.9, 1.05])
    share = 0.1 if first_order else 0.95
    return decide_dose("P2", [0.1], [share * full], full, 0.5)


def test_claims_rows_follow_the_typed_decisions():
    table = claims_rows([_result(True, _dose(True))])
    cells = [r.split(" | ")[2] for r in table.splitlines()[2:] if r.startswith("| P")]
    assert cells[:4] == ["effect (compatible with the prediction)"] * 4
    assert "Falsifier" in table and "survives" in table
    table = claims_rows([_result(False, _dose(True))])
    assert "negligible" in table and "supported at this dose" in table
    # c.toml is no file here: the report cannot check that it retrains the run (test_reproduce_line.py)
    assert "none: c.toml does not load here" in table and "experiment run c.toml" not in table


def test_claims_rows_carry_both_halves_and_the_dose_rule():
    """Issue 42's Done-means: every prediction row has each arm's own drift; the P2 row
    also the dose rule's reading (docs/claims.md is read without docs/experiments.md)."""
    import dataclasses

    from exchange.lab.verdict import own_drift

    res = _result(True, _dose(True))
    own = (own_drift("baseline", [0.5, 0.6, 0.55], 0.5), own_drift("surgical", [0.9, 1.0, 1.1], 0.5))
    res = dataclasses.replace(res, rows=[dataclasses.replace(r, own=own) if r.prediction.key == "P2" else r
                                         for r in res.rows])
    p2 = next(line for line in claims_rows([res]).splitlines() if line.startswith("| P2:"))
    assert "own drift: baseline 0.55 [" in p2 and "]; surgical 1 [" in p2 and "] not flat (±0.5)" in p2
    assert "baseline 0.55 [0.426, 0.674] flat" not in p2  # no flat claim of the baseline
    assert "dose rule: follows the dose (first order)" in p2


@pytest.mark.parametrize("dose, why", [(None, "no dose arms"), ("bad", "does not follow the dose")])
def test_p2_is_not_decided_without_a_dose_that_follows_first_order(dose, why):
    """Issue 42: a P2 decision needs the dose rule; without dose arms, or with a dose off
    first order (Adam on a private row), the row reports its measurement and no decision."""
    res = _result(True, None if dose is None else _dose(False))
    p2 = next(r for r in res.rows if r.prediction.key == "P2" and r.prediction.primary)
    assert p2.label.startswith("no P2 decision") and why in p2.label and "measured effect" in p2.label
    assert res.falsifier().startswith("undecided")


def test_replace_section_rewrites_only_between_markers(tmp_path):
    path = tmp_path / "claims.md"
    path.write_text(f"# Claims\n\nkept above\n\n{CLAIMS_BEGIN}\nold\n{CLAIMS_END}\n\nkept below\n")
    replace_section(path, CLAIMS_BEGIN, CLAIMS_END, "new")
    assert path.read_text() == f"# Claims\n\nkept above\n\n{CLAIMS_BEGIN}\nnew\n{CLAIMS_END}\n\nkept below\n"
    fresh = tmp_path / "fresh.md"
    replace_section(fresh, CLAIMS_BEGIN, CLAIMS_END, "body", title="# T")
    assert fresh.read_text().startswith("# T") and "body" in fresh.read_text()


def test_pilot_seeds_must_not_be_test_seeds(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(THREE_ARMS.replace("pilot_seeds = [10, 11]", "pilot_seeds = [1, 11]"))
    with pytest.raises(InvalidArgument, match="also test seeds"):
        load_experiment(bad)
    bad.write_text(THREE_ARMS.replace('objective = "grpo+surgical"', 'objective = "dapo+surgical"'))
    with pytest.raises(InvalidArgument, match="grpo\\+surgical"):
        load_experiment(bad)


@pytest.mark.slow
def test_three_arm_experiment_freezes_the_pilot_first_and_reports(tmp_path):
    torch.set_num_threads(1)
    cfg_path = tmp_path / "tiny3.toml"
    cfg_path.write_text(THREE_ARMS)
    exp = run_experiment(load_experiment(cfg_path), tmp_path / "runs", progress=False, source=str(cfg_path))
    pilot = json.loads((exp / "pilot.json").read_text())
    assert pilot["seeds"] == [10, 11] and set(pilot["pilots"]) == {"P1", "P2", "P3"}
    # frozen before any test seed trained
    first_test = min((exp / a / "seed0" / "config.json").stat().st_mtime for a in ("grpo", "grpo+surgical", "grpo+gcn"))
    assert (exp / "pilot.json").stat().st_mtime <= first_test
    lines = report_experiments([exp], markdown=tmp_path / "exp.md", claims=tmp_path / "claims.md")
    summary = json.loads((exp / "summary.json").read_text())
    assert [r["prediction"] for r in summary["rows"]] == [p.key for p in PREDICTIONS]
    assert summary["dose"]["surgical"]["tax/shared_residual"] < 1e-12  # the surgical arm cancels
    assert "tiny3" in lines[0] and CLAIMS_BEGIN in (tmp_path / "claims.md").read_text()


def test_a_pilot_with_mostly_zero_spread_groups_refuses_the_design(tmp_path):
    """The frozen pilot refuses a design whose groups mostly carry no reward spread:
    `experiment run` stops before any test seed, and a report gives no P1-P3 verdict."""
    fp = FrozenPilot("tiny3", (10, 11), {k: Pilot(1.0, 0.1, (10, 11)) for k in ("P1", "P2", "P3")},
                     {"P1": 1, "P2": 1, "P3": 1}, Orientation(1, 4, 4, 4), 0.5, 1.0, 0.1, True, zero_spread=0.7)
    assert fp.refused and FrozenPilot.from_dict(json.loads(fp.to_json())).refused
    assert not dataclasses.replace(fp, zero_spread=0.3).refused
    cfg_path = tmp_path / "tiny3.toml"
    cfg_path.write_text(THREE_ARMS)
    exp = tmp_path / "runs" / "tiny3"
    exp.mkdir(parents=True)
    (exp / "pilot.json").write_text(fp.to_json())
    with pytest.raises(InvalidArgument, match="refused the design: 70% of its groups have zero reward spread"):
        run_experiment(load_experiment(cfg_path), tmp_path / "runs", progress=False)
    assert not (exp / "grpo").exists()


def test_a_sign_fixed_by_the_grammar_is_labelled_positive_control():
    """Issue 42: with the reward-length link, the template in the prompt and S forced, every
    correct response has one length, so K_S >= 0 in every group under 1/L_i: the report
    labels the P2/P3 rows a positive control. Without the link the sign is the data's."""
    from exchange.lab.experiment_decision import identity_orientation

    meta = {"mechanism": "M3 (per-response 1/L_i normalisation)",
            "task": {"long_wrong": True, "forced_style": True, "template_in_prompt": True}}
    assert identity_orientation(meta).startswith("positive control")
    assert identity_orientation({**meta, "task": {**meta["task"], "long_wrong": False}}) == ""
    assert identity_orientation({**meta, "mechanism": "M2 (clip)"}) == ""
    res = _result(True, _dose(True))
    p2 = next(r for r in res.rows if r.prediction.key == "P2" and r.prediction.primary)
    row = dataclasses.replace(p2, control=identity_orientation(meta))
    assert row.label == "positive control: effect (compatible with the prediction)"


def test_a_certificate_by_construction_is_not_reported_as_zero_of_zero_checks():
    """A forced probe is certified by construction: the published report says so, and
    never prints a vacuous "0/0 checks certified" as a pass (issue 42's designs)."""
    from pathlib import Path

    results = Path(__file__).resolve().parents[2] / "experiments" / "results"
    for name in ("grpo_norm__probe_dose_adam", "grpo_norm__probe_dose_sgd"):
        text = (results / name / "summary.md").read_text()
        assert "0/0 checks certified" not in text
        assert "**Certificate of S**: by construction, no measured check" in text


def test_an_uncertified_probe_reports_the_credit_it_was_measured_to_have():
    """Issue 42: the link design's data are a measurement *with S's measured credit*; the
    range per check time comes from the pilot's forced-prefix checks, bound or not."""
    from pathlib import Path

    from exchange.lab.experiment_decision import credit_ranges

    certs = [{"when": "warm start", "credit": 0.05}, {"when": "warm start", "credit": 0.03},
             {"when": "end", "credit": -0.01}]
    assert credit_ranges(certs) == "warm start +0.03 to +0.05, end -0.01 to -0.01"
    assert credit_ranges([]) == ""
    text = (Path(__file__).resolve().parents[2] / "experiments" / "results" / "grpo_norm__link" / "summary.md").read_text()
    p2 = next(line for line in text.splitlines() if line.startswith("| P2 | surgical"))
    assert "measurement (no verdict" in p2 and "its measured credit, P(correct) with S forced minus banned: warm start +" in p2
