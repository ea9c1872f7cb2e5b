"""Shared plumbing of the library adapters: version gates, ``--param`` parsing and the
expected verdict of a set of mechanisms.

The adapters call private pieces of TRL / verl / OpenRLHF whose shape changes between
releases, so each library is pinned to the version whose code the audit was written
against (../shared/reference/rl-libraries.md). A missing or different version raises
:class:`LibraryError` naming the installed version and the install command.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any, Mapping

from exchange.errors import ExchangeError, InvalidArgument
from exchange.objectives._spec import Expected

__all__ = ["LibraryError", "SUPPORTED", "INSTALL", "installed_version", "require", "parse_params",
           "MECHANISM_BREAKS", "verdict_of"]

# The one version of each library whose loss code the adapters drive.
SUPPORTED: dict[str, str] = {"trl": "1.16.0", "verl": "0.9.1", "openrlhf": "0.11.2"}

INSTALL: dict[str, str] = {
    "trl": "pip install -e '.[trl]'   (or: pip install trl==1.16.0)",
    "verl": (
        "pip install -e '.[verl]'   (or: pip install verl==0.9.1 --no-deps && pip install "
        "packaging numpy ray 'tensordict<=0.10.0' omegaconf transformers codetiming)"
    ),
    "openrlhf": "pip install openrlhf==0.11.2 --no-deps   (only loss.py is loaded; its CUDA deps are not needed)",
}


class LibraryError(ExchangeError):
    """A training library is missing, or installed at a version the adapters do not drive."""


def installed_version(library: str) -> str | None:
    """The installed distribution version of ``library``, or None."""
    try:
        return importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return None


def require(library: str) -> str:
    """Check that ``library`` is installed at the supported version; return that version."""
    want = SUPPORTED[library]
    have = installed_version(library)
    if have is None:
        raise LibraryError(f"library={library!r} is not installed; install it with: {INSTALL[library]}")
    if have != want:
        raise LibraryError(
            f"library={library!r} version={have} is not supported: the adapter drives the private loss code "
            f"of {library}=={want} only. Install it with: {INSTALL[library]}"
        )
    return have


def _coerce(target: str, key: str, value: Any, default: Any) -> Any:
    """Parse a CLI string to the type of ``default`` (``None`` defaults accept ``none`` or a float)."""
    if not isinstance(value, str):
        return value
    low = value.strip().lower()
    try:
        if isinstance(default, bool):
            if low in ("1", "true", "yes"):
                return True
            if low in ("0", "false", "no"):
                return False
            raise ValueError(value)
        if default is None:
            return None if low in ("none", "null", "") else float(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        kind = "float or none" if default is None else type(default).__name__
        raise InvalidArgument(f"target={target!r}: {key}={value!r} is not a valid {kind}.") from None
    return value


def parse_params(target: str, params: Mapping[str, Any] | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` updated with ``params`` (strings coerced); unknown keys raise InvalidArgument."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise InvalidArgument(
            f"target={target!r} has no parameter {unknown[0]}={params[unknown[0]]!r}; "
            f"its parameters are: {', '.join(sorted(defaults))}."
        )
    out = dict(defaults)
    for key, value in params.items():
        out[key] = _coerce(target, key, value, defaults[key])
    return out


# What any of M1-M5 breaks (M4 also breaks zero-sum).
MECHANISM_BREAKS = ("exchangeable", "shared_cancellation")


def verdict_of(mechanisms: set[str]) -> Expected:
    """The expected verdict when ``mechanisms`` act: none break nothing; any breaks (E) and
    (C); M4 also breaks (Z)."""
    breaks: tuple[str, ...] = MECHANISM_BREAKS if mechanisms else ()
    if "M4" in mechanisms:
        breaks = ("zero_sum", *MECHANISM_BREAKS)
    return Expected.of(breaks, tuple(sorted(mechanisms)))
