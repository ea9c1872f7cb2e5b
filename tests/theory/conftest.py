"""Shared fixtures for the proof tests: compile the Coq development once per session.

Without coqc the Coq tests skip locally with the reason, but FAIL in CI (``CI=true``):
a CI run that silently skips the proofs would report them as checked.
"""

from __future__ import annotations

import os

import pytest

from exchange.theory.coq import compile_proofs, find_coqc


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_coqc() -> str:
    """Path to coqc, or skip (locally) / fail (CI) with the fix."""
    coqc = find_coqc()
    if coqc is None:
        reason = "coqc not found: install Coq 8.16 (apt-get install -y coq) to check the proofs"
        if in_ci():
            pytest.fail(f"{reason}; CI=true, so a missing prover is a failure, not a skip")
        pytest.skip(reason)
    return coqc


@pytest.fixture(scope="session")
def statuses():
    """One TheoremStatus per registered theorem, after `make -C proofs`."""
    require_coqc()
    return {s.key: s for s in compile_proofs()}


@pytest.fixture
def coqc() -> str:
    """coqc's path; skips locally / fails in CI when Coq is not installed."""
    return require_coqc()
