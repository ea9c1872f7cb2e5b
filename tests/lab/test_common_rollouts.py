"""Common rollouts (issue 31: arms that differ only in the mechanism): every arm of a seed
trains on the baseline's sampled tokens and rewards, re-scored by its own policy."""

import json

import numpy as np
import pytest
import torch
from _tiny import tiny_config

from exchange.errors import InvalidArgument
from exchange.lab.config import load_experiment
from exchange.lab.experiment import run_experiment
from exchange.lab.experiment_decision import decide_experiment
from exchange.lab.predictions import ROLLOUT_HASH, read_run
from exchange.lab.trainer import rollout_path, train_run


def _hashes(d):
    return read_run(d).series(ROLLOUT_HASH)


def _experiment(tmp_path, name, common):
    path = tiny_config(tmp_path, name=name, seeds=(0,), steps=4, sft_steps=60, ckpt_every=2)
    # lr 0.03: large enough that the arms' own samples part within these 4 steps
    text = path.read_text().replace("[train]\n", f"[train]\nlr = 0.03\nmeasure_prop31 = false\n"
                                                  f"common_rollouts = {str(common).lower()}\n")
    path.write_text(text)
    cfg = load_experiment(path)
    return cfg, run_experiment(cfg, tmp_path / "runs", progress=False)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    import shutil

    tmp = tmp_path_factory.mktemp("common")
    common = _experiment(tmp, "common", True)
    shutil.copytree(tmp / "runs" / "common" / "_sft", tmp / "runs" / "own" / "_sft")  # the same warm start
    return common, _experiment(tmp, "own", False)


def test_every_arm_trains_on_the_baselines_rollouts(pair):
    (cfg, exp), _ = pair
    for seed in cfg.seeds:
        base, treat = exp / "grpo" / f"seed{seed}", exp / "dr_grpo" / f"seed{seed}"
        hb, ht = _hashes(base), _hashes(treat)
        assert len(hb) == cfg.train.steps and np.array_equal(hb, ht)
        assert np.array_equal(read_run(base).series("charts/reward"), read_run(treat).series("charts/reward"))
        assert all(rollout_path(base, k).exists() for k in range(cfg.train.steps))
        assert not (treat / "rollouts").exists()  # only the baseline stores them
    res = decide_experiment(exp)
    assert res.common_rollouts == {"treatment": True}
    # P4 is the method test: an arm that never sampled its own responses does not decide it
    p4 = next(r for r in res.rows if r.prediction.key == "P4" and r.prediction.primary)
    assert p4.decision is None and "common rollouts" in p4.reason


def test_own_rollouts_diverge_and_the_check_catches_different_data(pair):
    """Without common rollouts the arms sample from their own policies: the data differ
    after the first update (what the check must catch), and a report over a run whose
    hashes were changed fails the manipulation check."""
    _, (cfg, exp) = pair
    differ = [not np.array_equal(_hashes(exp / "grpo" / f"seed{s}"), _hashes(exp / "dr_grpo" / f"seed{s}"))
              for s in cfg.seeds]
    assert any(differ)
    assert decide_experiment(exp).common_rollouts == {}  # not claimed: not checked

    (cfg, common_exp), _ = pair
    meta = json.loads((common_exp / "experiment.json").read_text())
    assert meta["train"]["common_rollouts"] is True
    log = common_exp / "dr_grpo" / "seed0" / "metrics.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    rows[2][ROLLOUT_HASH] += 1
    saved = log.read_text()
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        res = decide_experiment(common_exp)
        assert res.common_rollouts == {"treatment": False} and not res.manipulation_passed
    finally:
        log.write_text(saved)


def test_replay_rescored_by_the_arms_own_policy(pair):
    """The replaying arm's first-epoch ratios are 1: its old log-probs are its own."""
    from exchange.lab.tasks import get_task
    from exchange.lab.trainer import replay_rollout, warm_started_policy

    (cfg, exp), _ = pair
    run = cfg.runs((0,))[1]
    model = warm_started_policy(run, get_task(run.task.name, run.task.max_filler, run.task.style_p))
    r = replay_rollout(model, exp / "grpo" / "seed0", 0)
    stored = torch.load(rollout_path(exp / "grpo" / "seed0", 0), weights_only=False)
    assert torch.equal(r.tokens, torch.tensor(stored["tokens"]))
    # the baseline sampled with this same warm start at step 0: identical log-probs there
    assert torch.allclose(r.old_logprobs, torch.tensor(stored["old_logprobs"], dtype=torch.float64), atol=1e-6)
    r3 = replay_rollout(model, exp / "grpo" / "seed0", 3)  # after 3 baseline updates: not the baseline's
    stored3 = torch.load(rollout_path(exp / "grpo" / "seed0", 3), weights_only=False)
    assert not torch.allclose(r3.old_logprobs, torch.tensor(stored3["old_logprobs"], dtype=torch.float64), atol=1e-6)


def test_a_replaying_arm_without_the_baselines_rollouts_is_refused(tmp_path):
    path = tiny_config(tmp_path, name="lone", steps=2, sft_steps=0)
    path.write_text(path.read_text().replace("[train]\n", "[train]\ncommon_rollouts = true\n"))
    cfg = load_experiment(path)
    treat = cfg.runs()[1]
    assert treat.arm.role == "treatment"
    with pytest.raises(InvalidArgument, match="common_rollouts=true.*rollouts_from"):
        train_run(treat, tmp_path / "t", progress=False)
    with pytest.raises(InvalidArgument, match=r"step00000.pt is missing; the baseline arm"):
        train_run(treat, tmp_path / "t", progress=False, rollouts_from=tmp_path / "nowhere")


@pytest.mark.slow
def test_template_in_prompt_runs_through_the_pilot_and_the_report(tmp_path):
    """The whole loop (pilot with the attribution and the certificate, common rollouts,
    test seeds, report) on a task whose template ends the prompt."""
    path = tiny_config(tmp_path, name="moved", seeds=(0, 1), steps=3, sft_steps=150, ckpt_every=3)
    text = path.read_text().replace("[task]\n", "[task]\ntemplate_in_prompt = true\nstyle_p = 0.5\n")
    text = text.replace("[train]\n", "[train]\ncommon_rollouts = true\nmeasure_prop31 = false\n")
    text = text.replace('seeds = [0, 1]', 'seeds = [0, 1]\npilot_seeds = [100, 101]')
    path.write_text(text)
    cfg = load_experiment(path)
    exp = run_experiment(cfg, tmp_path / "runs", progress=False)
    res = decide_experiment(exp)
    assert res.pilot is not None and res.common_rollouts == {"treatment": True}
    init = json.loads((exp / "grpo" / "seed0" / "init.json").read_text())
    assert init["drift/template_logp"] is None and init["drift/style_logp"] is not None  # no template in responses
    tokens = torch.tensor(torch.load(rollout_path(exp / "grpo" / "seed0", 0), weights_only=False)["tokens"])
    assert not torch.isin(tokens, torch.tensor([4, 5])).any()
