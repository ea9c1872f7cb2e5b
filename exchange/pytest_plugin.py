"""pytest plugin (entry point ``pytest11: exchange``): the ``exchange_assert`` fixture.

    def test_my_loss(exchange_assert):
        exchange_assert(my_loss, "shared_cancellation")

Options: ``--exchange-max-examples N`` (default 100) and ``--exchange-seed S`` (default 0)
set the defaults of every call; keyword arguments to the fixture override them.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("exchange", "exchangeability checks")
    group.addoption("--exchange-max-examples", type=int, default=100, help="fuzzed configurations per property and regime (at least; generated in bulk).")
    group.addoption("--exchange-seed", type=int, default=0, help="seed of the exchange checker's fuzzing.")


@pytest.fixture
def exchange_assert(request: pytest.FixtureRequest):
    """``exchange_assert(loss_fn, *properties, **check_kwargs) -> Report``; raises
    AssertionError with the readable report when a property is broken."""
    return ExchangeAssert(
        request.config.getoption("--exchange-max-examples"),
        request.config.getoption("--exchange-seed"),
    )


class ExchangeAssert:
    """The ``exchange_assert`` fixture: ``exchange_assert(loss_fn, *properties, **check_kwargs)``."""

    def __init__(self, max_examples: int, seed: int) -> None:
        self.max_examples = max_examples
        self.seed = seed

    def __call__(self, loss_fn, *properties, **kwargs):
        __tracebackhide__ = True  # failures point at the user's test line
        from exchange.testing import assert_holds

        kwargs.setdefault("max_examples", self.max_examples)
        kwargs.setdefault("seed", self.seed)
        return assert_holds(loss_fn, *properties, **kwargs)

    def __repr__(self) -> str:
        return f"<exchange_assert max_examples={self.max_examples} seed={self.seed}>"
