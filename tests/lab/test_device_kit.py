"""experiments/llm/device_kit.py end to end on CPU, in two "calls": the first stops at its
time budget with a checkpoint and no done.json; the second resumes and finishes; every
call returns one archive of the small run files, and ``merge`` rebuilds a run root that
``exchange experiment report`` reads."""

from __future__ import annotations

import importlib.util
import json
import sys
import tarfile
from pathlib import Path

import pytest

from tests.lab.test_llm import PAIR

REPO = Path(__file__).resolve().parents[2]


def _kit():
    spec = importlib.util.spec_from_file_location("device_kit", REPO / "experiments" / "llm" / "device_kit.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["device_kit"] = module
    spec.loader.exec_module(module)
    return module


def _rows(d: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (d / "metrics.jsonl").read_text().splitlines()]


# ~1 min: two run_llm calls with a tiny model (the slow tier)
@pytest.mark.slow
def test_two_calls_second_resumes(tmp_path, llm_stack_ready, trl_ready):
    from exchange.cli import main as cli

    kit = _kit()
    (tmp_path / "pair.toml").write_text(PAIR)
    args = ["--experiment", str(tmp_path / "pair.toml"), "--model_config", "llama-tiny", "--use_cpu", "true",
            "--max_steps", "3", "--save_steps", "100", "--eval_steps", "3"]
    state, out1, out2 = tmp_path / "state", tmp_path / "out1", tmp_path / "out2"

    assert kit.run(args, budget_s=0.0, state=state, out=out1) == 0  # the budget is spent after one step
    grpo = state / "runs" / "llm_pair" / "grpo" / "seed0"
    assert _rows(grpo) == [0] and not (grpo / "done.json").exists()
    assert [p.name for p in grpo.glob("checkpoint-*")] == ["checkpoint-1"]  # saved at the stop
    assert not (state / "runs" / "llm_pair" / "grpo+group_constant_norm").exists()  # not started
    first = json.loads((out1 / "kit.json").read_text())
    assert first["runs"] == {"llm_pair/grpo/seed0": {"steps": 1, "done": False}}

    assert kit.run(args, budget_s=3600.0, state=state, out=out2) == 0  # resumes, finishes both arms
    for arm in ("grpo", "grpo+group_constant_norm"):
        d = state / "runs" / "llm_pair" / arm / "seed0"
        assert _rows(d) == [0, 1, 2] and json.loads((d / "done.json").read_text())["steps"] == 3
        assert len(list(d.glob("checkpoint-*"))) == 1  # save_total_limit 1
    with tarfile.open(out2 / "runs.tar.gz") as tar:
        names = tar.getnames()
    assert not [n for n in names if "checkpoint-" in n or "_sft" in n]
    assert {Path(n).name for n in names} <= set(kit.RUN_FILES)

    root = tmp_path / "merged"
    kit.merge([out1 / "runs.tar.gz", out2 / "runs.tar.gz"], root)
    assert _rows(root / "llm_pair" / "grpo" / "seed0") == [0, 1, 2]
    assert cli(["experiment", "report", str(root / "llm_pair")]) == 0


def test_merge_keeps_every_calls_seeds(tmp_path):
    kit = _kit()
    archives = []
    for i, seeds in enumerate(([0, 1], [2])):
        src = tmp_path / f"call{i}" / "exp"
        src.mkdir(parents=True)
        (src / "experiment.json").write_text(json.dumps({"name": "exp", "seeds": seeds}))
        (src / "a" / f"seed{seeds[0]}").mkdir(parents=True)
        (src / "a" / f"seed{seeds[0]}" / "metrics.jsonl").write_text('{"step": 0}\n')
        kit.pack(tmp_path / f"call{i}", tmp_path / f"call{i}.tar.gz")
        archives.append(tmp_path / f"call{i}.tar.gz")
    kit.merge(archives, tmp_path / "root")
    assert json.loads((tmp_path / "root" / "exp" / "experiment.json").read_text())["seeds"] == [0, 1, 2]
    assert (tmp_path / "root" / "exp" / "a" / "seed2" / "metrics.jsonl").exists()


# the CPU dry run of the device command (issue 42): the committed recipe of the non-private, dose-armed M3
# design, its TOML cut to CPU size (tiny model, 2 steps, pilot seeds 100-101, 4 prompts), --parallel 2
RECIPE = REPO / "experiments" / "llm" / "recipes" / "grpo_norm_probe_dose_llama25m.yaml"
DESIGN = REPO / "experiments" / "configs" / "grpo_norm_probe_dose.toml"
ARMS = ("grpo", "grpo+surgical", "grpo+dose0.01", "grpo+dose0.1")


def _first_row(d: Path) -> dict:
    return json.loads((d / "metrics.jsonl").read_text().splitlines()[0])


def _cpu_size(toml: str) -> str:
    for old, new in (("pilot_seeds = [100, 101, 102, 103]", "pilot_seeds = [100, 101]"),
                     ("eval_prompts = 512", "eval_prompts = 16"), ("probe_prompts = 16", "probe_prompts = 4"),
                     ("prompts_per_step = 32", "prompts_per_step = 4")):
        assert old in toml, old
        toml = toml.replace(old, new)
    return toml


# ~3-6 min on 2 CPU cores: 4 pilot runs, then 3 seeds x 4 arms (the slow tier)
@pytest.mark.slow
def test_campaign_dry_run_of_the_dose_design_with_parallel_seeds(tmp_path, llm_stack_ready, trl_ready):
    from exchange.cli import main as cli
    from exchange.core.metric_keys import SHARED_RESIDUAL

    kit = _kit()
    (tmp_path / "design.toml").write_text(_cpu_size(DESIGN.read_text()))
    args = ["--config", str(RECIPE), "--experiment", str(tmp_path / "design.toml"), "--model_config", "llama-tiny",
            "--use_cpu", "true", "--max_steps", "2", "--sft_steps", "30", "--sft_lr", "0.01", "--sft_batch", "32",
            "--per_device_train_batch_size", "16", "--eval_steps", "2", "--save_steps", "2", "--seeds", "0", "1", "2"]
    out = tmp_path / "out"
    assert kit.main(["campaign", "--budget_s", "3600", "--parallel", "2", "--state", str(tmp_path / "state"),
                     "--out", str(out), "--", *args]) == 0
    rep = json.loads((out / "kit.json").read_text())
    assert rep["seeds_done"] == [0, 1, 2] and rep["seeds_left"] == [] and rep["pilot_frozen"], rep
    assert rep["parallel"] == 2 and rep["parallel_measured"]["n"] >= 1 and rep["seconds_per_seed"] > 0
    timing = {t["seed"]: t for t in rep["timing"]}
    assert (timing[0]["wave"], timing[0]["procs"]) == (0, 1)  # the first seed alone, timed
    assert [(timing[s]["wave"], timing[s]["procs"]) for s in (1, 2)] == [(1, 2), (1, 2)]
    a, b = timing[1], timing[2]  # the two processes overlapped
    assert a["start_s"] < b["start_s"] + b["wall_s"] and b["start_s"] < a["start_s"] + a["wall_s"]
    assert all(t["exit"] == 0 and t["done"] for t in timing.values())

    root = tmp_path / "merged"
    kit.merge([out / "runs.tar.gz"], root)
    exp = root / "grpo_norm__probe_dose_adam"
    assert json.loads((exp / "experiment.json").read_text())["seeds"] == [0, 1, 2]
    assert (exp / "pilot.json").exists()  # returned: the report's predictions come from it
    for seed in (0, 1, 2):
        for arm in ARMS:
            d = exp / arm / f"seed{seed}"
            assert _rows(d) == [0, 1] and json.loads((d / "done.json").read_text())["steps"] == 2, d
            assert {p.name for p in d.iterdir()} <= set(kit.RUN_FILES), d
    # the dose arms train the dosed objective (exchange.lab.dose.dosed): at step 0 every arm of a seed has the
    # baseline's weights and its replayed rollout, so an arm trained as plain grpo would log the baseline's residual
    checked = 0
    for seed in (0, 1, 2):
        first = {arm: _first_row(exp / arm / f"seed{seed}")[SHARED_RESIDUAL] for arm in ARMS}
        if first["grpo"]:
            checked += 1
            assert first["grpo+surgical"] < 1e-9 < first["grpo+dose0.01"] < first["grpo+dose0.1"] < first["grpo"], first
    assert checked, "no seed had a shared residual at step 0: the dose check is vacuous"
    # the surgical pilot arm attributes minus the base objective's residual (delta_hat's bracket), not its own ~0
    _assert_surgical_pilot_attributes(exp, "grpo", "grpo+surgical")
    assert cli(["experiment", "report", str(exp)]) == 0


def _assert_surgical_pilot_attributes(exp: Path, base_arm: str, surgical_arm: str) -> None:
    """The surgical pilot arm's attribution reads the residual its base objective would add
    (the surgical end of delta_hat's bracket), not its own ~0, and the bracket is frozen."""
    from exchange.core.metric_keys import attr_shared
    from exchange.lab.predictions import read_run

    for seed in (100, 101):
        base = read_run(exp / "pilot" / base_arm / f"seed{seed}").series(attr_shared("drift/style_logp")).sum()
        surg = read_run(exp / "pilot" / surgical_arm / f"seed{seed}").series(attr_shared("drift/style_logp")).sum()
        assert abs(surg) > 0.01 * abs(base) > 0, (seed, base, surg)
    assert json.loads((exp / "pilot.json").read_text())["pilots"]["P2"]["delta_hat_surgical"] is not None


# the same device command on issue 42's M1 design with a non-private probe (GSPO, exact filler, reuse 4x2, the
# coupling-surgical arm and coupling dose arms 0.01 / 0.1, SGD): its committed recipe, the TOML cut to CPU size as
# above. One rollout is 8 TRL steps (4 epochs x 2 minibatches), so the dry run trains one whole rollout, 8 steps:
# the pilot's attribution acts per rollout, and a checkpoint must fall between rollouts
M1_RECIPE = REPO / "experiments" / "llm" / "recipes" / "gspo_equal_length_nonprivate_llama25m.yaml"
M1_DESIGN = REPO / "experiments" / "configs" / "gspo_equal_length_nonprivate.toml"
M1_ARMS = ("gspo", "gspo+coupling_surgical", "gspo+coupling_dose0.01", "gspo+coupling_dose0.1")


def _residuals(d: Path) -> list:
    from exchange.core.metric_keys import SHARED_RESIDUAL

    return [json.loads(line)[SHARED_RESIDUAL] for line in (d / "metrics.jsonl").read_text().splitlines()]


# ~1 min on 2 CPU cores: 4 pilot runs, then 3 seeds x 4 arms, 8 steps each (the slow tier)
@pytest.mark.slow
def test_campaign_dry_run_of_the_m1_design_with_parallel_seeds(tmp_path, llm_stack_ready, trl_ready):
    import torch

    from exchange.cli import main as cli
    from exchange.lab.tasks import EOS, FILLER, STYLE

    kit = _kit()
    (tmp_path / "design.toml").write_text(_cpu_size(M1_DESIGN.read_text()))
    args = ["--config", str(M1_RECIPE), "--experiment", str(tmp_path / "design.toml"), "--model_config",
            "llama-tiny", "--use_cpu", "true", "--max_steps", "8", "--sft_steps", "30", "--sft_lr", "0.01",
            "--sft_batch", "32", "--per_device_train_batch_size", "8", "--eval_steps", "8", "--save_steps", "8",
            "--seeds", "0", "1", "2"]
    out, state = tmp_path / "out", tmp_path / "state"
    assert kit.main(["campaign", "--budget_s", "3600", "--parallel", "2", "--state", str(state),
                     "--out", str(out), "--", *args]) == 0
    rep = json.loads((out / "kit.json").read_text())
    assert rep["seeds_done"] == [0, 1, 2] and rep["seeds_left"] == [] and rep["pilot_frozen"], rep
    timing = {t["seed"]: t for t in rep["timing"]}
    assert [(timing[s]["wave"], timing[s]["procs"]) for s in (0, 1, 2)] == [(0, 1), (1, 2), (1, 2)]
    assert all(t["exit"] == 0 and t["done"] for t in timing.values())

    root = tmp_path / "merged"
    kit.merge([out / "runs.tar.gz"], root)
    exp = root / "gspo_equal_length_nonprivate__e4x2"
    ran = json.loads((exp / "experiment.json").read_text())
    assert ran["seeds"] == [0, 1, 2] and (ran["train"]["epochs"], ran["train"]["minibatches"]) == (4, 2)
    for seed in (0, 1, 2):
        for arm in M1_ARMS:
            d = exp / arm / f"seed{seed}"
            assert _rows(d) == list(range(8)) and json.loads((d / "done.json").read_text())["steps"] == 8, d

    # the grammar inside the model's forward: every sampled completion is [S, d1, d2, F1, F2, EOS] with fillers
    # drawn from (".", "~", S), and S is sampled as a filler somewhere (the probe is not private)
    s_as_filler = 0
    for rec in (state / "runs").glob("**/gspo/seed*/completions/step*.pt"):
        comp = torch.load(rec, weights_only=False)["completion_ids"]  # [rows, 6]
        assert comp.shape[1] == 6 and (comp[:, 0] == STYLE).all() and (comp[:, 5] == EOS).all(), comp
        assert torch.isin(comp[:, 1:3], torch.tensor([*FILLER, STYLE, EOS])).logical_not().all(), comp
        assert torch.isin(comp[:, 3:5], torch.tensor([*FILLER, STYLE])).all(), comp
        s_as_filler += int((comp[:, 3:5] == STYLE).sum())
    assert s_as_filler > 0

    # the coupling dose arms reach TRL's loss. Step 0 is on-policy (every response ratio 1): the coupling residual
    # is 0 in every arm, so every arm takes the baseline's step and still has its weights and its replayed rollout
    # at step 1, the first off-policy minibatch; there a dose arm's residual is keep x the baseline's (an arm
    # trained as plain gspo would log the baseline's value) and the coupling-surgical arm's is round-off
    checked = 0
    for seed in (0, 1, 2):
        res = {arm: _residuals(exp / arm / f"seed{seed}") for arm in M1_ARMS}
        assert all(r[0] is None or r[0] < 1e-9 for r in res.values()), res
        if res["gspo"][1] is not None and res["gspo"][1] > 1e-9:
            checked += 1
            for keep in (0.01, 0.1):
                assert abs(res[f"gspo+coupling_dose{keep}"][1] / res["gspo"][1] - keep) < 1e-6 * keep, (seed, res)
            assert res["gspo+coupling_surgical"][1] < 1e-9, res
        for k, base in enumerate(res["gspo"]):  # later steps: the arms' weights drift apart, a little
            if base is not None and base > 1e-9:
                assert res["gspo+coupling_surgical"][k] < 1e-9 < res["gspo+coupling_dose0.01"][k] < \
                    res["gspo+coupling_dose0.1"][k] < base, (seed, k, res)
    assert checked, "no seed had a coupling residual at step 1: the dose check is vacuous"
    # the surgical pilot arm attributes minus the coupling residual its base objective would add, not its own ~0
    _assert_surgical_pilot_attributes(exp, "gspo", "gspo+coupling_surgical")
    assert cli(["experiment", "report", str(exp)]) == 0


def test_wave_size_never_starts_a_seed_that_cannot_finish():
    kit = _kit()
    # before any wave: k seeds are bounded by k times one seed alone
    assert kit.wave_size(todo=10, parallel=16, left=250.0, solo_s=60.0, last=None) == 4
    assert kit.wave_size(todo=3, parallel=16, left=1e9, solo_s=60.0, last=None) == 3  # no more than are left
    assert kit.wave_size(todo=10, parallel=2, left=1e9, solo_s=60.0, last=None) == 2  # nor than --parallel
    assert kit.wave_size(todo=10, parallel=16, left=59.0, solo_s=60.0, last=None) == 0
    assert kit.wave_size(todo=10, parallel=16, left=250.0, solo_s=60.0, last=None, startup_s=20.0) == 3  # imports
    # after a wave of 4 that took 80 s: up to 4 at once take 80 s, more scale linearly
    assert kit.wave_size(todo=10, parallel=16, left=100.0, solo_s=60.0, last=(4, 80.0)) == 5
    assert kit.wave_size(todo=10, parallel=16, left=79.0, solo_s=60.0, last=(4, 80.0)) == 0


def test_campaign_without_budget_starts_nothing(tmp_path, llm_stack_ready, trl_ready):
    kit = _kit()
    (tmp_path / "pair.toml").write_text(PAIR)
    args = ["--experiment", str(tmp_path / "pair.toml"), "--model_config", "llama-tiny", "--use_cpu", "true",
            "--max_steps", "2", "--bf16", "false"]
    out0 = tmp_path / "out0"
    assert kit.campaign(args, budget_s=0.0, state=tmp_path / "state0", out=out0) == 0
    rep = json.loads((out0 / "kit.json").read_text())
    assert rep["seeds_done"] == [] and rep["timing"] == [] and rep["seeds_left"] == [0]


def test_parallel_must_be_positive(tmp_path, capsys):
    kit = _kit()
    with pytest.raises(SystemExit):
        kit.main(["campaign", "--parallel", "0", "--out", str(tmp_path), "--", "--experiment", "x.toml"])
    assert "--parallel=0" in capsys.readouterr().err
