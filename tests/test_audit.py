"""The committed audit documents are regenerated and compared: stale docs fail."""

import os
from pathlib import Path

import pytest

from exchange.audit import DOCS
from exchange.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _libraries_missing() -> str | None:
    from exchange import libraries

    reasons = [libraries.unavailable_reason(lib) for lib in libraries.LIBRARIES]
    reasons = [r for r in reasons if r]
    return "; ".join(reasons) or None


# Regenerating docs/audit-libraries.md (73 rows of library code, ~25 s) and docs/audit.md
# (~6 s) belongs to the slow tier, which the README's command (the full suite, what CI
# runs) includes.
@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(DOCS))
def test_committed_audit_is_fresh(path, capsys):
    if "libraries" in path:
        missing = _libraries_missing()
        if missing and os.environ.get("CI") != "true":
            pytest.skip(f"library rows need the extras: {missing}")
    code = main(DOCS[path])
    out, err = capsys.readouterr()
    assert code == 0, err
    committed = (ROOT / path).read_text()
    assert out == committed, f"{path} is stale: regenerate with `exchange {' '.join(DOCS[path])} > {path}`"


def test_every_library_row_matches_its_prediction():
    """Every row reads 'yes', except the documented disagreements, which must read **NO**."""
    from exchange.libraries import KNOWN_DISAGREEMENTS

    text = (ROOT / "docs/audit-libraries.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) >= 8 + 8  # every TRL loss type, >= 8 verl combinations
    names = {r.split("`")[1]: r for r in rows}
    disagree = [n for n, r in names.items() if "| yes |" not in r]
    assert sorted(disagree) == sorted(n for n in KNOWN_DISAGREEMENTS if n in names), disagree
    assert all("| **NO** |" in names[n] for n in disagree)


def test_audit_rows_agree_with_metadata_or_say_no():
    text = (ROOT / "docs/audit.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) >= 18 + 16  # the catalog families and the transformed variants
    # Every disagreement with a derived verdict is visible in the document itself.
    assert all(("| yes |" in r) or ("| **NO** |" in r) for r in rows)


def test_named_targets_with_libraries_get_the_library_rows_after_them():
    from exchange.audit import _resolve, audit_targets

    missing = _libraries_missing()
    if missing and os.environ.get("CI") != "true":
        pytest.skip(f"library rows need the extras: {missing}")
    rows = audit_targets(families=False, libraries=True)
    assert _resolve(["dapo", "grpo"], variants=True, families=True, libraries=True) == ["dapo", "grpo", *rows]
    assert _resolve(["dapo"], variants=True, families=True, libraries=False) == ["dapo"]
    assert _resolve(None, variants=False, families=False, libraries=True) == rows
