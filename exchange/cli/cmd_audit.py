"""``exchange audit``: the matrix of every built-in objective x every property."""

from __future__ import annotations

from exchange.cli.options import add_json, add_shrink, add_targets


def add_parser(sub) -> None:
    p = sub.add_parser("audit", help="check every built-in objective; print the matrix")
    add_targets(p, many=True, default=[], help="objectives to audit (default: every built-in family)", old="--objectives")
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table", help="table or markdown (docs/audit.md); json is --json")
    add_json(p)
    p.add_argument("--max-examples", type=int, default=10, help="fuzzed configurations per property and regime (the probes catch most breaks; raise it for more fuzzing)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2, help="worker processes")
    p.add_argument("--variants", action="store_true", help="add the catalog's transformed variants (gspo+min_replace, ...)")
    p.add_argument("--libraries", action="store_true", help="add TRL / verl / OpenRLHF loss rows (needs the extras)")
    add_shrink(p, default=False)  # the audit reports verdicts; `exchange check TARGET` shrinks
    p.add_argument("--only-libraries", action="store_true", help="only the library rows (docs/audit-libraries.md)")
    p.set_defaults(func=run)


def run(args) -> int:
    from exchange.audit import audit, to_json, to_markdown
    from exchange.errors import InvalidArgument

    if args.max_examples < 1:
        raise InvalidArgument(f"--max-examples={args.max_examples} must be >= 1.")
    if args.jobs < 1:
        raise InvalidArgument(f"--jobs={args.jobs} must be >= 1.")
    if args.format == "json":
        import sys

        print("exchange audit: --format json is deprecated and will be removed in 0.3; use --json", file=sys.stderr)
        args.json = True
    # None: the default list, resolved in a worker (this process never imports torch)
    specs = list(args.targets) if args.targets and not args.only_libraries else None
    rows = audit(
        specs, max_examples=args.max_examples, seed=args.seed, jobs=args.jobs, shrink=args.shrink,
        variants=args.variants and not args.only_libraries, families=not args.only_libraries,
        libraries=args.libraries or args.only_libraries,
    )
    if args.json:
        print(to_json(rows))
    elif args.format == "markdown":
        flags = " --variants" * args.variants + " --libraries" * args.libraries + " --only-libraries" * args.only_libraries
        command = f"exchange audit{flags} --format markdown --max-examples {args.max_examples} --seed {args.seed}"
        title = "Audit: the losses of TRL, verl, OpenRLHF, SkyRL, AReaL and ART" if args.only_libraries else ""
        print(to_markdown(rows, args.max_examples, args.seed, command, title), end="")
    else:
        _table(rows)
    return 0


def _table(rows) -> None:
    """The verdict table (rich), then its legend (:func:`exchange.audit.legend`)."""
    from rich.console import Console
    from rich.table import Table

    from exchange.audit import BROKEN, HOLDS, NONE, OFF_POLICY_MARK, legend, table_columns
    from exchange.core.vocabulary import PROPERTY_LETTERS, PROPERTY_NAMES, REGIMES

    table = Table(title="exchange audit (on-policy | off-policy)")
    columns = table_columns()
    table.add_column(columns[0])
    for header in columns[1:]:
        letter = header.removesuffix(OFF_POLICY_MARK) in PROPERTY_LETTERS.values()
        table.add_column(header, justify="center" if letter else "left")
    for row in rows:
        cells = [row.name]
        for regime in REGIMES:
            cells += [f"[green]{HOLDS}[/green]" if row.holds(p, regime) else f"[red]{BROKEN}[/red]" for p in PROPERTY_NAMES]
            cells.append(",".join(row.mechanisms(regime)) or NONE)
        m = row.matches_expected()
        cells.append(NONE if m is None else ("yes" if m else "[red]NO[/red]"))
        table.add_row(*cells)
    console = Console(width=160)
    console.print(table)
    console.print("\n".join(legend()), markup=False, highlight=False, soft_wrap=True)
