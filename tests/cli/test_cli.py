"""The CLI: commands, exit codes (0 holds / 1 broken / 2 usage), JSON, and a bad-input
battery where every case is one precise line on stderr, never a traceback."""

import json
import subprocess
import sys
import textwrap

import pytest

from exchange.cli import COMMANDS, build_parser, main

FAST = ["--max-examples", "3"]

LOSSES = textwrap.dedent(
    """
    import torch

    def token_mean_pg(logprobs, rollout):
        adv = rollout.rewards - rollout.group_mean(rollout.rewards)
        return -(adv[:, None] * logprobs * rollout.fmask).sum() / rollout.fmask.sum()

    def per_token(logprobs, rollout):
        return -(logprobs * rollout.fmask)

    def detached(logprobs, rollout):
        return -(logprobs.detach() * rollout.fmask).sum()

    def as_float(logprobs, rollout):
        return float(logprobs.sum())

    def raises(logprobs, rollout):
        return rollout.missing_field

    NOT_A_FUNCTION = 3
    """
)


@pytest.fixture
def losses(tmp_path):
    path = tmp_path / "mylosses.py"
    path.write_text(LOSSES)
    return path


def run_cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_every_registered_command_is_built():
    parser = build_parser()
    choices = parser._subparsers._group_actions[0].choices
    assert set(COMMANDS) == set(choices)


def test_list_shows_builtins_with_sources(capsys):
    code, out, _ = run_cli(["list"], capsys)
    assert code == 0
    for name in ("grpo", "dr_grpo", "dapo", "gspo", "cispo", "rloo", "reinforce_pp"):
        assert name in out
    assert "arXiv:2503.14476" in out


def test_check_exit_codes(capsys):
    assert run_cli(["check", "dr_grpo", "--regime", "on", *FAST], capsys)[0] == 0
    assert run_cli(["check", "grpo", "--regime", "on", *FAST], capsys)[0] == 1


def test_check_json_schema(capsys):
    code, out, _ = run_cli(["check", "grpo", "--json", *FAST], capsys)
    assert code == 1
    data = json.loads(out)
    assert data["objective"] == "grpo"
    assert set(data["mechanisms"]) == {"M2", "M3"}
    for name, entry in data["properties"].items():
        assert {"holds", "counterexample", "max_residual", "examples"} <= set(entry)
    cx = data["properties"]["shared_cancellation"]["counterexample"]
    assert not data["properties"]["shared_cancellation"]["holds"] and cx["rollout"]["tokens"]
    assert data["properties"]["finite"]["counterexample"] is None


def test_check_user_file_and_module(losses, capsys, monkeypatch):
    code, out, _ = run_cli(["check", f"{losses}:token_mean_pg", "--regime", "on", *FAST], capsys)
    assert code == 0, out
    monkeypatch.syspath_prepend(str(losses.parent))
    code, out, _ = run_cli(["check", "mylosses:token_mean_pg", "--regime", "on", *FAST], capsys)
    assert code == 0, out


def test_param_override_changes_the_verdict(capsys):
    # grpo with a constant normaliser is exchangeable on-policy (T5)
    code, _, _ = run_cli(["check", "grpo", "--param", "loss_agg_mode=token-mean", "--regime", "on", *FAST], capsys)
    assert code == 0


BAD = [
    (["check", "no_such_objective"], "not a built-in"),
    (["check", "grpo+no_such_transform"], "transform"),
    (["check", "grpo", "--param", "eps_low"], "KEY=VALUE"),
    (["check", "grpo", "--param", "nope=1"], "has no parameter"),
    (["check", "grpo", "--param", "eps_low=abc"], "not a valid float"),
    (["check", "missing_dir/missing.py:fn"], "does not exist"),
    (["check", "{syntax}:fn"], "failed to import"),
    (["check", "{file}:nope"], "has no attribute"),
    (["check", "{file}:NOT_A_FUNCTION"], "not a function"),
    (["check", "no_such_module_xyz:fn"], "cannot be imported"),
    (["check", "{file}:per_token"], "not a scalar"),
    (["check", "{file}:detached"], "no gradient path"),
    (["check", "{file}:as_float"], "not a torch.Tensor"),
    (["check", "{file}:raises"], "raised AttributeError"),
    (["check", "dapo", "--max-examples", "0"], "max_examples=0"),
    (["check", "dapo", "--max-examples", "-3"], "max_examples=-3"),
    (["check", "dapo", "--seed", "-1"], "seed=-1"),
    (["check", "dapo", "--property", "nope"], "property='nope'"),
    (["check", "{file}:token_mean_pg", "--param", "a=1"], "takes no parameter 'a'"),
    (["audit", "--max-examples", "0"], "must be >= 1"),
    (["audit", "nope"], "not a built-in"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_one_precise_line(argv, message, losses, tmp_path, capsys):
    syntax = tmp_path / "broken.py"
    syntax.write_text("def f(:\n")
    argv = [a.format(file=losses, syntax=syntax) for a in argv]
    code, out, err = run_cli(argv, capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_check_needs_exactly_one_of_target_and_trl_config(capsys):
    assert main(["check"]) == 2
    assert "exactly one" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["check", "grpo", "--regime", "sideways"], ["nope"]])
def test_argparse_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
def test_module_entry_point_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "exchange", "check", "no_such_objective"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "not a built-in" in proc.stderr


@pytest.mark.parametrize(
    "old, new",
    [
        (["credit", "--objective", "grpo,rloo", "--env", "parity", "--G", "2", "--events", "0"],
         ["credit", "grpo", "rloo", "--env", "parity", "-G", "2", "--events", "0"]),
        (["audit", "--objectives", "rloo", "--format", "json", "--max-examples", "1"],
         ["audit", "rloo", "--json", "--max-examples", "1"]),
        (["derive", "grpo", "--G", "2", "--json"], ["derive", "grpo", "--group-size", "2", "--json"]),
    ],
)
@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
def test_old_spellings_still_work_and_say_what_replaces_them(capsys, old, new):
    """One CLI vocabulary (TARGET, --json, -G/--group-size); the old spellings keep working
    for one release with a deprecation line on stderr, and give the same output."""
    assert main(new) == 0
    fresh = capsys.readouterr()
    assert "deprecated" not in fresh.err
    assert main(old) == 0
    legacy = capsys.readouterr()
    assert legacy.out.split() == fresh.out.split()  # rich may wrap differently
    assert "deprecated" in legacy.err and "removed in 0.3" in legacy.err
