"""Library fixtures: skip when a library is absent locally, fail when it is absent in CI.

CI installs trl, verl and openrlhf (see docs/libraries.md), so there a missing library
is an install bug, not a reason to skip.
"""

from __future__ import annotations

import os

import pytest


def need(library: str) -> None:
    """Skip (locally) or fail (CI=true) unless ``library`` is at the supported version."""
    from exchange.adapters import unavailable_reason

    reason = unavailable_reason(library)
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def trl_ready() -> None:
    need("trl")


@pytest.fixture(scope="session")
def verl_ready() -> None:
    need("verl")


@pytest.fixture(scope="session")
def openrlhf_ready() -> None:
    need("openrlhf")
