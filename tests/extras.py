"""Which packages each extra installs, and which extras this run installed: the one mapping.

An extra's packages are read, never listed by hand, from two places:

- pyproject.toml's ``[project.optional-dependencies]``, and
- the single-package installs of ``.ci/run`` (``pip install -q NAME==VERSION ...``, most with
  ``--no-deps``). Such an install belongs to the extra of the same name (``verl==0.9.1
  --no-deps`` completes the ``verl`` extra, as its comment in pyproject.toml says); the
  others (openrlhf, skyrl-train, areal, openpipe-art) belong to no extra and are installed
  only by the full install.

``EXCHANGE_EXTRAS`` (environment variable) names the extras a partial install installed,
comma-separated, e.g. ``EXCHANGE_EXTRAS=dev,trl`` after ``pip install -e ".[dev,trl]"``, or
``EXCHANGE_EXTRAS=dev,verl`` after ``pip install -e ".[dev,verl]"`` plus ``python
tests/extras.py installs dev,verl``'s lines. Unset (or empty), the run is the full
install of ``.ci/run``: every extra and every single-package install. It matters only under
``CI=true``, where a missing piece fails instead of skipping: then what the named extras
install must be there (tests/test_ci_environment.py, tests/test_constraints.py and the
``need``/``need_module`` helpers of tests/conftest.py fail for it), and what they leave
out skips with the reason, as it does outside CI.

``python tests/extras.py installs EXTRAS`` prints the pip arguments of the ``.ci/run``
single-package installs that belong to EXTRAS, one install per line (``.ci/run``'s
partial-extras step installs them).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = "EXCHANGE_EXTRAS"

# A line of .ci/run installing one pinned package: `pip install -q NAME==VERSION ARGS`.
_CI_INSTALL = re.compile(r"^\s*pip install -q (([A-Za-z0-9._-]+)==\S+.*?)\s*$", re.M)


def canonical(name: str) -> str:
    """PEP 503 name: ``Skyrl_Train`` -> ``skyrl-train``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return canonical(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)[1])


@functools.lru_cache(maxsize=None)
def project() -> dict:
    import tomllib  # Python >= 3.11, as pyproject.toml requires

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def optional_dependencies() -> dict[str, list[str]]:
    """pyproject.toml's extras: name -> requirement strings."""
    return dict(project()["optional-dependencies"])


@functools.lru_cache(maxsize=None)
def ci_installs() -> dict[str, tuple[str | None, str]]:
    """``.ci/run``'s single-package installs: canonical name -> (its extra or None, pip args),
    e.g. ``"verl": ("verl", "verl==0.9.1 --no-deps -c constraints.txt")``."""
    extras = optional_dependencies()
    found = {}
    for m in _CI_INSTALL.finditer((REPO / ".ci" / "run").read_text()):
        name = canonical(m[2])
        found[name] = (name if name in extras else None, m[1])
    return found


def declared() -> frozenset[str] | None:
    """The extras ``EXCHANGE_EXTRAS`` names, or None (unset or empty: the full install).

    Raises ValueError for a name that is not an extra of pyproject.toml (a typo would
    otherwise turn every check of that extra into a skip)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    names = frozenset(n.strip() for n in raw.split(",") if n.strip())
    unknown = sorted(names - set(optional_dependencies()))
    if unknown:
        raise ValueError(f"{ENV}={raw!r} names {unknown}, not extras of pyproject.toml: "
                         f"use a comma-separated subset of {sorted(optional_dependencies())}")
    return names


def direct_requirements(extras: frozenset[str] | None = None) -> list[str]:
    """The requirement strings the install of ``extras`` (None: every extra) asks for:
    the core dependencies, those of each extra, and the .ci/run installs of those extras
    (all of them for None) as ``NAME``."""
    chosen = set(optional_dependencies()) if extras is None else extras
    reqs = list(project()["dependencies"])
    for extra in sorted(chosen):
        reqs += optional_dependencies()[extra]
    reqs += [name for name, (extra, _) in ci_installs().items() if extras is None or extra in chosen]
    return reqs


def _installed(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def closure(extras: frozenset[str] | None = None) -> frozenset[str]:
    """Canonical names of every distribution the install of ``extras`` brings: the direct
    requirements and, through the installed packages' metadata, theirs (markers evaluated,
    ``pkg[extra]`` followed). A missing package is in it but adds nothing; the .ci/run
    single-package installs (--no-deps) add only themselves."""
    from packaging.requirements import Requirement

    no_deps = {name for name, (_, args) in ci_installs().items() if "--no-deps" in args.split()}
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    todo = [Requirement(r) for r in direct_requirements(extras)]
    while todo:
        req = todo.pop()
        key = (canonical(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        names.add(key[0])
        dist = _installed(req.name)
        if dist is None or key[0] in no_deps:
            continue
        for text in dist.requires or ():
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (*req.extras, "")):
                todo.append(sub)
    return frozenset(names)


def expected(distribution: str) -> bool:
    """Whether this run's install (``EXCHANGE_EXTRAS``, None: the full one) brings
    ``distribution`` (a distribution name; a module name stands for the distribution of
    the same name, as for transformers and tokenizers)."""
    return canonical(distribution) in closure(declared())


def left_out(distribution: str) -> str:
    """Why a missing ``distribution`` is no CI failure, or ``""`` when it must be there
    (the full install expects everything)."""
    extras = declared()
    if extras is None or expected(distribution):
        return ""
    return f"{ENV}={','.join(sorted(extras))} leaves it out"


def _main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "installs":
        print(__doc__.split("\n\n")[-1].strip(), file=sys.stderr)
        return 2
    os.environ[ENV] = argv[1]
    extras = declared()
    if extras is None:
        print("installs: name the extras, e.g. dev,verl", file=sys.stderr)
        return 2
    for extra, args in ci_installs().values():
        if extra in extras:
            print(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
