"""Report API and JSON: what other tools rely on."""

import json

import pytest

from exchange import InvalidArgument, Rollout, check, token_coefficients
from exchange.objectives import get


@pytest.fixture(scope="module")
def grpo_report():
    return check(get("grpo").bind(), max_examples=5, seed=0)


def test_holds_and_regimes(grpo_report):
    assert not grpo_report.holds("exchangeable")
    assert not grpo_report.holds("exchangeable", "on_policy")
    assert grpo_report.holds("finite")
    assert grpo_report.mechanisms == ["M2", "M3"]
    assert grpo_report.mechanisms_in("on_policy") == ["M3"]
    with pytest.raises(InvalidArgument, match="was not checked"):
        grpo_report.holds("nope")
    with pytest.raises(InvalidArgument, match="regime"):
        grpo_report.holds("finite", "sideways")


def test_counterexample_reproduces(grpo_report):
    cx = grpo_report.counterexample("shared_cancellation")
    assert isinstance(cx, Rollout) and cx.logprobs is not None
    kappa = token_coefficients(get("grpo").bind(), cx.logprobs, cx)
    assert torch_close(kappa, grpo_report.result("shared_cancellation", "on_policy").kappa)
    assert grpo_report.counterexample("finite") is None


def torch_close(a, b):
    import torch

    return torch.allclose(a, b, rtol=1e-12, atol=1e-15)


def test_json_round_trip(grpo_report):
    data = json.loads(grpo_report.to_json())
    assert data["objective"] == "grpo"
    entry = data["properties"]["exchangeable"]
    assert entry["holds"] is False and entry["regimes"]["on_policy"]["holds"] is False
    cx = Rollout.from_dict(entry["counterexample"]["rollout"])
    assert cx.n == grpo_report.counterexample("exchangeable").n
    assert entry["theorems"], "every verdict names its theorems"
    assert "reproduce" in data and "--seed 0" in data["reproduce"]


def test_text_report_lists_every_mismatch(grpo_report):
    text = str(grpo_report)
    assert "BROKEN" in text and "M3" in text and "K_e=" in text and "reproduce:" in text


def test_check_argument_errors():
    fn = get("dapo").bind()
    with pytest.raises(InvalidArgument, match="max_examples"):
        check(fn, max_examples=0)
    with pytest.raises(InvalidArgument, match="regimes"):
        check(fn, regimes=("sideways",))
    with pytest.raises(InvalidArgument, match="not callable"):
        check(3)
    with pytest.raises(InvalidArgument, match="property"):
        check(fn, properties=["nope"])


def test_regularizer_channel_is_reported_apart():
    def kl(lp, r):  # k3 KL to the reference: reward-independent, event-consistent
        d = r.ref_logprobs - lp
        return ((d.exp() - d - 1) * r.fmask).sum() / r.fmask.sum()

    report = check(get("dapo").bind(), max_examples=3, regimes="on_policy", regularizer=kl)
    assert report.regularizer.max_abs > 0
    assert report.regularizer.event_consistent and report.regularizer.reward_independent
    assert report.holds("shared_cancellation")  # the KL is not mixed into the verdict


def test_json_report_is_versioned_and_strategy_errors_are_hypothesis_errors():
    import json

    import hypothesis.errors

    from exchange import check
    from exchange.checker.report import REPORT_SCHEMA
    from exchange.errors import InvalidArgument

    def pg(lp, r):
        a = r.rewards - r.group_mean(r.rewards)
        return -(a[:, None] * lp * r.fmask).sum()

    report = check(pg, properties=["zero_sum"], max_examples=2, regimes="on_policy")
    data = json.loads(report.to_json())
    assert data["schema"] == REPORT_SCHEMA == 1
    assert data["precision"] == "float64"
    # The strategies raise into Hypothesis: there (and only there) the error is both.
    from exchange import strategies

    with pytest.raises(hypothesis.errors.InvalidArgument, match="min_size=1"):
        strategies.group_configs(min_size=1).example()
    with pytest.raises(InvalidArgument, match="min_size=1"):
        strategies.group_configs(min_size=1).example()
    assert not issubclass(InvalidArgument, TypeError)  # exchange's own error is a ValueError only


def test_results_are_keyed_like_result_takes_its_arguments():
    """One order everywhere: (property name, regime)."""
    from exchange.objectives import resolve

    report = check(resolve("dr_grpo"), properties=("zero_sum",), max_examples=2, regimes=("on_policy",))
    assert set(report.results) == {("zero_sum", "on_policy")}
    assert report.result("zero_sum", "on_policy") is report.results[("zero_sum", "on_policy")]
