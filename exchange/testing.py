"""Assertions for a user's own test suite.

    from exchange.testing import assert_holds

    def test_my_loss_cancels():
        assert_holds(my_loss, "exchangeable", "shared_cancellation", max_examples=100)

The failure message is the readable report: verdict table, mechanisms, and each broken
property's minimal counterexample with every disagreeing event.
"""

from __future__ import annotations

from typing import Any

from exchange.checker import check
from exchange.core.coefficients import LossFn
from exchange.checker.report import Report

__all__ = ["assert_holds"]


def assert_holds(loss_fn: LossFn, *properties: str, **check_kwargs: Any) -> Report:
    """Run :func:`exchange.check` and raise ``AssertionError`` unless every requested
    property (default: all) holds in every requested regime. Returns the report."""
    __tracebackhide__ = True  # pytest: show the caller's line, not this frame
    report = check(loss_fn, properties=properties or None, **check_kwargs)
    broken = sorted({name for (name, _), res in report.results.items() if not res.holds})
    if broken:
        raise AssertionError(
            f"{report.objective}: {len(broken)} propert{'y' if len(broken) == 1 else 'ies'} broken "
            f"({', '.join(broken)})\n{report}"
        )
    return report
