"""Every count the README and docs quote is held to its source, so a quoted number cannot
go stale. (Figures that a script measures are written by it instead: docs/audit*.md by
``exchange audit``, docs/performance.md by ``benchmarks/``, with their own tests.)

``FIGURES`` lists each quoted count as a phrase with ``{n}`` where the number stands, the
file it is quoted in, and the function that counts it at its source. Line breaks and
repeated spaces in the docs do not matter. A figure whose phrase disappears from its file
fails too: the table must change with the docs.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _catalog() -> int:
    from exchange.objectives import names

    return len(names())


def _theorems(real: bool) -> int:
    from exchange.theory.registry import THEOREMS

    return sum((t.name.split(".")[1] == "Real") == real for t in THEOREMS.values())


def _code_link_comparisons() -> int:
    from exchange.theory.link import cases

    return len(cases())


def _proof_mutations() -> int:
    return _literal_length(REPO / "tests/theory/test_mutations.py", "MUTATIONS")


def _trl_equality_rows() -> int:
    return _literal_length(REPO / "tests/libraries/trl/test_equality.py", "ROWS")


def _compositions(tier: str) -> int:
    text = (REPO / "tests/objectives/test_composition.py").read_text()
    found = dict((t, int(n)) for n, t in re.findall(r"pytest\.param\(\d+, (\d+), id=\"(fast|slow)-\d+\"", text))
    return found[tier] if tier != "all" else sum(found.values())


def _literal_length(path: Path, name: str) -> int:
    """The number of entries of the module-level list or dict literal ``name`` (read with
    ``ast``, so the test module, and the extras it needs, are not imported)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            value = node.value
            return len(value.keys if isinstance(value, ast.Dict) else value.elts)
    raise AssertionError(f"{path} defines no literal {name}")


FIGURES = [
    ("README.md", "[The catalog](docs/objectives.md): {n} published objectives", _catalog),
    ("docs/getting-started.md", "checks the catalog's {n} published objectives", _catalog),
    ("docs/objectives.md", "The {n} families:", _catalog),
    ("docs/proofs.md", "{n} theorems use rationals", lambda: _theorems(real=False)),
    ("docs/proofs.md", "the {n} over Coq's standard reals", lambda: _theorems(real=True)),
    ("docs/proofs.md", "{n} registered theorems (those of `Real`)", lambda: _theorems(real=True)),
    ("docs/proofs.md", "to the package's code ({n} comparisons", _code_link_comparisons),
    ("docs/proofs.md", "distinct lengths; {n} comparisons", _code_link_comparisons),
    ("docs/proofs.md", "must name what changed. {n} mutations, all caught", _proof_mutations),
    ("docs/proofs.md", "(slow tier) shows {n} kinds of change of meaning", _proof_mutations),
    ("docs/libraries.md", "correction in every mode ({n} rows, `tests/libraries/trl/test_equality.py`",
     _trl_equality_rows),
    ("docs/properties.md", "suite holds {n} random compositions", lambda: _compositions("all")),
]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize(("path", "phrase", "source"), FIGURES, ids=[f"{p}: {ph[:40]}" for p, ph, _ in FIGURES])
def test_quoted_count_matches_its_source(path, phrase, source):
    pattern = re.escape(_flat(phrase)).replace(re.escape("{n}"), r"(\d[\d,]*)")
    found = re.findall(pattern, _flat((REPO / path).read_text()))
    assert found, f"{path} no longer says {phrase!r}: update FIGURES in {__file__} with the docs"
    for quoted in found:
        assert int(quoted.replace(",", "")) == source(), \
            f"{path} says {phrase.format(n=quoted)!r}, but the source counts {source()}"


def test_mechanism_ranges_name_every_mechanism():
    from exchange.core.vocabulary import MECHANISMS

    last = max(int(m[1:]) for m in MECHANISMS)
    files = [REPO / "README.md", REPO / "DEVELOPERS.md", *(REPO / "docs").glob("*.md"), *(REPO / "exchange").rglob("*.py")]
    stale = []
    for path in files:
        if path.name == "THEORY.md":  # the spec is copied verbatim from ../shared
            continue
        for m in re.finditer(r"\bM1(?:-|\.\.| to )M(\d)\b", path.read_text()):
            if int(m[1]) != last:
                stale.append(f"{path.relative_to(REPO)}: {m[0]}")
    assert not stale, f"ranges that leave out mechanisms up to M{last}: {stale}"


def test_batch_format_lists_every_rollout_field():
    from exchange.core.rollout import Rollout

    text = (REPO / "docs" / "inspect.md").read_text()
    section = text[text.index("## The batch format"):text.index("## Dumping batches")]
    fields = [f.name for f in dataclasses.fields(Rollout) if not f.name.startswith("_")]
    missing = [f for f in fields if f"`{f}" not in section]
    assert not missing, f"docs/inspect.md's batch format does not list {missing}"


def test_json_report_fields_are_the_ones_written():
    """docs/reading-a-report.md lists the JSON report's fields; they are to_json's."""
    import json

    from exchange import check
    from exchange.objectives import get

    report = json.loads(check(get("grpo").bind(), max_examples=10, seed=0, properties=["exchangeable"],
                              regimes="off_policy").to_json())
    text = (REPO / "docs" / "reading-a-report.md").read_text()
    section = text[text.index("## The JSON report"):]
    documented = set(re.findall(r"`(\w+)`", section))
    prop = report["properties"]["exchangeable"]
    written = set(report) | set(prop) | set(prop["counterexample"] or {}) | set(next(iter(prop["regimes"].values())))
    written |= {"regularizer", "variant", "variant_kappa"}  # present only with a regularizer, or for a broken (E)
    assert written <= documented, f"fields written but not documented: {sorted(written - documented)}"
