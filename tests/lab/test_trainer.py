"""The training loop: metrics, determinism, and SIGKILL-then-resume equality."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.lab.config import load_experiment
from exchange.lab.experiment import run_dir, run_experiment
from exchange.lab.runlog import MetricsLog, read_metrics
from exchange.lab.trainer import train_run
from tests.lab._tiny import tiny_config

REPO = Path(__file__).resolve().parents[2]

KEYS = {
    "step", "charts/samples", "charts/reward", "charts/length", "charts/truncated",
    "entropy/template", "entropy/filler", "entropy/weak_credit", "entropy/decision",
    "tax/kappa_share", "tax/event_share", "tax/shared_residual", "tax/shared_update_share", "tax/shared_K_signed", "len/cov_reward_inv_len",
    "clip/frac_pos_adv", "clip/frac_neg_adv", "losses/log_ratio_absmax", "losses/loss",
    "kl/shared_contexts", "kl/all_contexts",
}
EVAL_KEYS = {"eval/accuracy", "drift/template_logp", "drift/style_logp", "entropy/fixed_weak_credit", "drift/filler_logp", "drift/decision_logp",
             "drift/zero_credit_logp", "drift/ref_seq_logp", "drift/short_vs_long_logodds",
             "kl/prop31_predicted", "kl/prop31_measured"}


def test_run_writes_one_row_per_step_and_is_deterministic(tmp_path):
    torch.set_num_threads(1)
    cfg = load_experiment(tiny_config(tmp_path, steps=4))
    run = cfg.runs()[0]
    a = read_metrics(train_run(run, tmp_path / "a", progress=False) / "metrics.jsonl")
    b = read_metrics(train_run(run, tmp_path / "b", progress=False) / "metrics.jsonl")
    assert [r["step"] for r in a] == [0, 1, 2, 3]
    assert KEYS <= set(a[0]) and EVAL_KEYS <= set(a[2]) and EVAL_KEYS <= set(a[3]) and "eval/accuracy" not in a[0]
    assert a == b
    init = json.loads((tmp_path / "a" / "init.json").read_text())
    assert EVAL_KEYS - {"kl/prop31_predicted", "kl/prop31_measured"} <= set(init)
    assert all(r["tax/shared_update_share"] is None or r["tax/shared_update_share"] >= 0 for r in a)


def test_metrics_log_drops_a_torn_line_and_truncates(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    for s in range(3):
        log.append({"step": s, "x": s / 3})
    with open(tmp_path / "m.jsonl", "a") as fh:
        fh.write('{"step": 3, "x": 0.')  # killed mid-write
    assert [r["step"] for r in read_metrics(tmp_path / "m.jsonl")] == [0, 1, 2]
    log.truncate(2)
    assert read_metrics(tmp_path / "m.jsonl") == [{"step": 0, "x": 0.0}, {"step": 1, "x": 1 / 3}]


def test_run_dir_of_another_config_is_refused(tmp_path):
    cfg = load_experiment(tiny_config(tmp_path, steps=2))
    train_run(cfg.runs()[0], tmp_path / "r", progress=False)
    with pytest.raises(InvalidArgument, match="holds a run of another config"):
        train_run(cfg.runs()[1], tmp_path / "r", progress=False)


def _cli(config, out):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "exchange", "experiment", "run", str(config), "--out", str(out), "--no-progress"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


# ~8 s: the slow tier (the full suite, what CI runs, includes it; -m "not slow" stays under 3 minutes)
@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_an_uninterrupted_run(tmp_path):
    """Kill -9 between checkpoints, resume, and compare every metric of every step."""
    config = tiny_config(tmp_path, steps=16, ckpt_every=3, sft_steps=2)
    cfg = load_experiment(config)
    first = run_dir(tmp_path / "killed", cfg.runs()[0])
    proc = _cli(config, tmp_path / "killed")
    deadline = time.time() + 300
    while len(read_metrics(first / "metrics.jsonl")) < 7 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_killed = len(read_metrics(first / "metrics.jsonl"))
    assert proc.returncode == -signal.SIGKILL
    assert 7 <= n_killed < 16 and not (first / "done.json").exists(), "the kill must land mid-run"
    ckpt_step = torch.load(first / "ckpt.pt", weights_only=False)["step"]
    assert ckpt_step < n_killed  # some rows were written after the last checkpoint

    resumed = _cli(config, tmp_path / "killed")
    clean = _cli(config, tmp_path / "clean")
    assert resumed.wait(timeout=600) == 0, resumed.stdout.read().decode()
    assert clean.wait(timeout=600) == 0, clean.stdout.read().decode()
    for run in cfg.runs():
        got = read_metrics(run_dir(tmp_path / "killed", run) / "metrics.jsonl")
        want = read_metrics(run_dir(tmp_path / "clean", run) / "metrics.jsonl")
        assert [r["step"] for r in got] == list(range(16))
        assert got == want  # step for step, every metric, bit for bit


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
def test_experiment_report_end_to_end(tmp_path):
    from exchange.lab.experiment_report import BEGIN, CLAIMS_BEGIN, END, report_experiments
    from exchange.lab.predictions import PREDICTIONS

    cfg = load_experiment(tiny_config(tmp_path, name="tinyrep", seeds=(0, 1), steps=3))
    exp_dir = run_experiment(cfg, tmp_path / "runs", progress=False)
    md = tmp_path / "docs" / "experiments.md"
    md.parent.mkdir()
    md.write_text("# Training experiments\n\nhand-written intro\n")
    claims = tmp_path / "docs" / "claims.md"
    claims.write_text("# Claims\n\n## Exact-credit oracle\n\n| a | b |\n\n## Training experiments\n\nkeep\n")
    lines = report_experiments([exp_dir], img_dir=tmp_path / "docs" / "img", markdown=md, claims=claims)
    summary = json.loads((exp_dir / "summary.json").read_text())
    assert [r["prediction"] for r in summary["rows"]] == [p.key for p in PREDICTIONS]
    # no pilot and no surgical arm: P2/P3 are not tested, never "refuted"
    verdicts = summary["verdicts"]
    assert verdicts["P2"] == verdicts["P3"] == "not tested" and verdicts["P1"] == "not tested"
    png = tmp_path / "docs" / "img" / "exp_tinyrep_curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = md.read_text()
    assert "hand-written intro" in text and BEGIN in text and END in text and "img/exp_tinyrep_curves.png" in text
    assert lines[0].startswith("tinyrep: P1 ")
    ctext = claims.read_text()
    assert "| a | b |" in ctext and "keep" in ctext and CLAIMS_BEGIN in ctext
    report_experiments([exp_dir], markdown=md, claims=claims)  # idempotent: one generated section each
    assert md.read_text().count(BEGIN) == 1 and claims.read_text().count(CLAIMS_BEGIN) == 1


def test_report_refuses_unfinished_runs(tmp_path):
    from exchange.lab.experiment_report import report_experiment

    cfg = load_experiment(tiny_config(tmp_path, name="unfinished", seeds=(0, 1), steps=2))
    exp_dir = run_experiment(cfg, tmp_path / "runs", progress=False)
    (exp_dir / "dr_grpo" / "seed1" / "done.json").unlink()
    with pytest.raises(InvalidArgument, match="is unfinished"):
        report_experiment(exp_dir)
    with pytest.raises(InvalidArgument, match="has no experiment.json"):
        report_experiment(tmp_path)


def test_report_with_one_seed_decides_nothing(tmp_path):
    from exchange.lab.experiment_report import report_experiment

    cfg = load_experiment(tiny_config(tmp_path, name="oneseed", seeds=(0,), steps=2))
    exp_dir = run_experiment(cfg, tmp_path / "runs", progress=False)
    res = report_experiment(exp_dir)
    assert all(r.decision is None for r in res.rows)


def test_resume_and_report_refuse_duplicate_steps(tmp_path):
    from exchange.lab.experiment_report import report_experiment

    cfg = load_experiment(tiny_config(tmp_path, name="dups", seeds=(0, 1), steps=2))
    exp_dir = run_experiment(cfg, tmp_path / "runs", progress=False)
    log = exp_dir / "grpo" / "seed0" / "metrics.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines + lines[-1:]))  # a second writer appended a step again
    with pytest.raises(InvalidArgument, match="duplicate steps \\[1\\]"):
        report_experiment(exp_dir)
    with pytest.raises(InvalidArgument, match="duplicate steps"):
        run_experiment(cfg, tmp_path / "runs", progress=False)


def test_concurrent_run_on_one_out_is_refused(tmp_path):
    from exchange.lab.runlog import RunLock

    cfg = load_experiment(tiny_config(tmp_path, name="locked", seeds=(0,), steps=2))
    with RunLock(tmp_path / "runs" / "locked"):
        with pytest.raises(InvalidArgument, match="is locked by pid"):
            run_experiment(cfg, tmp_path / "runs", progress=False)


def test_manipulation_check_on_policy_constant_norm_removes_the_residual(tmp_path):
    """M3 on-policy: grpo keeps a shared residual, grpo+group_constant_norm removes it."""
    from exchange.lab.experiment_decision import decide_experiment

    path = tiny_config(tmp_path, name="manip", seeds=(0,), steps=3, sft_steps=60, task="countdown")
    text = path.read_text().replace("epochs = 2", "epochs = 1").replace("minibatches = 2", "minibatches = 1")
    text = text.replace('name = "dr_grpo"\nobjective = "dr_grpo"', 'name = "norm"\nobjective = "grpo+group_constant_norm"')
    path.write_text(text.replace("prompts_per_step = 2", "prompts_per_step = 4"))
    exp_dir = run_experiment(load_experiment(path), tmp_path / "runs", progress=False)
    dose = decide_experiment(exp_dir).dose
    assert dose["treatment"]["tax/shared_residual"] < 1e-6 and dose["baseline"]["tax/shared_residual"] > 0.01, dose
