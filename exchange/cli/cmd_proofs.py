"""``exchange proofs``: compile the Coq proofs and list each theorem with its status.

Exit codes: 0 everything checked, 1 a check failed (build error, missing name, an axiom
the theorem's module does not allow, a statement that differs from the reviewed record
proofs/spec/Spec.v, the record's hash or inventory, _CoqProject flags, coqchk, the source
scan, the code link), 2 coqc missing or a usage error. See docs/proofs.md and THEORY.md
section 3.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "proofs",
        help="compile the machine-checked proofs (Coq) and list each theorem's status",
        description="Build proofs/ with `make`, run Print Assumptions on every registered "
        "theorem (per-module axiom rules), have the kernel check each theorem against the "
        "reviewed record proofs/spec/Spec.v, check the record's hash and inventory, "
        "_CoqProject's flags, coqchk, the source scan and the link to the package's code, "
        "and show which properties and mechanisms each theorem backs. Per-theorem results "
        "are cached by a hash of everything they depend on (--no-cache to check from scratch).",
    )
    parser.add_argument(
        "--proofs-dir", default=None,
        help="folder holding _CoqProject (default: proofs/ of the tree run from: the "
        "current directory's repository, else the one next to the exchange package)",
    )
    parser.add_argument(
        "--write-statements", action="store_true",
        help="show how proofs/spec/Spec.v differs from the reviewed record (the statements "
        "added, removed or changed, and the diff); with --accept, record it: rewrite "
        "SPEC_SHA256 in exchange/theory/registry.py and append the diff to proofs/CHANGES",
    )
    parser.add_argument(
        "--accept", action="store_true",
        help="with --write-statements: record the current Spec.v as reviewed (a re-pin)",
    )
    parser.add_argument(
        "--no-link", action="store_true",
        help="skip the link to the package's code (the objectives' coefficients compared "
        "with the Coq definitions); the summary says it was skipped",
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

    from exchange.theory.registry import (
        MECHANISM_THEOREMS,
        MECHANISMS,
        PROPERTY_NAMES,
        PROPERTY_THEOREMS,
        note_for,
    )

    table = Table(title="Properties and mechanisms -> theorems")
    table.add_column("property / mechanism", overflow="fold")
    table.add_column("theorems", overflow="fold")
    table.add_column("note")
    for name in PROPERTY_NAMES:
        table.add_row(name, ", ".join(PROPERTY_THEOREMS.get(name, ())) or "-", note_for(name))
    for name in MECHANISMS:
        table.add_row(name, ", ".join(MECHANISM_THEOREMS.get(name, ())) or "-", note_for(name))
    return table


def _write_statements(args, proofs_dir, console) -> int:
    from exchange.theory.pins import pin_problems
    from exchange.theory.record import accept_record, record_diff

    summary, diff = record_diff(proofs_dir)
    pins = [p for p in pin_problems(proofs_dir) if "Makefile" not in p or "sha256" in p]
    if not summary and not pins:
        console.print("proofs/spec/Spec.v and proofs/spec/pins.json are the reviewed record; "
                      "nothing to record", markup=False, highlight=False)
        return 0
    console.print("\n".join(["proofs/spec/Spec.v / pins.json differ from the reviewed record:",
                             *[f"  {line}" for line in summary + pins], diff]),
                  markup=False, highlight=False)
    if not args.accept:
        console.print("not recorded: review the diff, then rerun with --write-statements "
                      "--accept", markup=False, highlight=False)
        return 1
    new = accept_record(proofs_dir)
    console.print(f"recorded: SPEC_SHA256 = {new} in exchange/theory/registry.py, entry "
                  "appended to proofs/CHANGES; commit both with Spec.v",
                  markup=False, highlight=False)
    return 0


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from exchange.theory.coq import (
        CHECKED,
        COQC_MISSING,
        check_proofs_dir,
        compile_proofs,
        find_coqc,
        proofs_dir_for_cwd,
    )
    from exchange.theory.registry import THEOREMS

    console = Console()
    proofs_dir = Path(args.proofs_dir) if args.proofs_dir else proofs_dir_for_cwd()
    # First line: which tree is checked (a console script may come from another clone).
    print(f"checking proofs in {proofs_dir.resolve()}")
    if args.accept and not args.write_statements:
        from exchange.errors import InvalidArgument

        raise InvalidArgument("--accept records a re-pin and only goes with "
                              "--write-statements: run `exchange proofs --write-statements "
                              "--accept` after reviewing the diff")
    check_proofs_dir(proofs_dir)
    if args.write_statements:
        return _write_statements(args, proofs_dir, console)
    if not args.no_compile:
        from exchange.theory.development import project_flags
        from exchange.theory.record import check_record

        from exchange.theory.development import project_layout

        flags = project_flags(proofs_dir) + [p for p in project_layout(proofs_dir)]
        if flags:  # a development built under another logic or layout is not worth checking
            for problem in check_record(proofs_dir) + flags:
                console.print(f"[red]FAILED[/red] {problem}", markup=True, highlight=False)
            console.print("not built: fix _CoqProject / proofs/ first", markup=False,
                          highlight=False)
            return 1
    build = None
    if args.no_compile:
        statuses = None
    else:
        from exchange.theory.build import build_development, in_ci

        with console.status("compiling proofs/ with coqc ..."):
            coqc = find_coqc()
            if coqc is not None:  # our own coqc calls, never make's output (issue 43)
                build = build_development(proofs_dir, coqc, fresh=args.no_cache or in_ci())
            statuses = {s.key: s for s in compile_proofs(proofs_dir, cache=not args.no_cache,
                                                         build=build)}

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
    if any(s.status == COQC_MISSING for s in statuses.values()):
        console.print("[yellow]coqc not found: nothing was checked.[/yellow] Install Coq 8.16 "
                      "(apt-get install -y coq) and rerun `exchange proofs`.")
        return 2
    failed = [s for s in statuses.values() if s.status != CHECKED]
    for s in failed:
        console.print(f"[red]FAILED[/red] {s.name}: {s.detail}", markup=True, highlight=False)
    problems = _whole_development(proofs_dir, find_coqc(), build, link=not args.no_link,
                                  cache=not args.no_cache)
    for problem in problems:
        console.print(f"[red]FAILED[/red] {problem}", markup=True, highlight=False)
    from exchange.theory.record import last_entry_statements

    trail = last_entry_statements(proofs_dir)
    if trail:  # the statement diff of the current re-pin, in every log (issue 43)
        console.print("last re-pin (proofs/CHANGES):\n" + "\n".join(f"  {ln}" for ln in trail),
                      markup=False, highlight=False)
    if failed or problems:
        return 1
    console.print(f"[green]all {len(statuses)} theorems checked[/green]; each has the type "
                  "of its statement in the reviewed record (kernel), its witnesses too "
                  "(W_T: the hypotheses H_T at concrete arguments, G >= 2; F_: through the "
                  "theorem), "
                  "Print Assumptions within its module's rule; record hash and inventory, "
                  "_CoqProject, coqchk, source scan"
                  + (", code link" if not args.no_link else " (code link skipped: --no-link)")
                  + " checked (docs/proofs.md).")
    return 0


def _whole_development(proofs_dir, coqc, build, link: bool, cache: bool) -> list[str]:
    """The checks of the development as a whole: the record and its trail, the layout of
    proofs/, the Python pins, flags, scan, coqchk, link."""
    from exchange.theory.build import in_ci
    from exchange.theory.development import development_problems
    from exchange.theory.pins import pin_problems
    from exchange.theory.record import check_record

    problems = check_record(proofs_dir, compiled_sha=build.spec_sha if build else None)
    problems += pin_problems(proofs_dir)
    if build is None or build.error:  # coqchk and the link need the build
        return problems
    problems += development_problems(proofs_dir, coqc, build, cache=cache and not in_ci())
    if link:
        from exchange.theory.link import link_problems, self_test_problems

        problems += self_test_problems()
        problems += link_problems(proofs_dir, coqc, cache=cache, build=build)
    return problems
