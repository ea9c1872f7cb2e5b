"""The Python side of the record, pinned like Spec.v (issue 43).

What ``exchange proofs`` prints and what ``exchange check`` cites come from Python, not
from Coq: the registry's key -> theorem and key -> witness maps and their one-line prose,
the vocabulary's property/mechanism -> theorem links, the axiom policy (the allow-list
by full name, the modules that may use it), the code link's tolerance, groups, seed and
per-objective factors, and the layout of ``proofs/`` (its roots, the Makefile's hash).
``python_side()`` computes them from the code as it is; ``proofs/spec/pins.json`` is the
reviewed copy, and its sha256 is ``PINS_SHA256`` in ``exchange/theory/registry.py``. A
difference fails ``exchange proofs`` naming the field; recording it is a re-pin
(``--write-statements --accept``, logged in ``proofs/CHANGES`` like a Spec.v change).

It also runs, in the command, the checks that were pytest-only: every registry key is
its theorem's short name and every witness is ``W_``/``F_`` plus it; every theorem
outside ``REAL_MODULES`` is held to "no axiom at all" (``allowed_axioms``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

__all__ = ["PINS_FILE", "pin_problems", "pins_sha256", "python_side", "write_pins"]

PINS_FILE = "spec/pins.json"


def python_side(proof_dir: Path | None = None) -> dict:
    """Everything on the Python side that the record's meaning depends on, as JSON data.

    ``proof_dir``: where the code link's factors may be cached (``_link_factors``)."""
    from exchange.core.vocabulary import MECHANISM_THEOREMS, PROPERTY_THEOREMS
    from exchange.theory import link
    from exchange.theory.axioms import ALLOWED_AXIOMS
    from exchange.theory.coq import REAL_MODULES, allowed_axioms
    from exchange.theory.development import EXPECTED_ROOTS
    from exchange.theory.registry import NO_HYPOTHESES, THEOREMS

    theorems = {k: {"name": t.name, "witness": t.witness_name,
                    "false_witness": t.false_witness_name, "statement": t.statement}
                for k, t in THEOREMS.items()}
    factors = _link_factors(proof_dir)
    return {
        "theorems": theorems,
        "no_hypotheses": sorted(NO_HYPOTHESES),
        "property_links": {k: list(v) for k, v in PROPERTY_THEOREMS.items()},
        "mechanism_links": {k: list(v) for k, v in MECHANISM_THEOREMS.items()},
        "axiom_policy": {
            "allowed": sorted(ALLOWED_AXIOMS), "real_modules": sorted(REAL_MODULES),
            "axiom_free": sorted(k for k, t in THEOREMS.items() if not allowed_axioms(t)),
        },
        "link": {"rel_tol": link.REL_TOL, "m6_params": [list(p) for p in link.M6_PARAMS],
                 "groups": [[list(r), list(L)] for r, L in link.groups()],
                 "group_seed": link.GROUP_SEED, "dense": link.DENSE_SETTINGS,
                 "factors": [list(f) for f in factors]},
        "layout": {"roots": [list(r) for r in EXPECTED_ROOTS],
                   "makefile_sha256": link_makefile_sha()},
    }


def _package_key() -> str:
    """A hash of every source file of the package (exchange/**/*.py)."""
    package = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for py in sorted(package.rglob("*.py")):
        h.update(py.relative_to(package).as_posix().encode() + b"\0" + py.read_bytes())
    return h.hexdigest()


