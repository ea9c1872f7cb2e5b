"""Version gates, parameter parsing and target parsing (no library needed)."""

from __future__ import annotations

import pytest

from exchange.libraries import LIBRARIES, LibraryError, resolve, unavailable_reason
from exchange.libraries import versions as _support
from exchange.errors import InvalidArgument


def test_missing_library_names_the_install_command(monkeypatch):
    monkeypatch.setattr(_support, "installed_version", lambda library: None)
    with pytest.raises(LibraryError, match=r"pip install -e '\.\[trl\]'"):
        resolve("trl:grpo")
    assert "not installed" in unavailable_reason("verl")


def test_other_version_is_refused(monkeypatch):
    monkeypatch.setattr(_support, "installed_version", lambda library: "0.0.1")
    with pytest.raises(LibraryError, match=r"version=0\.0\.1 is not supported.*verl==0\.9\.1"):
        resolve("verl:vanilla/token-mean")


@pytest.mark.parametrize("target", ["grpo", "torch:grpo", "trl:", "trl"])
def test_bad_target_lists_the_libraries(target):
    with pytest.raises(InvalidArgument, match="LIBRARY:LOSS"):
        resolve(target)


def test_parse_params_coerces_to_the_default_type():
    defaults = {"eps": 0.2, "n": 3, "flag": False, "cap": None, "mode": "token"}
    got = _support.parse_params("t", {"eps": "0.3", "n": "4", "flag": "true", "cap": "none", "mode": "seq"}, defaults)
    assert got == {"eps": 0.3, "n": 4, "flag": True, "cap": None, "mode": "seq"}
    assert _support.parse_params("t", {"cap": "5"}, defaults)["cap"] == 5.0
    with pytest.raises(InvalidArgument, match="eps='x' is not a valid float"):
        _support.parse_params("t", {"eps": "x"}, defaults)
    with pytest.raises(InvalidArgument, match="no parameter bogus='1'.*eps"):
        _support.parse_params("t", {"bogus": "1"}, defaults)


def test_every_library_has_a_supported_version_and_install_hint():
    assert set(_support.SUPPORTED) == set(LIBRARIES) == set(_support.INSTALL)


def test_skyrl_is_looked_up_by_its_distribution_name(monkeypatch):
    """The target prefix is ``skyrl``; pip knows the wheel as ``skyrl-train``."""
    import importlib.metadata

    asked = []

    def version(name):
        asked.append(name)
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    reason = unavailable_reason("skyrl")
    assert asked == ["skyrl-train"]
    assert "--ignore-requires-python" in reason and "skyrl-train==0.3.1" in reason
