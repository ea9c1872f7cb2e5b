"""The distribution name, defined once.

The import package and the command are ``exchange``; the distribution (what ``pip``
installs and :mod:`importlib.metadata` knows) is ``token-exchangeability``, because the
name ``exchange`` on PyPI belongs to an unrelated package. Every metadata lookup, install
hint and wheel name uses :data:`DISTRIBUTION`; :data:`VERSION` is the version. Dependency-free: :mod:`importlib.metadata`
is imported only when :func:`installed_version` is called.
"""

from __future__ import annotations

__all__ = ["DISTRIBUTION", "VERSION", "installed_version"]

DISTRIBUTION = "token-exchangeability"
"""The name ``pip install`` and :func:`importlib.metadata.version` take."""

VERSION = "0.2.0"
"""The version, written once: ``exchange.__version__`` and pyproject.toml's dynamic version
read it (CHANGELOG.md has a section for it)."""


def installed_version() -> str | None:
    """The installed distribution's version (its metadata), or ``None`` when the package
    runs from a source tree that was never installed."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
