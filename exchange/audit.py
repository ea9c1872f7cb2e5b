"""``audit``: every built-in objective x every property, on- and off-policy.

Each row is one :func:`exchange.check` run; rows run in parallel worker processes
(``jobs``). The matrix renders as a rich table, as JSON, or as the markdown committed in
docs/audit.md (kept fresh by ``tests/test_audit.py``).
"""

from __future__ import annotations

import json
import multiprocessing
import re
import textwrap
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

# Torch-free at import: the parent process only schedules rows and renders them, so
# that the workers start at once (each pays its own torch import, ~2 s).
from exchange.core.vocabulary import (
    MECHANISMS, PROPERTY_LETTERS, PROPERTY_NAMES, PROPERTY_SUMMARIES, REGIMES, Expected, Regime,
)
from exchange.targets import LIBRARY_PREFIXES, TargetSpec


__all__ = ["AuditRow", "audit", "audit_targets", "legend", "table_columns", "to_markdown"]

@dataclass
class AuditRow:
    name: str
    source: str
    report: dict[str, Any]  # Report.to_dict()
    expected: dict[str, Expected] = field(default_factory=dict)
    version: str = ""

    def holds(self, prop: str, regime: str) -> bool:
        return bool(self.report["properties"][prop]["regimes"][regime]["holds"])

    def mechanisms(self, regime: str) -> list[str]:
        return list(self.report["mechanisms_by_regime"].get(regime, []))

    def matches_expected(self) -> bool | None:
        """Whether the checker's verdicts equal the documented ones (None: no metadata)."""
        if not self.expected:
            return None
        for regime, exp in self.expected.items():
            broken = {p for p in PROPERTY_NAMES if not self.holds(p, regime)}
            if broken != set(exp.breaks) or set(self.mechanisms(regime)) != set(exp.mechanisms):
                return False
        return True


def audit_targets(variants: bool = False, families: bool = True, libraries: bool = False) -> list[TargetSpec]:
    """Built-in objective families, then (``variants=True``) the catalog's transformed
    variants such as ``gspo+min_replace``, then (``libraries=True``) the library loss rows
    (``trl:grpo --param ...``; imports the installed libraries). Imports torch: the audit
    resolves it in a worker."""
    from exchange import objectives

    specs = [TargetSpec(n) for n in (objectives.names() if families else [])]
    specs += [TargetSpec(n) for n in objectives.VARIANTS] if variants else []
    if libraries:
        from exchange import libraries as libs

        specs += [_spec_of(row) for row in libs.library_rows()]
    return specs


def _spec_of(row) -> TargetSpec:
    """A library row (:class:`exchange.libraries.LibraryRow`) as data."""
    return TargetSpec(row.target, tuple(row.params.items()))


def _resolve(specs: list[TargetSpec] | None, variants: bool, families: bool, libraries: bool) -> list[TargetSpec]:
    """The rows to check: ``specs`` (``None``: :func:`audit_targets`), then the library
    rows when ``libraries``."""
    if specs is None:
        return audit_targets(variants, families, libraries)
    return list(specs) + (audit_targets(families=False, libraries=True) if libraries else [])


def _check_one(
    spec: TargetSpec, max_examples: int, seed: int, shrink: bool = False
) -> tuple[dict[str, Any], str, dict[str, Expected], str]:
    """One audit row, in a worker: ``(report, source, expected, version)``."""
    from exchange.checker import check

    target = spec.resolve()
    report = check(target.loss_fn, max_examples=max_examples, seed=seed, regularizer=target.regularizer,
                   name=spec.name, shrink=shrink)
    return (report.to_dict(), *_meta(spec))


def _worker_start() -> None:
    """Each worker skips the interpreter's teardown when it exits: by then every result
    has been written back (the pool's result queue writes synchronously), and tearing
    down an interpreter that loaded torch takes ~0.5 s the parent would wait for."""
    import atexit
    import os

    atexit.register(os._exit, 0)


def _warm() -> None:
    """Import what every row needs (torch, the checker, the catalog) in a fresh worker."""
    import exchange.checker  # noqa: F401
    import exchange.targets  # noqa: F401


