"""Test-suite configuration: a fixed Hypothesis profile so CI is reproducible.

``ci`` (the default): derandomized, bounded examples, no deadline, no example database.
Select ``HYPOTHESIS_PROFILE=dev`` locally for more, randomized examples.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


import pytest  # noqa: E402
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One process per core (-n auto): torch's own intra-op threads would oversubscribe them.
    torch.set_num_threads(1)


def pytest_runtest_setup(item) -> None:
    """``@pytest.mark.cuda`` tests run where CUDA is present and skip elsewhere (CI has no
    GPU), with the reason."""
    if item.get_closest_marker("cuda") is not None and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: torch.cuda.is_available() is False")


@pytest.fixture(autouse=True)
def _no_leaked_torch_defaults():
    """A test that changes torch's global default dtype would silently change every test
    after it (it did once): restore it and fail the leaking test."""
    yield
    if torch.get_default_dtype() != torch.float32:
        leaked = torch.get_default_dtype()
        torch.set_default_dtype(torch.float32)
        pytest.fail(f"test left torch's default dtype at {leaked}; use explicit dtype= instead")


def _skip_or_fail(distributions: list[str], reason: str) -> None:
    """Skip with ``reason``; under CI=true fail instead, unless the run's extras
    (``EXCHANGE_EXTRAS``, tests/extras.py) deliberately leave every one of the missing
    ``distributions`` out."""
    if os.environ.get("CI") == "true":
        from tests.extras import left_out  # the one mapping, imported as every test module imports it

        whys = [left_out(d) for d in distributions]
        if not all(whys):
            pytest.fail(f"CI=true but {reason}")
        reason = f"{reason} ({whys[0]})"
    pytest.skip(reason)


def need(library: str) -> None:
    """Skip (locally) or fail (CI=true) unless ``library`` is at the supported version:
    CI installs trl, verl and openrlhf, so there a missing library is an install bug
    (except in a partial-extras run whose ``EXCHANGE_EXTRAS`` leaves the library out)."""
    from exchange.libraries import unavailable_reason
    from exchange.libraries.versions import DISTRIBUTIONS

    reason = unavailable_reason(library)
    if reason is not None:
        _skip_or_fail([DISTRIBUTIONS.get(library, library)], reason)


def need_module(*modules: str) -> None:
    """Skip (locally) or fail (CI=true) unless every one of ``modules`` imports: the
    optional LLM stack (transformers, tokenizers) is not in ``pip install -e ".[dev]"``.
    Under CI=true with ``EXCHANGE_EXTRAS``, a module counts as the distribution of its name."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (pip install transformers tokenizers)"
        _skip_or_fail(missing, reason)


@pytest.fixture
def llm_stack_ready() -> None:
    need_module("transformers", "tokenizers")


@pytest.fixture(scope="session")
def trl_ready() -> None:
    need("trl")


@pytest.fixture(scope="session")
def verl_ready() -> None:
    need("verl")


@pytest.fixture(scope="session")
def openrlhf_ready() -> None:
    need("openrlhf")


@pytest.fixture(scope="session")
def skyrl_ready() -> None:
    need("skyrl")


@pytest.fixture(scope="session")
def areal_ready() -> None:
    need("areal")


@pytest.fixture(scope="session")
def art_ready() -> None:
    need("art")
