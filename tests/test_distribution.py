"""The distribution is ``token-exchangeability`` (``exchange`` on PyPI is an unrelated
package), the import package and the command stay ``exchange``; the version is written
once (``exchange.core.distribution.VERSION``, which ``exchange.__version__`` is), and CHANGELOG.md has a section for it.
"""

from __future__ import annotations

import os
import re
from datetime import date
from importlib import metadata
from pathlib import Path

import pytest

import exchange
from exchange.core.distribution import DISTRIBUTION, VERSION, installed_version

REPO = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _installed() -> str:
    """The installed version; skip (locally) or fail (CI=true) when the tree is not installed."""
    version = installed_version()
    if version is None:
        reason = f"{DISTRIBUTION} is not installed (pip install -e . --no-deps -c constraints.txt)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    return version


def test_version_is_major_minor_patch():
    assert re.fullmatch(r"\d+\.\d+\.\d+", exchange.__version__), exchange.__version__


def test_pyproject_names_the_distribution_and_takes_the_packages_version():
    data = _project()
    project = data["project"]
    assert project["name"] == DISTRIBUTION
    if "version" in project:  # a literal must be the package's
        assert project["version"] == exchange.__version__
    else:  # or read from it, the one place it is written
        assert "version" in project["dynamic"]
        assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "exchange.core.distribution.VERSION"}
        assert exchange.__version__ == VERSION
    # the command and the import package keep the name exchange
    assert project["scripts"] == {"exchange": "exchange.cli:main"}


def test_installed_metadata_is_this_version_and_owns_the_package_and_the_command():
    assert _installed() == exchange.__version__
    assert DISTRIBUTION in set(metadata.packages_distributions().get("exchange", []))
    scripts = metadata.distribution(DISTRIBUTION).entry_points.select(group="console_scripts")
    assert {(ep.name, ep.value) for ep in scripts} == {("exchange", "exchange.cli:main")}


def test_the_run_environment_records_the_installed_version():
    from exchange.lab.runlog import environment

    assert environment()["exchange"] == _installed()


# ---------------------------------------------------------------- CHANGELOG.md

SUBSECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")  # Keep a Changelog 1.1.0


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _releases(text: str) -> list[tuple[str, str, str]]:
    """``(version, date, body)`` for every ``## [X.Y.Z] - YYYY-MM-DD`` section, in order."""
    parts = re.split(r"^## ", text, flags=re.M)
    out = []
    for part in parts[1:]:
        heading, _, body = part.partition("\n")
        m = re.fullmatch(r"\[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})", heading.strip())
        if m:
            out.append((m[1], m[2], body))
    return out


def test_changelog_follows_the_heading_form():
    text = (REPO / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    level2 = re.findall(r"^## (.*)$", text, flags=re.M)
    assert level2[0] == "[Unreleased]", "the first section is ## [Unreleased]"
    bad = [h for h in level2[1:] if not re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", h)]
    assert not bad, f"release headings must read '## [X.Y.Z] - YYYY-MM-DD': {bad}"
    releases = _releases(text)
    versions = [v for v, _, _ in releases]
    assert versions == sorted(versions, key=_version_key, reverse=True) and len(set(versions)) == len(versions)
    dates = [date.fromisoformat(d) for _, d, _ in releases]
    assert dates == sorted(dates, reverse=True), "newest release first"
    level3 = re.findall(r"^### (.*)$", text, flags=re.M)
    assert set(level3) <= set(SUBSECTIONS), f"subsections are {SUBSECTIONS}: {sorted(set(level3) - set(SUBSECTIONS))}"
    for version, _, body in releases:
        assert re.search(r"^- ", body, flags=re.M), f"## [{version}] lists no change"


def test_changelog_has_a_section_for_this_version():
    releases = {v: body for v, _, body in _releases((REPO / "CHANGELOG.md").read_text())}
    assert exchange.__version__ in releases, (
        f"CHANGELOG.md has no '## [{exchange.__version__}] - YYYY-MM-DD' section for exchange.__version__")