_LIBRARY_ROWS: dict = {}


def _meta(spec: TargetSpec) -> tuple[str, dict[str, Expected], str]:
    """Source, expected verdicts and library version of one audit row."""
    if spec.target.startswith(LIBRARY_PREFIXES):
        if not _LIBRARY_ROWS:  # built once per worker
            from exchange import libraries

            _LIBRARY_ROWS.update((_spec_of(row), row) for row in libraries.library_rows())
        if spec in _LIBRARY_ROWS:
            row = _LIBRARY_ROWS[spec]
            return row.library, dict(row.expected), row.version
    from exchange import objectives

    return objectives.get(spec.target.split("+", 1)[0]).source, objectives.expected_of(spec.target), ""


def audit(
    specs: list[str | TargetSpec] | None = None,
    max_examples: int = 10,
    seed: int = 0,
    jobs: int = 2,
    shrink: bool = False,
    variants: bool = True,
    libraries: bool = False,
    families: bool = True,
) -> list[AuditRow]:
    """Check every target in ``specs`` (``None``: :func:`audit_targets` with ``variants``
    and ``families``), and the library rows when ``libraries``. ``shrink``: shrink
    fuzz-found counterexamples (the verdicts do not depend on it; see ``check``). With
    ``jobs > 1`` everything that imports torch runs in the workers, the target list
    included, so they start at once."""
    if specs is not None:  # names from the command line: targets without params
        specs = [s if isinstance(s, TargetSpec) else TargetSpec(s) for s in specs]
    if jobs <= 1:
        specs = _resolve(specs, variants, families, libraries)
        results = [_check_one(s, max_examples, seed, shrink) for s in specs]
    else:
        ctx = multiprocessing.get_context("spawn")  # fork after torch threads start can hang
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_start) as pool:
            if specs is None or libraries:
                # The pool starts workers on demand: warm the others while one lists the targets.
                for _ in range(jobs - 1):
                    pool.submit(_warm)
                specs = pool.submit(_resolve, specs, variants, families, libraries).result()
            futures = [pool.submit(_check_one, s, max_examples, seed, shrink) for s in specs]
            results = [f.result() for f in futures]
    return [AuditRow(spec.name, source, rep, expected, version) for spec, (rep, source, expected, version) in zip(specs, results)]


# The audit's symbols, shared by the terminal table (``exchange audit``), its legend and
# the markdown (docs/audit.md).
HOLDS, BROKEN, NONE = "✓", "✗", "-"
OFF_POLICY_MARK = "·"  # suffix of the off-policy columns in the terminal table
MECHANISMS_COLUMN = "mech."
METADATA_COLUMN = "= metadata"
METADATA_MEANING = "compares the checker with the verdict derived in THEORY.md / the reference notes"
METADATA_VALUES = {"yes": "they agree", "NO": "they differ", NONE: "no derived verdict for this row"}
REGIME_CONDITIONS = {  # what each regime's columns fix (THEORY.md section 2)
    Regime.ON_POLICY: "every ratio 1",
    Regime.OFF_POLICY: "event-consistent ratios on both sides of the clip ranges",
}


def table_columns() -> list[str]:
    """The terminal table's column headers, in order: the objective, then per regime each
    property's letter and the mechanisms (off-policy ones end in ``·``), then ``= metadata``."""
    columns = ["objective"]
    for regime in REGIMES:
        mark = OFF_POLICY_MARK if regime.off_policy else ""
        columns += [f"{PROPERTY_LETTERS[p]}{mark}" for p in PROPERTY_NAMES] + [f"{MECHANISMS_COLUMN}{mark}"]
    return columns + [METADATA_COLUMN]


