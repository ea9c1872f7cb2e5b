"""pytest plugin (entry point ``pytest11: exchange``): the ``exchange_assert`` fixture.

    def test_my_loss(exchange_assert):
        exchange_assert(my_loss, "shared_cancellation")

Options: ``--exchange-max-examples N`` (default 100) and ``--exchange-seed S`` (default 0)
set the defaults of every call; keyword arguments to the fixture override them.
"""

from __future__ import annotations

import functools

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("exchange", "exchangeability checks")
    group.addoption("--exchange-max-examples", type=int, default=100, help="Hypothesis examples per property and regime.")
    group.addoption("--exchange-seed", type=int, default=0, help="seed of the exchange checker's fuzzing.")


@pytest.fixture
def exchange_assert(request: pytest.FixtureRequest):
    """``exchange_assert(loss_fn, *properties, **check_kwargs) -> Report``; raises
    AssertionError with the readable report when a property is broken."""
    from exchange.testing import assert_holds

    return functools.partial(
        _with_defaults,
        assert_holds,
        request.config.getoption("--exchange-max-examples"),
        request.config.getoption("--exchange-seed"),
    )


def _with_defaults(assert_holds, max_examples, seed, loss_fn, *properties, **kwargs):
    kwargs.setdefault("max_examples", max_examples)
    kwargs.setdefault("seed", seed)
    return assert_holds(loss_fn, *properties, **kwargs)
