"""A dose series in the report (issue 42, M1's reuse doses): what produced each dose is
recorded, so its reproduce line and description are the dose's; the series is decided by
the rule fixed before the M1 series ran, as one typed result and one claims row."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.lab.experiment_decision import ExperimentResult, Row, positive_control
from exchange.lab.experiment_report import claims_rows, report_experiments, series_sections
from exchange.lab.experiment_report_record import DoseRecord
from exchange.lab.experiment_report_series import dose_series, series_of
from exchange.lab.pilot import FrozenPilot
from exchange.lab.predictions import PREDICTIONS
from exchange.lab.verdict import NOT_FLAT, Orientation, Pilot, decide_signed, own_drift

REPO = Path(__file__).resolve().parents[2]
P2 = next(p for p in PREDICTIONS if p.key == "P2" and p.primary)

TINY_M1 = """
name = "tinym1"
description = "tiny M1 design at reuse 2x2"
mechanism = "M1 (sequence coupling)"
seeds = [0, 1]
pilot_seeds = [10, 11]
target_accuracy = 0.5
[task]
name = "arithmetic"
max_filler = 0
style_p = 0.5
template_in_prompt = true
forced_style = true
fixed_answer = true
[model]
d_model = 16
n_heads = 2
n_layers = 1
[sft]
steps = 5
batch = 16
[train]
steps = 2
prompts_per_step = 2
group_size = 4
epochs = 2
minibatches = 2
common_rollouts = true
max_response_len = 4
eval_every = 2
eval_prompts = 8
probe_prompts = 2
ckpt_every = 2
[[arms]]
name = "gspo"
objective = "gspo"
role = "baseline"
params = { eps_low = 0.2, eps_high = 0.2 }
[[arms]]
name = "gspo+coupling_surgical"
objective = "gspo+coupling_surgical"
role = "surgical"
params = { eps_low = 0.2, eps_high = 0.2 }
"""


def _script():
    spec = importlib.util.spec_from_file_location("dose_response", REPO / "experiments" / "dose_response.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _frozen(cfg, out_root, jobs=1, progress=False):
    """A frozen pilot that accepts the design (the test is about the record, not power)."""
    pl = Pilot(1.0, 0.01, (10, 11))
    return FrozenPilot(cfg.name, (10, 11), {"P1": pl, "P2": pl, "P3": pl}, {"P1": 1, "P2": 1, "P3": -1},
                       Orientation(1, 4, 4, 4), 0.5, None, None, True)


def test_a_dose_records_what_produced_it_and_a_rerun_writes_the_same_record(tmp_path, monkeypatch, capsys):
    """experiments/dose_response.py writes into each tested dose's experiment.json the base
    config and the dose's changes; the report's reproduce line is that call (never "CONFIG"),
    the description says the dose; rerunning the call, or the migration (--record-only) on
    a dose directory recorded without it, writes the same bytes."""
    torch.set_num_threads(1)
    cfg = tmp_path / "tinym1.toml"
    cfg.write_text(TINY_M1)
    out = str(tmp_path / "runs")
    script = _script()
    monkeypatch.setattr(script, "run_pilot", _frozen)
    argv = [str(cfg), "--dose", "e1:train.epochs=1", "--dose", "e3:train.epochs=3", "--seeds", "2", "--test",
            "--out", out, "--jobs", "1"]
    assert script.main(argv) == 0
    dirs = [Path(out) / f"tinym1__{x}" for x in ("e1", "e3")]
    recorded = [(d / "experiment.json").read_bytes() for d in dirs]
    meta = json.loads(recorded[1])
    assert meta["source"] == str(cfg) and meta["train"]["epochs"] == 3
    rec = DoseRecord.from_meta(meta)
    assert rec.changed == {"train.epochs": [2, 3]} and rec.label == "e3" and "--jobs" not in rec.argv
    assert rec.change == "train.epochs = 3 (base 2)"

    # the report: the dose's own call and its dose, not the base config's run or text
    claims = tmp_path / "claims.md"
    lines = report_experiments(dirs, markdown=tmp_path / "exp.md", claims=claims)
    table, page = claims.read_text(), (tmp_path / "exp.md").read_text()
    assert "CONFIG" not in table and f"python experiments/dose_response.py {cfg}" in table
    assert f"--dose e3:train.epochs=3 --seeds 2 --test --out {out} && python -m exchange experiment report " \
           f"{out}/tinym1__e3" in table
    assert "Dose `e3` of" in page and "train.epochs = 3 (base 2)" in page
    assert "P2 dose series" in table and "### P2 dose series of" in page and lines[-1].startswith("P2 dose series of")

    # a rerun of the call (every run done: nothing trains) writes the same record
    assert script.main(argv) == 0
    assert [(d / "experiment.json").read_bytes() for d in dirs] == recorded
    # the migration: a dose recorded before the record existed gets the same bytes
    for d in dirs:
        old = json.loads((d / "experiment.json").read_text())
        del old["variant"]
        (d / "experiment.json").write_text(json.dumps({**old, "source": None}, indent=2))
    assert script.main(argv + ["--record-only"]) == 0
    assert [(d / "experiment.json").read_bytes() for d in dirs] == recorded
    # ... and refuses a directory that holds another config than the dose it is told
    bad = [x.replace("e3:train.epochs=3", "e3:train.epochs=4") for x in argv]
    with pytest.raises(InvalidArgument, match="records another config"):
        script.main(bad + ["--record-only"])


def _member(name: str, epochs: int, diffs, delta_hat: float, surgical_drift: float, *, base_epochs=2,
            control: str = "", kl_matched: bool = True) -> ExperimentResult:
    """One dose's typed result: its P2 row (oriented differences, the surgical arm's drift)."""
    meta = {"name": name, "source": "c.toml", "train": {"epochs": epochs, "lr": 5e-4}}
    if epochs != base_epochs:
        meta["variant"] = DoseRecord("c.toml", f"e{epochs}", f"train.epochs={epochs}",
                                     {"train.epochs": [base_epochs, epochs]}, ("c.toml",), "runs/levers").to_dict()
    pl = Pilot(delta_hat, 0.3, (100, 101))
    diffs = list(diffs)
    own = (own_drift("baseline", np.full(len(diffs), 0.5) + np.linspace(-0.05, 0.05, len(diffs)), pl.magnitude / 2),
           own_drift("surgical", surgical_drift + np.linspace(-0.1, 0.1, len(diffs)), pl.magnitude / 2))
    row = Row(P2, "surgical", [0.0] * len(diffs), [0.0] * len(diffs), diffs, decide_signed("P2", diffs, pl),
              own=own, control=control)
    fp = FrozenPilot(name, (100, 101), {"P2": pl}, {"P2": 1}, Orientation(1, 4, 4, 4), 0.5, None, None, True)
    return ExperimentResult(meta, fp, [row], {}, {}, {"surgical": kl_matched}, True, 0.02, 1.0)


def _seeds(mean: float, n: int = 12) -> np.ndarray:
    return mean + 0.3 * np.linspace(-1.5, 1.5, n)


def test_m1s_measured_series_departs_and_says_what_the_design_cannot_support():
    """The M1 reuse numbers (differences 2.21 / 4.07 / 6.08 on delta_hat 1.99 / 2.12 / 1.98,
    surgical arm drifting -1.7 / -3.3 / -5.3): the slope excludes 1 and two doses lie above
    their prediction, so the series departs, larger; a private S makes it a positive control
    and the drifting surgical arm makes the pair unclean: the label says all three."""
    control = positive_control({"task": {"forced_style": True}})
    members = [_member("m1", 2, _seeds(2.21), 1.99, -1.7, control=control),
               _member("m1__e4", 4, _seeds(4.07), 2.12, -3.3, control=control),
               _member("m1__e8", 8, _seeds(6.08), 1.98, -5.29, control=control, kl_matched=False)]
    assert series_of(members) == [members]
    s = dose_series(members, "P2")
    assert s.slope.low > 1 and s.verdict == "departs from first order (larger than predicted)"
    assert [d.size.value for d in s.doses][1:] == ["larger than predicted"] * 2
    assert all(d.surgical.flat == NOT_FLAT for d in s.doses)
    assert s.label.startswith("positive control: departs from first order (larger than predicted); pair not clean")
    assert "not flat at 3 of 3 doses" in s.label and "confounded at m1__e8" in s.label
    row = claims_rows(members).splitlines()[-1]
    assert row.startswith("| P2 dose series") and "slope 2.02" not in row  # synthetic numbers, not the published
    assert "positive control: departs" in row
    assert "`python -m exchange experiment report runs/m1 runs/levers/m1__e4" in row
    assert "### P2 dose series of c.toml" in series_sections(members)


def test_a_series_that_follows_first_order_reads_so_and_one_dose_above_departs():
    """Differences equal to each dose's delta_hat, a flat surgical arm: "follows the dose".
    The same series with one small dose at 3x its prediction still has a slope through the
    origin that contains 1 (the large dose dominates), but that dose's own interval lies
    above its delta_hat: it departs (the half of the rule the old fit lacked)."""
    follow = [_member("a", 2, _seeds(1.0), 1.0, 0.0), _member("a__e4", 4, _seeds(10.0), 10.0, 0.0)]
    s = dose_series(follow, "P2")
    assert s.verdict == "follows the dose" and s.label == "follows the dose"
    hidden = [_member("a", 2, _seeds(3.0), 1.0, 0.0), _member("a__e4", 4, _seeds(10.0), 10.0, 0.0)]
    s = dose_series(hidden, "P2")
    assert s.slope.low <= 1 <= s.slope.high
    assert s.verdict == "departs from first order (larger than predicted)"


def test_a_member_that_is_not_its_base_config_plus_its_dose_is_refused():
    a = _member("a", 2, _seeds(1.0), 1.0, 0.0)
    b = _member("a__e4", 4, _seeds(4.0), 1.0, 0.0)
    b.meta["train"]["lr"] = 1e-3  # a change the record does not name
    with pytest.raises(InvalidArgument, match="not c.toml with its recorded dose"):
        series_of([a, b])
    assert series_of([a]) == []  # no recorded dose: no series


def test_a_private_probe_is_labelled_positive_control_from_the_design():
    """Issue 42: S forced at its slot and banned elsewhere (no probe_as_filler) is a private
    parameter, so the P2/P3 rows are a positive control; a non-private probe is not, unless
    the grammar fixes the sign; both reasons are named when both hold."""
    private = {"task": {"forced_style": True, "template_in_prompt": True}, "mechanism": "M1 (sequence coupling)"}
    assert positive_control(private).startswith("positive control: S is private")
    assert positive_control({**private, "task": {**private["task"], "probe_as_filler": True}}) == ""
    assert positive_control({**private, "task": {**private["task"], "forced_style": False}}) == ""
    link = {"task": {**private["task"], "long_wrong": True}, "mechanism": "M3 (per-response 1/L_i)"}
    both = positive_control(link)
    assert "fixed by the grammar" in both and "S is private" in both
    assert positive_control({**link, "task": {**link["task"], "probe_as_filler": True}}).startswith(
        "positive control: the orientation is fixed by the grammar")
