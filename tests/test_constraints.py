"""constraints.txt pins the tested stack: a fresh install must reproduce it.

An unpinned extra let a fresh CI install pull transformers 5.24, whose renamed cache
argument slipped past the grammar guard (tests/lab/test_llm.py). Every requirement of
pyproject.toml must be pinned, and CI, which installs with ``-c constraints.txt``, must
end up with exactly the pinned versions.
"""

import os
import re
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for n, line in enumerate((REPO / "constraints.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.!+]*)", line)
        assert m, f"constraints.txt line {n}: {line!r} is not NAME==VERSION"
        assert _canonical(m[1]) not in pins, f"constraints.txt line {n}: {m[1]} is pinned twice"
        pins[_canonical(m[1])] = m[2]
    return pins


def _requirements() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return {_canonical(re.match(r"[A-Za-z0-9._-]+", r)[0]) for r in reqs}


def _no_deps_installs() -> set[str]:
    """The packages .ci/run installs one by one (``pip install -q NAME==VERSION ...``)."""
    text = (REPO / ".ci" / "run").read_text()
    return {_canonical(m) for m in re.findall(r"pip install -q ([A-Za-z0-9._-]+)==", text)}


def test_every_requirement_and_ci_install_is_pinned():
    pins = _pins()
    missing = sorted((_requirements() | _no_deps_installs()) - set(pins))
    assert not missing, f"constraints.txt pins none of {missing}: add NAME==VERSION for the tested version"
    assert "torch" in pins and pins["torch"] == "2.13.0"


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="only CI must install exactly the pinned stack")
def test_ci_installed_the_pinned_versions():
    wrong = []
    for name, version in _pins().items():
        try:
            got = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name}: not installed (pinned {version})")
            continue
        if got.split("+", 1)[0] != version.split("+", 1)[0]:
            wrong.append(f"{name}: {got} installed, {version} pinned")
    assert not wrong, "CI's install differs from constraints.txt: " + "; ".join(wrong)
