"""THEORY.md section 4, precision rule: a loss computing exp in float32 holds up to
float32 round-off (detected, or told); a float64 loss keeps the tight tolerances."""

import pytest
import torch

from exchange import check
from exchange.checker.precision import detect_precision
from exchange.errors import InvalidArgument


def _adv(r):
    return r.rewards - r.group_mean(r.rewards)


def float32_exp(lp, r):
    rho = torch.exp(lp.float() - r.old_logprobs.float()).to(lp.dtype)
    return -((_adv(r)[:, None] * rho) * r.fmask).sum() / r.fmask.sum()


def float64_exp(lp, r):
    rho = torch.exp(lp - r.old_logprobs)
    return -((_adv(r)[:, None] * rho) * r.fmask).sum() / r.fmask.sum()


def test_float32_exp_is_detected_and_holds_on_its_twin():
    """The float64 twin holds exactly; the loss stays within float32 round-off of it
    (measured, in JSON): the twin's verdict stands, and the precision named is the loss's."""
    assert detect_precision(float32_exp) == "float32"
    report = check(float32_exp, max_examples=10, seed=0)
    assert report.all_hold, report
    assert report.precision == "float32" and report.precision_detected
    text = str(report)
    assert "residuals at that level are round-off" in text and "BROKEN" not in text
    assert "float64 twin" in text
    res = report.result("zero_sum", "on_policy")
    assert res.max_residual < 1e-12 and 0 < res.round_off_measured < 1e-5
    assert report.to_dict()["properties"]["zero_sum"]["round_off_measured"] == res.round_off_measured
    assert report.mechanisms == []


def test_forcing_float64_reports_the_round_off_as_broken():
    report = check(float32_exp, properties=["zero_sum"], max_examples=10, seed=0, precision="float64")
    assert not report.holds("zero_sum")


def test_float64_loss_keeps_the_tight_tolerances():
    assert detect_precision(float64_exp) == "float64"
    report = check(float64_exp, properties=["zero_sum"], max_examples=5, seed=0)
    assert report.precision == "float64"
    assert report.result("zero_sum", "on_policy").tolerance == 1e-8


def test_precision_is_validated():
    with pytest.raises(InvalidArgument, match="float32"):
        check(float64_exp, precision="fp8")


def test_cli_precision_option(tmp_path, capsys):
    from exchange.cli import main

    path = tmp_path / "f32.py"
    path.write_text(
        "import torch\n"
        "def loss(lp, r):\n"
        "    a = r.rewards - r.group_mean(r.rewards)\n"
        "    rho = torch.exp(lp.float() - r.old_logprobs.float()).to(lp.dtype)\n"
        "    return -((a[:, None] * rho) * r.fmask).sum() / r.fmask.sum()\n"
    )
    assert main(["check", f"{path}:loss", "--max-examples", "3", "--precision", "float32"]) == 0
    out = capsys.readouterr().out
    assert "precision: float32 (as told)" in out


def float32_advantage(lp, r):
    """Rounds the advantage to float32 and then divides in float64: the coefficients are
    no longer float32 values, so detection cannot see the rounding (AReaL's pattern)."""
    adv = ((r.rewards - r.group_mean(r.rewards)) / (r.group_std(r.rewards) + 1e-5)).float().to(lp.dtype)
    return -((adv[:, None] * lp) * r.fmask).sum() / r.fmask.sum() / 3.0


def test_a_loss_can_declare_its_precision():
    assert detect_precision(float32_advantage) == "float64"  # hidden from detection
    float32_advantage.exchange_precision = "float32"
    try:
        report = check(float32_advantage, properties=["zero_sum"], max_examples=10, seed=0)
        assert report.precision == "float32" and not report.precision_detected
        assert report.holds("zero_sum")
        forced = check(float32_advantage, properties=["zero_sum"], max_examples=10, seed=0, precision="float64")
        assert forced.precision == "float64"
    finally:
        del float32_advantage.exchange_precision
