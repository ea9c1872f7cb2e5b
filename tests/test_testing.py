"""assert_holds and the pytest plugin, as a user's suite would use them."""

import pytest

from exchange.objectives import get
from exchange.testing import assert_holds

pytest_plugins = ["pytester"]


def test_assert_holds_passes_and_returns_the_report():
    report = assert_holds(get("rloo").bind(), "shared_cancellation", max_examples=5)
    assert report.holds("shared_cancellation")


def test_assert_holds_message_is_the_readable_report():
    with pytest.raises(AssertionError) as err:
        assert_holds(get("grpo").bind(), "shared_cancellation", max_examples=5, regimes="on_policy")
    text = str(err.value)
    assert "shared_cancellation" in text and "BROKEN" in text and "probe suffix_length" in text
    assert "reproduce: exchange check grpo" in text


def test_pytest_plugin_fixture(pytester):
    pytester.makepyfile(
        """
        from exchange.objectives import get

        def test_good(exchange_assert):
            exchange_assert(get("dr_grpo").bind(), "shared_cancellation", regimes="on_policy")

        def test_bad(exchange_assert):
            exchange_assert(get("grpo").bind(), "shared_cancellation", regimes="on_policy")
        """
    )
    # Installed (pip install -e .), the pytest11 entry point loads the plugin by itself;
    # from a bare checkout it must be named. Loading it twice is an error.
    from importlib.metadata import entry_points

    installed = any(ep.value == "exchange.pytest_plugin" for ep in entry_points(group="pytest11"))
    args = [] if installed else ["-p", "exchange.pytest_plugin"]
    result = pytester.runpytest(*args, "--exchange-max-examples", "3")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*shared_cancellation*BROKEN*"])


def test_plugin_fixture_repr_and_hidden_frames(pytester):
    """A failing check shows the user's own line, not the library's frames: the
    traceback pytest prints has no frame inside exchange/testing.py or the plugin."""
    from exchange.pytest_plugin import ExchangeAssert

    assert repr(ExchangeAssert(7, 1)) == "<exchange_assert max_examples=7 seed=1>"
    pytester.makepyfile(
        """
        from exchange.objectives import get
        from exchange.testing import assert_holds

        def test_fixture(exchange_assert):
            exchange_assert(get("grpo").bind(), "shared_cancellation", regimes="on_policy")

        def test_function():
            assert_holds(get("grpo").bind(), "shared_cancellation", max_examples=3, regimes="on_policy")
        """
    )
    from importlib.metadata import entry_points

    installed = any(ep.value == "exchange.pytest_plugin" for ep in entry_points(group="pytest11"))
    args = [] if installed else ["-p", "exchange.pytest_plugin"]
    result = pytester.runpytest(*args, "--exchange-max-examples", "3", "--tb=long")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "exchange_assert(get(" in out and "assert_holds(get(" in out  # the user's lines are shown
    assert "exchange/testing.py:" not in out and "exchange/pytest_plugin.py:" not in out, out


def test_reproduce_line_of_a_user_function_is_a_valid_target(tmp_path, monkeypatch):
    import importlib.util

    from exchange import check
    from exchange.targets import resolve_target

    path = tmp_path / "user_losses17.py"
    path.write_text(
        "def broken_loss(lp, r):\n"
        "    return -(r.rewards[:, None] * lp * r.fmask).sum()\n"
    )
    spec = importlib.util.spec_from_file_location("user_losses17", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(tmp_path)
    report = check(module.broken_loss, properties=["zero_sum"], max_examples=3, regimes="on_policy")
    line = report.reproduce
    assert line.startswith("exchange check user_losses17.py:broken_loss --regime on "), line
    resolve_target(line.split()[2])  # resolves


def test_rollout_repr_is_a_pasteable_constructor():
    import torch

    from exchange import Rollout
    from exchange.checker.cases import Case, GroupConfig, build

    r = build(Case(groups=(GroupConfig(((1, 2), (1, 3)), (1.0, 0.0)),)))
    again = eval(repr(r), {"Rollout": Rollout, "torch": torch})
    assert torch.equal(again.rewards, r.rewards) and torch.equal(again.tokens, r.tokens)
