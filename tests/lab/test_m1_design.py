"""Issue 42's M1 design (experiments/configs/gspo_equal_length_reuse.toml, not run yet): equal
response lengths, a wide sequence clip, the coupling-only pathway arm, common rollouts; the
config rules around the coupling-only arm."""

import dataclasses
from pathlib import Path

import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.lab.config import load_experiment, parse_experiment
from exchange.lab.generation import sample_group_rollout
from exchange.lab.tasks import EOS, STYLE
from exchange.lab.trainer import warm_started_policy

CONFIG = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "gspo_equal_length_reuse.toml"


def test_the_m1_design_has_equal_lengths_and_the_coupling_only_arm():
    cfg = load_experiment(CONFIG)
    prompts = cfg.task.build().sample_prompts(256, torch.Generator().manual_seed(0))
    for fixed in (True, False):  # the design's grammar, and the control without fixed_answer
        run = cfg.runs()[0]
        run = dataclasses.replace(run, sft=dataclasses.replace(run.sft, steps=0),  # the grammar, untrained weights
                                  task=dataclasses.replace(run.task, fixed_answer=fixed))
        task = run.task.build()
        policy = warm_started_policy(run, task)
        rollout = sample_group_rollout(policy, task, prompts[:64], 4, cfg.train.max_response_len, 1.0,
                                       torch.Generator().manual_seed(1))
        if fixed:  # every sampled response is [S, d1, d2, EOS]: 1/L_i is one constant (no M3)
            assert set(rollout.lengths.tolist()) == {4} and bool((rollout.tokens[:, 3] == EOS).all())
            assert bool((rollout.tokens[:, 0] == STYLE).all())
        else:
            assert len(set(rollout.lengths.tolist())) > 1  # the control: the grammar alone does not fix lengths
    arms = {a.role: a for a in cfg.arms}
    assert arms["surgical"].objective == "gspo+coupling_surgical" and arms["baseline"].objective == "gspo"
    assert arms["baseline"].params == {"eps_low": 0.2, "eps_high": 0.2}  # the wide sequence clip
    assert cfg.train.common_rollouts and (cfg.train.epochs, cfg.train.minibatches) == (2, 2)
    assert arms["surgical"].loss_fn().__name__ == "gspo+coupling_surgical"


def _doc(surgical="gspo+coupling_surgical", probe_as_filler=False):
    import tomllib

    data = tomllib.loads(CONFIG.read_text())
    data["arms"][1]["objective"] = surgical
    if probe_as_filler:
        data["task"].update(max_filler=2, probe_as_filler=True, fixed_answer=False)
        data["train"]["max_response_len"] = 6
    return data


def test_coupling_only_arm_rules():
    parse_experiment(_doc())
    with pytest.raises(InvalidArgument, match="must be the baseline's objective with \\+surgical \\(or "
                                              "\\+coupling_surgical\\)"):
        parse_experiment(_doc("grpo+coupling_surgical"))
    # the coupling arm's surgical-path attribution reads its coupling part (coupling_surgical's surgical_base,
    # tests/objectives/test_coupling_dose.py), so a non-private probe is allowed with it
    cfg = parse_experiment(_doc(probe_as_filler=True))
    assert cfg.task.probe_as_filler and hasattr(cfg.arms[1].loss_fn(), "surgical_base")
    parse_experiment(_doc("gspo+surgical", probe_as_filler=True))  # the whole-residual arm keeps its bracket
