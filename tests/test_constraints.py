"""constraints.txt pins the tested stack: a fresh install must reproduce it.

An unpinned extra let a fresh CI install pull transformers 5.24, whose renamed cache
argument slipped past the grammar guard (tests/lab/test_llm.py). Every requirement of
pyproject.toml must be pinned, and CI, which installs with ``-c constraints.txt``, must
end up with exactly the pinned versions.

A partial-extras CI run sets ``EXCHANGE_EXTRAS`` to the extras it installed (e.g.
``EXCHANGE_EXTRAS=dev,trl``; tests/extras.py defines it and the extras -> packages mapping,
read from pyproject.toml and .ci/run): then the pin check covers what those extras bring
(their requirements and, through the installed metadata, the requirements of those), each
of which must be installed, and every installed pinned package, while the pins of the
other extras may be absent. Unset, every pin must be installed.

``requires-python`` is the floor of the pinned stack: numpy 2.4.6, scipy 1.17.1,
matplotlib 3.11.2, contourpy 1.3.3, hypothesis 6.170.17, transformers 5.24.0 and trl 1.16.0
(among others) declare ``Requires-Python >=3.11``; the test reads each installed pin's
metadata, so it needs no network.
"""

import os
import re
from importlib import metadata
from pathlib import Path

import sys

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests import extras as ex

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
    return set(ex.ci_installs())


def test_every_requirement_and_ci_install_is_pinned():
    pins = _pins()
    missing = sorted((_requirements() | _no_deps_installs()) - set(pins))
    assert not missing, f"constraints.txt pins none of {missing}: add NAME==VERSION for the tested version"
    assert "torch" in pins and pins["torch"] == "2.13.0"


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="only CI must install exactly the pinned stack")
def test_ci_installed_the_pinned_versions():
    extras = ex.declared()
    brought = ex.closure(extras)  # what this run's extras install (all of it when unset)
    wrong = []
    for name, version in _pins().items():
        try:
            got = metadata.version(name)
        except metadata.PackageNotFoundError:
            if extras is None or name in brought:
                wrong.append(f"{name}: not installed (pinned {version})")
            continue
        if got.split("+", 1)[0] != version.split("+", 1)[0]:
            wrong.append(f"{name}: {got} installed, {version} pinned")
    scope = "" if extras is None else f" ({ex.ENV}={','.join(sorted(extras))})"
    assert not wrong, f"CI's install{scope} differs from constraints.txt: " + "; ".join(wrong)


# Extras that build or check the project rather than run it: their tools' Python floors
# bind the docs build only (pymdown-extensions 13.1.2 needs Python >=3.11.5).
TOOLING_EXTRAS = ("docs",)


def _floor(specifiers: str) -> Version | None:
    """The lowest Python a ``Requires-Python`` admits (None: no lower bound)."""
    floors = []
    for spec in SpecifierSet(specifiers):
        if spec.operator in (">=", ">", "~=", "=="):
            floors.append(Version(spec.version.removesuffix(".*")))
    return max(floors, default=None)


def test_requires_python_is_the_floor_of_the_pinned_stack():
    """requires-python is no lower than any pinned package of the install needs (else pip
    would install the package where its pinned stack cannot go) and no higher (it equals
    the highest floor), and this interpreter satisfies it. Read from each installed pin's
    metadata: the packages ``.ci/run`` installs with --ignore-requires-python (skyrl-train,
    whose ``==3.12.*`` its loaded file does not need) and the tooling extras' are left out."""
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    running = Version(".".join(map(str, sys.version_info[:3])))
    assert running in SpecifierSet(requires), f"Python {running} does not satisfy requires-python {requires!r}"
    ignored = {name for name, (_, args) in ex.ci_installs().items() if "--ignore-requires-python" in args.split()}
    runtime = set(ex.optional_dependencies()) - set(TOOLING_EXTRAS)
    full_only = {name for name, (extra, _) in ex.ci_installs().items() if extra is None}
    installed = ex.closure(frozenset(runtime)) | full_only
    floors = {}
    for name in sorted((installed & set(_pins())) - ignored):
        try:
            declared = metadata.distribution(name).metadata.get("Requires-Python")
        except metadata.PackageNotFoundError:
            continue  # an extra this run left out (EXCHANGE_EXTRAS)
        if declared and _floor(declared) is not None:
            floors[name] = _floor(declared)
    ours = _floor(requires)
    above = {n: str(f) for n, f in floors.items() if f > ours}
    assert not above, f"requires-python {requires!r} is below what these pins need: {above}"
    core = {n: f for n, f in floors.items() if n in ex.closure(frozenset())}
    assert ours == max(core.values()), (
        f"requires-python {requires!r} is above what the core dependencies' pins need "
        f"({max(core.values())}: {sorted(n for n, f in core.items() if f == max(core.values()))})")
