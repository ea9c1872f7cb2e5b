"""P3 at the contexts the policy samples (exchange.lab.experiment_report_sampled)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from exchange.core import metric_keys as mk
from exchange.lab.experiment_report_sampled import late_difference, own_change, sampled_markdown, sampled_p3
from exchange.lab.predictions import RunData


def _run(h, hashes=None, k_signed=False):
    hashes = list(range(len(h))) if hashes is None else hashes
    rows = [{"step": t, mk.ENTROPY_WEAK_CREDIT: float(x), mk.ROLLOUT_HASH: hashes[t],
             **({mk.ENTROPY_K_SIGNED: 0.1} if k_signed else {})} for t, x in enumerate(h)]
    return RunData({}, rows, 0.0)


def test_the_difference_is_paired_on_the_late_quarter():
    base = _run([1.0] * 6 + [0.5, 0.4])  # 8 steps: the last 2 are the late quarter
    surg = _run([1.0] * 6 + [0.9, 0.8])
    assert late_difference(base, surg) == pytest.approx(-0.4)
    assert own_change(base) == pytest.approx(-0.55) and own_change(surg) == pytest.approx(-0.15)
    # not the same rollouts: the contexts differ, so no paired difference (planted: a replay that diverged)
    assert math.isnan(late_difference(base, _run([1.0] * 6 + [0.9, 0.8], hashes=[0, 1, 2, 3, 4, 5, 6, 99])))
    # a run that never logged the entropy (the TRL engine): no difference, no error
    trl = RunData({}, [{"step": t, mk.ROLLOUT_HASH: t} for t in range(8)], 0.0)
    assert math.isnan(late_difference(base, trl)) and math.isnan(own_change(trl))


def _write(tmp_path, runs, name):
    for s, r in runs.items():
        d = tmp_path / "pilot" / name / f"seed{s}"
        d.mkdir(parents=True)
        (d / "init.json").write_text("{}")
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in r.rows))
        (d / "done.json").write_text(json.dumps({"steps": len(r.rows)}))


def _design(tmp_path, logged, gap=None, rate=0.05):
    """Baseline entropy falling by ``rate`` per step, the surgical arm's by 0.02; the pilot
    baseline logs the orientation (-1: the residual lowers the entropy) when ``logged`` and
    the attributed gap ``gap * t`` when ``gap`` is given."""
    rng = np.random.default_rng(0)
    meta = {"arms": [{"name": "b", "role": "baseline"}, {"name": "s", "role": "surgical"}], "pilot_seeds": [7, 8, 9]}
    t = np.arange(8)
    runs = {"baseline": {s: _run(1 - rate * t + 0.01 * rng.standard_normal(8)) for s in range(6)},
            "surgical": {s: _run(1 - 0.02 * t) for s in range(6)}}
    for role, name in (("baseline", "b"), ("surgical", "s")):
        pr = {}
        for s in (7, 8, 9):
            r = _run(1 - (rate if role == "baseline" else 0.02) * t + 0.01 * rng.standard_normal(8))
            for k, row in enumerate(r.rows):
                if logged and role == "baseline":
                    row[mk.ENTROPY_K_SIGNED] = -0.1
                if gap is not None:  # the surgical path attributes minus the residual: the gap's sign flips
                    row[mk.ATTR_SAMPLED_ENTROPY_GAP] = gap * k * (1 if role == "baseline" else -1)
            pr[s] = r
        _write(tmp_path, pr, name)
    return meta, runs


@pytest.mark.parametrize("logged", [True, False])
def test_without_delta_hat_a_measurement_and_the_orientation_only_where_taken(tmp_path, logged):
    meta, runs = _design(tmp_path, logged)
    res = sampled_p3(tmp_path, meta, runs)
    mean, low, high, _, n = res.interval
    assert n == 6 and high < 0  # the baseline's entropy falls faster
    assert res.mde is not None and res.mde > 0 and len(res.pilot.diffs) == 3
    assert res.decision is None and res.label.startswith("measurement (no verdict")
    assert (res.sign == -1) is logged  # orientation only from a pilot that logged it at the sampled contexts
    assert {o.role: o.flat for o in res.own} == {"baseline": "n/a: not an exchangeable arm", "surgical": "no SESOI"}
    text = "\n".join(sampled_markdown(res))
    assert "baseline minus surgical" in text and "delta_hat n/a" in text and "verdict" in text


def test_with_delta_hat_the_verdict_rule_decides_either_way(tmp_path):
    """The gap logged: delta_hat = sign x the late mean of the gap (bracketed by the surgical
    path's), and decide_signed's verdict, 'opposite' included."""
    meta, runs = _design(tmp_path / "a", True, gap=-0.03)  # predicted late gap -0.03 * 6.5: oriented +0.195
    res = sampled_p3(tmp_path / "a", meta, runs)
    pl = res.pilot.pilot
    assert pl.delta_hat == pytest.approx(0.195) and pl.delta_hat_surgical == pytest.approx(0.195)
    assert res.decision is not None and res.decision.verdict.value == "effect"
    assert res.decision.mean == pytest.approx(-np.mean(res.diffs))  # oriented by the pilot's -1
    assert {o.role: o.flat for o in res.own}["surgical"] in ("flat", "not flat")
    # the same prediction, the baseline's entropy now rising against the surgical arm's: opposite
    meta, runs = _design(tmp_path / "b", True, gap=-0.03, rate=-0.01)
    res = sampled_p3(tmp_path / "b", meta, runs)
    assert res.decision.verdict.value == "opposite" and res.label == "opposite"
    # without the surgical path's attribution: one path, and the label says so
    meta, runs = _design(tmp_path / "c", True, gap=-0.03, rate=-0.01)
    for f in (tmp_path / "c" / "pilot" / "s").rglob("metrics.jsonl"):
        f.write_text("".join(json.dumps({k: v for k, v in json.loads(x).items() if k != mk.ATTR_SAMPLED_ENTROPY_GAP})
                             + "\n" for x in f.read_text().splitlines()))
    res = sampled_p3(tmp_path / "c", meta, runs)
    assert res.pilot.pilot.delta_hat_surgical is None and res.label == "opposite (delta_hat along one path: no bracket)"


def test_an_uncertified_probe_gives_a_measurement_as_the_fixed_row_does(tmp_path):
    """The weak-credit positions include S's: a pilot that did not certify S zero-credit
    leaves the interval and the MDE but no verdict (the gate of the fixed-context P3 row)."""
    meta, runs = _design(tmp_path, True, gap=-0.03)
    decided = sampled_p3(tmp_path, meta, runs)
    res = sampled_p3(tmp_path, meta, runs, certified=False)
    assert decided.decision is not None and res.decision is None
    assert res.interval == decided.interval and res.mde == decided.mde
    assert res.label.startswith("measurement (no verdict: the probe S is not certified zero-credit")


def test_the_attributed_gap_resumes_bit_for_bit(tmp_path, monkeypatch):
    """The gap reads the tangent's cumulative shift, which the checkpoint carries: a run
    that crashes after a checkpoint and resumes logs the same gap as an uninterrupted one
    (and a nonzero one: the test would pass vacuously on zeros)."""
    import dataclasses

    import torch

    from exchange.lab import trainer
    from exchange.lab.config import load_experiment
    from exchange.lab.runlog import read_metrics

    from ._tiny import tiny_config

    torch.set_num_threads(1)
    path = tiny_config(tmp_path, steps=6, ckpt_every=2, sft_steps=60)  # enough SFT for groups with reward spread
    # S forced at the head of every response and also a filler: a shared weak-credit event in every group
    path.write_text(path.read_text().replace('[task]\nname = "arithmetic"', '[task]\nname = "arithmetic"\n'
                                             'max_filler = 3\nlong_wrong = true\ntemplate_in_prompt = true\n'
                                             'forced_style = true\nprobe_as_filler = true').replace("prompts_per_step = 2", "prompts_per_step = 8"))
    cfg = load_experiment(path)
    run = cfg.runs()[0]
    run = dataclasses.replace(run, train=dataclasses.replace(run.train, attribute=True))
    clean = trainer.train_run(run, tmp_path / "clean", progress=False)
    real, calls = trainer._update, []

    def crash(*a, **k):
        calls.append(1)
        if len(calls) == 4:  # step 3: after the checkpoint at step 2
            raise RuntimeError("planted crash")
        return real(*a, **k)

    monkeypatch.setattr(trainer, "_update", crash)
    with pytest.raises(RuntimeError, match="planted crash"):
        trainer.train_run(run, tmp_path / "crashed", progress=False)
    monkeypatch.setattr(trainer, "_update", real)
    trainer.train_run(run, tmp_path / "crashed", progress=False)
    want = [r[mk.ATTR_SAMPLED_ENTROPY_GAP] for r in read_metrics(clean / "metrics.jsonl")]
    got = [r[mk.ATTR_SAMPLED_ENTROPY_GAP] for r in read_metrics(tmp_path / "crashed" / "metrics.jsonl")]
    assert got == want and want[0] == 0.0 and any(abs(x) > 0 for x in want[1:])
