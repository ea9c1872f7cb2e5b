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


# the CPU dry run of the device command (issue 42): tiny model, 2 steps, the exact `campaign` path
@pytest.mark.slow
def test_campaign_times_a_seed_and_runs_as_many_as_fit(tmp_path, llm_stack_ready, trl_ready):
    from exchange.cli import main as cli

    kit = _kit()
    (tmp_path / "pair.toml").write_text(PAIR.replace("seeds = [0]", "seeds = [0, 1]"))
    args = ["--experiment", str(tmp_path / "pair.toml"), "--model_config", "llama-tiny", "--use_cpu", "true",
            "--max_steps", "2", "--save_steps", "100", "--eval_steps", "2", "--bf16", "false"]
    out = tmp_path / "out"
    assert kit.main(["campaign", "--budget_s", "3600", "--state", str(tmp_path / "state"), "--out", str(out),
                     "--", *args]) == 0
    rep = json.loads((out / "kit.json").read_text())
    assert rep["seeds_done"] == [0, 1] and rep["seeds_left"] == [] and rep["seconds_per_seed"] > 0
    root = tmp_path / "merged"
    kit.merge([out / "runs.tar.gz"], root)
    assert cli(["experiment", "report", str(root / "llm_pair")]) == 0
    # no budget left: no seed starts (a seed that cannot finish would leave checkpoints behind)
    out0 = tmp_path / "out0"
    assert kit.campaign(args, budget_s=0.0, state=tmp_path / "state0", out=out0) == 0
    assert json.loads((out0 / "kit.json").read_text())["seeds_done"] == []
