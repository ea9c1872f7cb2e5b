"""``exchange audit``'s table ends with a legend naming every symbol it shows (issue 40):
the property letters, the off-policy mark, ``mech.``, ``= metadata`` and the cell marks,
with the property names and mechanisms taken from the vocabulary."""

import re

import pytest

import exchange.audit
from exchange.audit import OFF_POLICY_MARK, AuditRow, legend
from exchange.cli import main
from exchange.core.vocabulary import MECHANISMS, PROPERTY_LETTERS, PROPERTY_NAMES, REGIMES, Expected


def _report(broken=(), mechanisms=()):
    return {
        "properties": {p: {"regimes": {r.value: {"holds": p not in broken} for r in REGIMES}} for p in PROPERTY_NAMES},
        "mechanisms_by_regime": {r.value: list(mechanisms) for r in REGIMES},
    }


BROKEN = ("exchangeable", "shared_cancellation")
ROWS = [
    AuditRow("grpo", "src", _report()),  # no metadata: "-"
    AuditRow("dapo", "src", _report(BROKEN, ["M3"]),  # agrees: "yes"
             {r: Expected(frozenset(BROKEN), frozenset({"M3"})) for r in REGIMES}),
    AuditRow("gspo", "src", _report(BROKEN, ["M1"]), {r: Expected() for r in REGIMES}),  # disagrees: "NO"
]


@pytest.fixture
def table(monkeypatch, capsys):
    monkeypatch.setattr(exchange.audit, "audit", lambda *a, **k: ROWS)
    assert main(["audit"]) == 0
    out = capsys.readouterr().out
    head, sep, tail = out.partition("Legend")
    assert sep, f"no legend under the table:\n{out}"
    return head, sep + tail


def _entries(legend_text):
    """``symbol -> meaning`` of the legend's entries (symbols in the first column)."""
    entries, last = {}, None
    for line in legend_text.splitlines()[1:]:
        m = re.match(r"^  (\S.*?)\s{2,}(\S.*)$", line)
        if m and not line.startswith("    "):
            last = m.group(1)
            entries[last] = m.group(2)
        elif last:
            entries[last] += " " + line.strip()
    return entries


def test_the_legend_names_every_column_symbol_in_the_table(table):
    head, legend_text = table
    header = next(line for line in head.splitlines() if "objective" in line)
    columns = [c.strip() for c in re.split(r"[┃│|]", header) if c.strip()]
    assert columns[0] == "objective" and len(columns) == 2 * (len(PROPERTY_NAMES) + 1) + 2, columns
    entries = _entries(legend_text)
    symbols = set(entries)
    for column in columns[1:]:
        base = column.removesuffix(OFF_POLICY_MARK)
        assert base in symbols, f"column {column!r} is not explained: {sorted(symbols)}"
        if base != column:
            assert OFF_POLICY_MARK in symbols
    # the marks in the cells: holds / broken / none, and the metadata values
    cells = {c.strip() for line in head.splitlines()[3:] for c in re.split(r"[┃│]", line) if c.strip()}
    for mark in ("✓", "✗", "-"):
        assert mark in cells and any(mark in s.split() for s in symbols), mark
    for value in ("yes", "NO"):
        assert value in cells and f"{value}:" in entries["= metadata"]


def test_the_legend_comes_from_the_vocabulary(table):
    _, legend_text = table
    entries = _entries(legend_text)
    for p in PROPERTY_NAMES:
        assert entries[PROPERTY_LETTERS[p]].startswith(f"{p}: ")
    for m in MECHANISMS.values():
        assert f"{m.id} {m.title}" in entries["mech."]
    assert "off-policy" in entries[OFF_POLICY_MARK] and "on-policy" in entries[OFF_POLICY_MARK]
    assert legend_text.strip().splitlines() == legend()


def test_json_and_markdown_have_no_terminal_legend(monkeypatch, capsys):
    monkeypatch.setattr(exchange.audit, "audit", lambda *a, **k: ROWS)
    assert main(["audit", "--json"]) == 0
    assert "Legend" not in capsys.readouterr().out
    assert main(["audit", "--format", "markdown"]) == 0
    assert "Legend" not in capsys.readouterr().out  # docs/audit.md explains its columns above the table