def legend(width: int = 100) -> list[str]:
    """The terminal table's legend: one entry per symbol of :func:`table_columns` and of
    the cells, built from the vocabulary (:mod:`exchange.core.vocabulary`: property
    letters, names and summaries, regime labels, mechanisms); wrapped at ``width`` with
    the symbols in a column of their own."""
    on, off = REGIMES
    entries = [
        (f"{HOLDS} {BROKEN} {NONE}", "holds, broken, none"),
        (OFF_POLICY_MARK, f"{off.label} column ({REGIME_CONDITIONS[off]}); a column without {OFF_POLICY_MARK} is "
                          f"{on.label} ({REGIME_CONDITIONS[on]})"),
    ]
    for p in PROPERTY_NAMES:
        letter = PROPERTY_LETTERS[p]
        entries.append((letter, f"{p}: {PROPERTY_SUMMARIES[p].removeprefix(f'({letter}) ')}"))
    entries.append((MECHANISMS_COLUMN, f"the mechanisms the checker names for that regime's breaks ({NONE}: none): "
                    + ", ".join(f"{m.id} {m.title}" for m in MECHANISMS.values())))
    entries.append((METADATA_COLUMN, f"{METADATA_MEANING}: "
                    + "; ".join(f"{value}: {meaning}" for value, meaning in METADATA_VALUES.items())))
    column = max(len(symbol) for symbol, _ in entries) + 2
    lines = ["Legend (properties: docs/properties.md; mechanisms: docs/THEORY.md section 4):"]
    for symbol, meaning in entries:
        lines += textwrap.wrap(meaning, width, initial_indent=f"  {symbol:<{column}}",
                               subsequent_indent=" " * (column + 2), break_on_hyphens=False)
    return lines


def _link(source: str) -> str:
    m = re.search(r"arXiv:(\d{4}\.\d{4,5})", source)
    return f"[{source}](https://arxiv.org/abs/{m.group(1)})" if m else source


def _mark(ok: bool) -> str:
    return HOLDS if ok else BROKEN


# The committed audit documents and the exact arguments that generate them
# (tests/test_audit.py regenerates each and compares).
DOCS = {
    "docs/audit.md": ["audit", "--variants", "--format", "markdown", "--max-examples", "10", "--seed", "0"],
    "docs/audit-libraries.md": ["audit", "--only-libraries", "--format", "markdown", "--max-examples", "10", "--seed", "0"],
}


def to_markdown(rows: list[AuditRow], max_examples: int, seed: int, command: str = "", title: str = "") -> str:
    props = list(PROPERTY_NAMES)
    head = (["objective"] + [f"{PROPERTY_LETTERS[p]}" for p in props] + [MECHANISMS_COLUMN]
            + [f"{PROPERTY_LETTERS[p]}" for p in props] + [MECHANISMS_COLUMN, METADATA_COLUMN, "source"])
    command = command or f"exchange audit --format markdown --max-examples {max_examples} --seed {seed}"
    lines = [
        f"# {title or 'Audit: exchangeability of the built-in objectives'}",
        "",
        f"Generated by `{command}`; do not edit by",
        "hand (`tests/test_audit.py` fails when this file is stale). ✓ holds, ✗ broken. The first",
        "block of columns is on-policy (every ratio 1), the second off-policy (event-consistent ratios",
        "on both sides of the clip ranges). Properties (docs/properties.md):",
        "",
    ]
    lines += [f"- **{PROPERTY_LETTERS[p]}** `{p}`: {PROPERTY_SUMMARIES[p]}" for p in props]
    lines += [
        "",
        *textwrap.wrap("Mechanisms: " + ", ".join(f"{m.id} {m.title}" for m in MECHANISMS.values()) + ".", 92),
        f"`{METADATA_COLUMN}` {METADATA_MEANING}.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for row in rows:
        cells = [f"`{row.name}`"]
        for regime in REGIMES:
            cells += [_mark(row.holds(p, regime)) for p in props]
            cells.append(", ".join(row.mechanisms(regime)) or NONE)
        match = row.matches_expected()
        cells.append(NONE if match is None else ("yes" if match else "**NO**"))
        cells.append(_link(row.source) + (f" {row.version}" if row.version else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_json(rows: list[AuditRow]) -> str:
    return json.dumps(
        [
            {
                "objective": r.name,
                "source": r.source,
                "version": r.version,
                "matches_expected": r.matches_expected(),
                "report": r.report,
            }
            for r in rows
        ],
        indent=2,
    )
