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
