"""Claims rows of docs/claims.md: a pair that cannot be read says so in every row."""
from __future__ import annotations

import pytest

from exchange.lab.experiment_report import claims_rows


def _summary(falsifier: str, reduced: str | None = None) -> dict:
    effects = [{"prediction": p, "primary": True, "claim": f"claim {p}", "reason": "why"} for p in ("P1", "P2", "P3", "P4")]
    verdicts = {"P1": "confirmed", "P2": "refuted", "P3": "inconclusive", "P4": "inconclusive", "falsifier": falsifier}
    s = {"experiment": {"name": "pair"}, "baseline": "a", "treatment": "b", "effects": effects, "verdicts": verdicts}
    if reduced:
        s["reduced"] = reduced
    return s


def _verdict_cells(table: str) -> list[str]:
    rows = [r for r in table.splitlines()[2:] if r.startswith("| P")]
    return [r.split(" | ")[2] for r in rows]


@pytest.mark.parametrize("falsifier, tag", [
    ("not readable: the manipulation check failed (treatment residual 5e-17, baseline 1e-4)", "pair not readable"),
    ("confounded: KL per step differs by +545% between arms (> 10%)", "pair confounded"),
])
def test_rows_of_an_unreadable_pair_are_qualified(falsifier, tag):
    cells = _verdict_cells(claims_rows([_summary(falsifier)], ["c.toml"]))
    assert len(cells) == 4
    assert all(tag in c for c in cells), cells
    assert cells[0].startswith("confirmed")


def test_rows_of_a_readable_pair_are_not_qualified():
    cells = _verdict_cells(claims_rows([_summary("partly: 1 of P1-P3 confirmed, 2 refuted")], ["c.toml"]))
    assert cells == ["confirmed", "refuted", "inconclusive", "inconclusive"]


def test_reduced_and_unreadable_tags_combine():
    cells = _verdict_cells(claims_rows([_summary("confounded: KL", reduced="4 seeds")], ["c.toml"]))
    assert all("provisional: 4 seeds" in c and "pair confounded" in c for c in cells)
