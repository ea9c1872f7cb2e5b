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
        "theorem, and show which properties and mechanisms each one backs. Results are "
        "cached by a hash of everything they depend on (--no-cache to check from scratch).",
    )
    parser.add_argument(
        "--proofs-dir", default=None,
        help="folder holding _CoqProject (default: proofs/ of the tree run from: the "
        "current directory's repository, else the one next to the exchange package)",
    )
    parser.add_argument(
        "--write-statements", action="store_true",
        help="build, then pin every theorem's and witness's compiled statement in "
        "<proofs-dir>/statements.txt (review the diff before committing it)",
    )
    parser.add_argument(
        "--no-compile", action="store_true",
        help="only list the registry and the property/mechanism links, do not run coqc",
    )
    parser.add_argument(
        "--no-cache", action="store_true",
        help="check from scratch: neither read nor write the result cache "
        "(<proofs-dir>/.cache, keyed by a hash of the sources, the registry and coqc)",
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

    from pathlib import Path

    from exchange.theory.coq import (CHECKED, COQC_MISSING, compile_proofs, proofs_dir_for_cwd,
                                     write_statements)
    from exchange.theory.registry import THEOREMS

    console = Console()
    proofs_dir = Path(args.proofs_dir) if args.proofs_dir else proofs_dir_for_cwd()
    # First line: which tree is checked (a console script may come from another clone).
    print(f"checking proofs in {proofs_dir.resolve()}")
    if args.write_statements:
        import subprocess

        make = subprocess.run(["make", "-C", str(proofs_dir)], capture_output=True, text=True)
        if make.returncode != 0:
            console.print(make.stdout + make.stderr, markup=False, highlight=False)
            return 1
        path = write_statements(proofs_dir)
        console.print(f"pinned statements written to {path}; review `git diff` before "
                      "committing", markup=False, highlight=False)
        return 0
    if args.no_compile:
        statuses = None
    else:
        with console.status("compiling proofs/ with coqc ..."):
            statuses = {s.key: s for s in compile_proofs(proofs_dir, cache=not args.no_cache)}

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
                  "statements as pinned, witnesses checked, Print Assumptions within the "
                  "allow-list (docs/proofs.md).")
    return 0
