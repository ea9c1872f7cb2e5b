"""The KL-normalised step: both arms move exactly the target KL on the control contexts;
the attribution recorded by the trainer integrates to the probes' real change."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.lab.config import load_experiment
from exchange.lab.klstep import KL_TOLERANCE, control_contexts, normalise_step
from exchange.lab.runlog import read_metrics
from exchange.lab.tasks import STYLE, TEMPLATE
from exchange.lab.trainer import train_run

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import tiny_config

TARGET = 1e-3


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("kl")
    cfg = load_experiment(tiny_config(tmp, steps=4, sft_steps=150, task="countdown"))
    out = {}
    for run in cfg.runs():
        run = dataclasses.replace(run, train=dataclasses.replace(run.train, kl_target=TARGET, attribute=True))
        d = train_run(run, tmp / run.arm.name, progress=False)
        out[run.arm.role] = (json.loads((d / "init.json").read_text()), read_metrics(d / "metrics.jsonl"))
    return out


def test_both_arms_match_the_kl_target(runs):
    for _, rows in runs.values():
        kls = [r["kl/control_contexts"] for r in rows]
        assert all(k == pytest.approx(TARGET, rel=KL_TOLERANCE) for k in kls), kls
        assert rows[-1]["kl/cumulative"] == pytest.approx(sum(kls))
        assert any(abs(r["kl/scale"] - 1) > 0.05 for r in rows)  # the step really was rescaled


def test_unnormalised_arms_differ(tmp_path):
    """Without the option the same pair's KL per step differs between arms by more than
    the tolerance: the matched KL above is the option's doing, not a coincidence."""
    torch.set_num_threads(1)
    cfg = load_experiment(tiny_config(tmp_path, steps=2, sft_steps=150, task="countdown"))
    kl = {}
    for run in cfg.runs():
        rows = read_metrics(train_run(run, tmp_path / run.arm.name, progress=False) / "metrics.jsonl")
        kl[run.arm.role] = [r["kl/control_contexts"] for r in rows]
    assert any(abs(b / t - 1) > KL_TOLERANCE for b, t in zip(kl["baseline"], kl["treatment"]))


def test_attribution_path_integrates_to_the_probe_change(runs):
    init, rows = runs["baseline"]
    for key in ("drift/style_logp", "entropy/fixed_weak_credit"):
        path = sum(r[f"attr/{key}/path"] for r in rows)
        assert path == pytest.approx(rows[-1][key] - init[key], rel=0.05, abs=1e-5)
    assert any(abs(r["attr/drift/style_logp/shared"]) > 1e-5 for r in rows)


def test_control_contexts_exclude_shared_and_probe_contexts():
    a, c = TEMPLATE
    tokens = torch.tensor([[a, c, STYLE, 12, 13, 1], [a, c, STYLE, 14, 1, 0], [a, c, 12, 13, 1, 0]])
    mask = tokens != 0
    mask[0, :] = True
    r = Rollout(tokens=tokens, mask=mask, rewards=torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64),
                group=torch.tensor([0, 0, 0]), old_logprobs=torch.zeros(3, 6, dtype=torch.float64))
    ctl = control_contexts(r)
    assert not ctl[:, :3].any()  # template contexts (shared) and the S slot
    assert ctl[0, 3] and ctl[0, 4] and ctl[1, 3] and not ctl[2, 2]
    assert not (ctl & ~mask).any()


def test_normalise_step_hits_the_target_and_refuses_a_bad_one():
    lin = torch.nn.Linear(3, 4, dtype=torch.float64)
    x = torch.randn(5, 3, dtype=torch.float64)
    theta0 = [p.detach().clone() for p in lin.parameters()]
    before = torch.log_softmax(lin(x), -1).detach()
    with torch.no_grad():
        for p in lin.parameters():
            p.add_(0.3 * torch.randn_like(p))

    def kl():
        after = torch.log_softmax(lin(x), -1)
        return float((before.exp() * (before - after)).sum(-1).mean())

    _, got = normalise_step(lin, theta0, kl, 1e-3)
    assert got == pytest.approx(1e-3, rel=KL_TOLERANCE) and kl() == pytest.approx(got)
    with pytest.raises(InvalidArgument, match="kl_target"):
        normalise_step(lin, theta0, kl, 0.0)


def test_the_rescale_factor_is_capped_and_reported():
    """Issue 42: a target far beyond the optimiser's step is not reached by extrapolating
    (forced-S pilots reached factors of 153 and 3.4e7); the factor stops at the cap and the
    KL stays below the target."""
    from exchange.lab.klstep import SCALE_CAP

    lin = torch.nn.Linear(3, 4, dtype=torch.float64)
    x = torch.randn(5, 3, dtype=torch.float64)
    theta0 = [p.detach().clone() for p in lin.parameters()]
    before = torch.log_softmax(lin(x), -1).detach()
    with torch.no_grad():
        for p in lin.parameters():
            p.add_(1e-4 * torch.randn_like(p))  # a tiny step: reaching 1e-3 nats needs c >> 10

    def kl():
        after = torch.log_softmax(lin(x), -1)
        return float((before.exp() * (before - after)).sum(-1).mean())

    c, got = normalise_step(lin, theta0, kl, 1e-3)
    assert c == SCALE_CAP and got < 1e-3
    c, got = normalise_step(lin, theta0, kl, 1e-3, cap=1e6)  # uncapped, the secant extrapolates
    assert c > SCALE_CAP and got == pytest.approx(1e-3, rel=KL_TOLERANCE)
    with pytest.raises(InvalidArgument, match="cap"):
        normalise_step(lin, theta0, kl, 1e-3, cap=0.5)
