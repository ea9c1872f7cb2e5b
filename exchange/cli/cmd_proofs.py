"""``exchange proofs``: compile the Coq proofs and list each theorem with its status.

Exit codes: 0 every theorem checked, 1 a proof failed (build error, missing name or an
axiom outside the allow-list), 2 coqc missing or a usage error. See docs/proofs.md and
THEORY.md section 3.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "proofs",
        help="compile the machine-checked proofs (Coq) and list each theorem's status",
        description="Build proofs/ with `make`, run Print Assumptions on every registered "
        "theorem, and show which properties and mechanisms each one backs.",
    )
    parser.add_argument(
        "--proofs-dir", default=None,
        help="folder holding _CoqProject (default: proofs/ next to the exchange package)",
    )
    parser.add_argument(
        "--no-compile", action="store_true",
        help="only list the registry and the property/mechanism links, do not run coqc",
    )
    parser.set_defaults(func=run)


def _backs(key: str) -> str:
    from exchange.theory.registry import MECHANISM_THEOREMS, PROPERTY_THEOREMS

    links = [p for p, ts in PROPERTY_THEOREMS.items() if key in ts]
    links += [m for m, ts in MECHANISM_THEOREMS.items() if key in ts]
    return ", ".join(links)


def _links_table():
    from rich.table import Table

    from exchange.theory.registry import (MECHANISM_THEOREMS, MECHANISMS, PROPERTY_NAMES,
                                   PROPERTY_THEOREMS, note_for)

    table = Table(title="Properties and mechanisms -> theorems")
    table.add_column("property / mechanism", overflow="fold")
    table.add_column("theorems", overflow="fold")
    table.add_column("note")
    for name in PROPERTY_NAMES:
        table.add_row(name, ", ".join(PROPERTY_THEOREMS.get(name, ())) or "-", note_for(name))
    for name in MECHANISMS:
        table.add_row(name, ", ".join(MECHANISM_THEOREMS.get(name, ())) or "-", note_for(name))
    return table


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from exchange.theory.coq import CHECKED, COQC_MISSING, compile_proofs
    from exchange.theory.registry import THEOREMS

    console = Console()
    if args.no_compile:
        statuses = None
    else:
        with console.status("compiling proofs/ with coqc ..."):
            statuses = {s.key: s for s in compile_proofs(args.proofs_dir)}

    table = Table(title="Machine-checked theorems (Coq, THEORY.md section 3)")
    table.add_column("theorem", overflow="fold")
    table.add_column("status")
    table.add_column("backs")
    table.add_column("statement")
    colour = {CHECKED: "green", COQC_MISSING: "yellow"}
    for key, thm in THEOREMS.items():
        status = statuses[key].status if statuses else "not compiled"
        style = colour.get(status, "red") if statuses else "dim"
        table.add_row(key, f"[{style}]{status}[/{style}]", _backs(key), thm.statement)
    console.print(table)
    console.print(_links_table())

    if statuses is None:
        return 0
    failed = [s for s in statuses.values() if s.status not in (CHECKED, COQC_MISSING)]
    for s in failed:
        console.print(f"[red]FAILED[/red] {s.name}: {s.detail}", markup=True, highlight=False)
    if failed:
        return 1
    if any(s.status == COQC_MISSING for s in statuses.values()):
        console.print("[yellow]coqc not found: nothing was checked.[/yellow] Install Coq 8.16 "
                      "(apt-get install -y coq) and rerun `exchange proofs`.")
        return 2
    console.print(f"[green]all {len(statuses)} theorems checked[/green]; "
                  "Print Assumptions within the allow-list (docs/proofs.md).")
    return 0
