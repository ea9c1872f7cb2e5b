import pytest

from exchange.errors import InvalidArgument
from exchange.lab.config import load_experiment, parse_experiment
from tests.lab._tiny import TINY_TOML, tiny_config


def _data(**changes):
    import tomllib

    data = tomllib.loads(TINY_TOML.format(name="t", seeds=[0, 1], steps=3, task="arithmetic", sft_steps=1, ckpt_every=1))
    data.update(changes)
    return data


def test_load_valid(tmp_path):
    cfg = load_experiment(tiny_config(tmp_path, seeds=(0, 1, 2)))
    assert cfg.seeds == (0, 1, 2) and cfg.baseline.objective == "grpo" and cfg.treatment.objective == "dr_grpo"
    runs = cfg.runs()
    assert len(runs) == 6 and [r.seed for r in runs[:2]] == [0, 0]
    assert runs[0].sft_key() == runs[1].sft_key() != runs[2].sft_key()  # both arms of a seed share the warm start
    assert runs[0].fingerprint() != runs[1].fingerprint()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"train": {"lr2": 1.0}}, r"\[train\] has unknown key lr2=1.0"),
        ({"train": {"steps": "many"}}, r"\[train\] steps='many' is a str; it must be a int"),
        ({"train": {"group_size": 1}}, r"\[train\] group_size=1 must be >= 2"),
        ({"train": {"minibatches": 5, "prompts_per_step": 2}}, r"minibatches=5 > prompts_per_step=2"),
        ({"task": {"name": "chess"}}, r"\[task\] name='chess'"),
        ({"seeds": []}, r"seeds=\[\] must be a non-empty list"),
        ({"seeds": [1, 1]}, r"duplicates"),
        ({"bogus": 1}, r"unknown top-level key bogus=1"),
        ({"target_accuracy": 2.0}, r"target_accuracy=2.0 must lie in \[0, 1\]"),
    ],
)
def test_bad_configs_name_the_field(changes, message):
    with pytest.raises(InvalidArgument, match=message):
        parse_experiment(_data(**changes))


def test_arms_must_be_a_baseline_and_a_comparison():
    data = _data()
    data["arms"] = data["arms"][:1]
    with pytest.raises(InvalidArgument, match="two or three"):
        parse_experiment(data)
    data = _data()
    data["arms"][1]["role"] = "baseline"
    with pytest.raises(InvalidArgument, match="need one baseline"):
        parse_experiment(data)
    data = _data()
    data["arms"][1]["role"] = "control"
    with pytest.raises(InvalidArgument, match="role='control'"):
        parse_experiment(data)


def test_unknown_objective_spec_fails_before_training():
    data = _data()
    data["arms"][1]["objective"] = "nonexistent_objective"
    with pytest.raises(InvalidArgument, match=r"name='dr_grpo' objective='nonexistent_objective'"):
        parse_experiment(data)


def test_arm_params_reach_the_objective():
    data = _data()
    data["arms"][0]["params"] = {"eps_high": 0.3}
    cfg = parse_experiment(data)
    assert cfg.baseline.loss_fn().params["eps_high"] == 0.3
    data["arms"][0]["params"] = {"nope": 1}
    with pytest.raises(InvalidArgument, match="nope=1"):
        parse_experiment(data)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(InvalidArgument, match="is not a file"):
        load_experiment(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [")
    with pytest.raises(InvalidArgument, match="is not valid TOML"):
        load_experiment(bad)


def test_public_surface_is_declared_and_importable():
    import exchange.lab as lab

    assert sorted(lab.__all__) == sorted(set(lab.__all__))
    for name in lab.__all__:
        assert getattr(lab, name) is not None


def test_cli_run_rejects_a_bad_config_with_exit_code_2(tmp_path, capsys):
    from exchange.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[[arms]]\nname = "a"\nobjective = "grpo"\nrole = "baseline"\n')
    assert main(["experiment", "run", str(bad), "--out", str(tmp_path)]) == 2
    assert "two or three [[arms]]" in capsys.readouterr().err
    assert main(["experiment", "report", str(tmp_path)]) == 2


def test_fields_added_later_leave_earlier_fingerprints_and_warm_starts_unchanged():
    """[task] long_wrong, template_in_prompt, forced_style and [train] common_rollouts came
    after runs were recorded: at
    their defaults the run fingerprint and the warm-start key are those of a config
    without them, so earlier run directories resume and earlier warm starts are reused;
    set, they change both (a different design)."""
    import dataclasses
    import hashlib
    import json
    from pathlib import Path

    from exchange.lab.config import load_experiment

    root = Path(__file__).resolve().parents[2]
    run = load_experiment(root / "experiments" / "configs" / "grpo_group_constant_norm.toml").runs()[0]
    d = run.to_dict()
    del d["task"]["long_wrong"], d["task"]["template_in_prompt"], d["task"]["forced_style"]
    del d["train"]["common_rollouts"]
    del d["task"]["probe_as_filler"], d["arm"]["keep"], d["task"]["fixed_answer"]  # issue 42's fields
    del d["task"]["exact_filler"], d["arm"]["dose_of"]  # issue 42's non-private M1 design
    assert run.fingerprint() == hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
    linked = dataclasses.replace(run, task=dataclasses.replace(run.task, long_wrong=True))
    common = dataclasses.replace(run, train=dataclasses.replace(run.train, common_rollouts=True))
    assert len({run.fingerprint(), linked.fingerprint(), common.fingerprint()}) == 3
    assert linked.sft_key() != run.sft_key() and common.sft_key() == run.sft_key()