def _link_factors(proof_dir: Path | None) -> list[tuple[str, str, str]]:
    """(objective, Coq term, factor) of every code-link case. ``link.cases()`` reads the
    objectives' defaults, which imports torch (about 2 s of CPU, most of a
    ``--no-link`` run's own time); the list is a pure function of the package's
    sources, so with ``proof_dir`` it is kept in ``<proofs>/.cache/link-factors-<key>.json``
    under a hash of every source file of the package. Not under ``CI=true`` (CI
    computes everything from clean)."""
    from exchange.theory import link
    from exchange.theory.build import in_ci

    path = None
    if proof_dir is not None and not in_ci():
        path = Path(proof_dir) / ".cache" / f"link-factors-{_package_key()}.json"
        try:
            return [tuple(f) for f in json.loads(path.read_text())]
        except (OSError, ValueError, TypeError):
            pass
    factors = sorted({(c.objective, c.coq, c.factor) for c in link.cases()})
    if path is not None:
        try:
            path.parent.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as handle:
                json.dump(factors, handle)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only tree: computed again next time
    return factors


def link_makefile_sha() -> str:
    """The Makefile's pinned hash is the reviewed one in pins.json; python_side reports
    the one of the package's own tree (what --accept would record)."""
    from exchange.theory.coq import default_proofs_dir

    try:
        return hashlib.sha256((default_proofs_dir() / "Makefile").read_bytes()).hexdigest()
    except OSError:
        return "missing"


def _dump(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def pins_sha256(proof_dir: Path) -> str:
    try:
        return hashlib.sha256((Path(proof_dir) / PINS_FILE).read_bytes()).hexdigest()
    except OSError:
        return "missing"


def write_pins(proof_dir: Path) -> str:
    """Write pins.json from the code as it is (a re-pin); returns its sha256."""
    path = Path(proof_dir) / PINS_FILE
    data = python_side()
    data["layout"]["makefile_sha256"] = hashlib.sha256(
        (Path(proof_dir) / "Makefile").read_bytes()).hexdigest()
    path.write_text(_dump(data))
    return pins_sha256(proof_dir)


def _diff(path: str, old, new, out: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new)):
            if k not in new:
                out.append(f"{path}.{k} is pinned but gone from the code")
            elif k not in old:
                out.append(f"{path}.{k} is in the code but not pinned")
            else:
                _diff(f"{path}.{k}", old[k], new[k], out)
    elif old != new:
        out.append(f"{path}: pinned {json.dumps(old)[:300]}, code {json.dumps(new)[:300]}")


def pin_problems(proof_dir: Path, expected: str | None = None) -> list[str]:
    """Every way the Python side differs from proofs/spec/pins.json, the file from its
    hash, the layout of proofs/ from the pinned one, and the registry's own rules."""
    from exchange.theory.development import project_layout
    from exchange.theory.registry import PINS_SHA256, THEOREMS

    expected = PINS_SHA256 if expected is None else expected
    problems = []
    for key, thm in THEOREMS.items():  # the registry's own rules (were pytest-only)
        if thm.short != key:
            problems.append(f"registry key {key} names {thm.name}: a key is its theorem's "
                            "short name (an entry checked as another theorem)")
        for field, prefix in ((thm.witness, "W_"), (thm.false_witness, "F_")):
            if field and field != prefix + key:
                problems.append(f"{key}: witness {field} is not {prefix}{key}")
    path = Path(proof_dir) / PINS_FILE
    try:
        pinned = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return problems + [f"proofs/{PINS_FILE} cannot be read ({exc}): the Python side is "
                           "unpinned; record it with `exchange proofs --write-statements --accept`"]
    sha = pins_sha256(proof_dir)
    if sha != expected:
        problems.append(f"proofs/{PINS_FILE} has sha256 {sha[:12]}..., PINS_SHA256 in "
                        f"exchange/theory/registry.py says {expected[:12]}...: an unrecorded "
                        "edit of the pins")
    current = python_side(proof_dir)
    current["layout"]["makefile_sha256"] = pinned.get("layout", {}).get("makefile_sha256")
    diffs: list[str] = []
    _diff("pins", pinned, current, diffs)
    problems += [f"Python side differs from proofs/{PINS_FILE}: {d}" for d in diffs]
    problems += project_layout(proof_dir, pinned.get("layout", {}).get("makefile_sha256", ""))
    return problems
