"""Shared plumbing of the library adapters: version gates, ``--param`` parsing, the
named ``loss_fn`` each adapter returns and the expected verdict of a set of mechanisms.

The adapters call private pieces of TRL / verl / OpenRLHF whose shape changes between
releases, so each library is pinned to the version whose code the audit was written
against (../shared/reference/rl-libraries.md). A missing or different version raises
:class:`LibraryError` naming the installed version and the install command.
"""

from __future__ import annotations

import functools
import importlib.metadata
from typing import Any, Callable, Mapping

from exchange.errors import ExchangeError
from exchange.objectives.objective import override_params

__all__ = ["LibraryError", "SUPPORTED", "DISTRIBUTIONS", "INSTALL", "installed_version", "require", "parse_params", "library_loss"]

# The one version of each library whose loss code the adapters drive.
SUPPORTED: dict[str, str] = {
    "trl": "1.16.0",
    "verl": "0.9.1",
    "openrlhf": "0.11.2",
    "skyrl": "0.3.1",
    "areal": "1.0.4",
    "art": "0.5.18",
}

# The distribution (pip) name where it differs from the adapter's library name.
DISTRIBUTIONS: dict[str, str] = {"skyrl": "skyrl-train", "art": "openpipe-art"}

INSTALL: dict[str, str] = {
    "trl": "pip install -e '.[trl]'   (or: pip install trl==1.16.0)",
    "verl": (
        "pip install -e '.[verl]'   (or: pip install verl==0.9.1 --no-deps && pip install "
        "packaging numpy ray 'tensordict<=0.10.0' omegaconf transformers codetiming)"
    ),
    "openrlhf": "pip install openrlhf==0.11.2 --no-deps   (only loss.py is loaded; its CUDA deps are not needed)",
    "skyrl": (
        "pip install skyrl-train==0.3.1 --no-deps --ignore-requires-python   (only "
        "skyrl_train/utils/ppo_utils.py is loaded; it runs on Python 3.11)"
    ),
    "areal": "pip install areal==1.0.4 --no-deps   (only areal/utils/functional/functional.py and its Normalization are loaded)",
    "art": "pip install openpipe-art==0.5.18 --no-deps   (only art/loss.py and art/preprocessing/{tokenize,pack}.py are loaded)",
}


class LibraryError(ExchangeError):
    """A training library is missing, or installed at a version the adapters do not drive."""


def installed_version(library: str) -> str | None:
    """The installed distribution version of ``library``, or None."""
    try:
        return importlib.metadata.version(DISTRIBUTIONS.get(library, library))
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


def parse_params(target: str, params: Mapping[str, Any] | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` updated with ``params`` for library ``target`` (the catalog's parser)."""
    return override_params(f"target={target!r}", defaults, params)


def library_loss(target: str, options: Mapping[str, Any], loss: Callable[..., Any], /, *,
                 precision: str | None = None, **bound: Any) -> Callable[..., Any]:
    """``loss`` with ``bound`` as the ``loss_fn(logprobs, rollout)`` of library ``target``
    (positional-only parameters, so ``bound`` may hold ``options=`` or ``loss=``):
    named ``target``, with its parsed ``params`` and, where the library's own arithmetic
    runs coarser than the float64 it is fed, its ``exchange_precision`` (THEORY.md
    section 4, precision rule)."""
    fn = functools.partial(loss, **bound)
    fn.__name__ = target  # type: ignore[attr-defined]
    fn.params = options  # type: ignore[attr-defined]
    if precision is not None:
        fn.exchange_precision = precision  # type: ignore[attr-defined]
    return fn
