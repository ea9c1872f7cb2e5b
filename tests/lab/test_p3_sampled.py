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


def _write(tmp_path, runs, role, name, pilot=False):
    for s, r in runs.items():
        d = tmp_path / "pilot" / name / f"seed{s}" if pilot else tmp_path / name / f"seed{s}"
        d.mkdir(parents=True)
        (d / "init.json").write_text("{}")
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in r.rows))
        (d / "done.json").write_text(json.dumps({"steps": len(r.rows)}))


@pytest.mark.parametrize("logged", [True, False])
def test_a_measurement_never_a_verdict_and_the_orientation_only_where_taken(tmp_path, logged):
    rng = np.random.default_rng(0)
    meta = {"arms": [{"name": "b", "role": "baseline"}, {"name": "s", "role": "surgical"}], "pilot_seeds": [7, 8, 9]}
    runs = {"baseline": {s: _run(1 - 0.05 * np.arange(8) + 0.01 * rng.standard_normal(8)) for s in range(4)},
            "surgical": {s: _run(1 - 0.02 * np.arange(8)) for s in range(4)}}
    for role, name in (("baseline", "b"), ("surgical", "s")):
        _write(tmp_path, {s: _run(1 - (0.05 if role == "baseline" else 0.02) * np.arange(8)
                                  + 0.01 * rng.standard_normal(8), k_signed=logged) for s in (7, 8, 9)},
               role, name, pilot=True)
    res = sampled_p3(tmp_path, meta, runs, pilot_sign=-1)
    mean, low, high, _, n = res.interval
    assert n == 4 and high < 0 < -mean  # the baseline's entropy falls faster
    assert res.mde is not None and res.mde > 0 and len(res.pilot_diffs) == 3
    assert res.delta_hat is None and res.label.startswith("measurement (no verdict")
    assert (res.sign == -1) is logged  # orientation only from a pilot that logged it at the sampled contexts
    assert {o.role: o.flat for o in res.own} == {"baseline": "n/a: not an exchangeable arm", "surgical": "no SESOI"}
    text = "\n".join(sampled_markdown(res))
    assert "baseline minus surgical" in text and "delta_hat n/a" in text and "verdict" in text
