"""``exchange measure``: the CLI runs the library functions and reports their numbers."""

import json

import pytest

from exchange.cli import main


def _json(capsys, *argv):
    assert main(["measure", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_exchangeable_vs_breaking(capsys):
    dr = _json(capsys, "dr_grpo", "--seed", "1")
    gr = _json(capsys, "grpo", "--seed", "1")
    assert dr["rollout"] == gr["rollout"]  # same seed, same rollout
    assert dr["learning_tax"]["n_shared_events"] > 0
    assert dr["learning_tax"]["shared_tax"] < 1e-10 and dr["max_abs_shared_K"] < 1e-12
    assert gr["learning_tax"]["shared_tax"] > 1e-3 and gr["max_abs_shared_K"] > 1e-4
    kl = gr["kl"]
    ratios = [m / p for m, p in zip(kl["measured"], kl["predicted"])]
    assert abs(ratios[-1] - 1) < abs(ratios[0] - 1) and abs(ratios[-1] - 1) < 0.05


def test_tables_and_similarity(capsys):
    assert main(["measure", "dapo", "--param", "eps_high=0.3", "--similarity", "--weak", "3", "-G", "3"]) == 0
    out = capsys.readouterr().out
    for title in ("Learning tax", "Token space", "Prop. 3.1", "gradient cosines"):
        assert title in out


def test_hf_model(capsys):
    pytest.importorskip("transformers")
    out = _json(capsys, "--model", "llama", "--vocab", "32", "dr_grpo")
    assert out["learning_tax"]["shared_tax"] < 1e-6  # float32 RMSNorm inside HF models


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--param", "nope"], "--param 'nope' is not KEY=VALUE"),
        (["--param", "foo=1"], "no parameter foo"),
        (["--vocab", "2"], "--vocab=2"),
        (["-G", "1"], "G=1"),
    ],
)
def test_usage_errors_exit_2(capsys, argv, message):
    assert main(["measure", *argv]) == 2
    assert message in capsys.readouterr().err
