"""``exchange credit``: exact credit vs. each objective's expected event coefficients.

    exchange credit grpo --env template -G 4
    exchange credit grpo dr_grpo dapo rloo --env filler -G 3 --plot out.png

Prints the per-event table (visitation, true credit Q - V, entropy, I(y; R | c), the
expected coefficients), a summary per objective (drift on zero-credit events,
correlation with credit, learning tax) and the four-quadrant shares.
"""

from __future__ import annotations

import argparse

from exchange.cli.options import add_group_size, add_targets

__all__ = ["add_parser", "run"]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "credit",
        help="exact-credit oracle: true token credit vs. an objective's expected coefficients",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_targets(p, many=True, default=["grpo"], help="catalog objectives to compare (default: grpo)", old="--objective")
    p.add_argument("--env", default="template", help="built-in environment: template, filler, parity")
    add_group_size(p, default=4)
    p.add_argument("--seed", type=int, default=0, help="seed of the random tabular policy (default: 0)")
    p.add_argument("--scale", type=float, default=1.0, help="std of the policy's random logits (default: 1.0)")
    p.add_argument("--method", default="auto", choices=("auto", "exact", "monte-carlo"),
                   help="exact enumeration of groups, or Monte Carlo (auto: exact when small)")
    p.add_argument("--samples", type=int, default=20_000, help="Monte Carlo groups per prompt (default: 20000)")
    p.add_argument("--max-groups", type=int, default=20_000,
                   help="largest number of distinct groups per prompt enumerated exactly (default: 20000)")
    p.add_argument("--events", type=int, default=40, help="show at most this many events (default: 40)")
    p.add_argument("--plot", metavar="PATH", help="write the credit-vs-coefficient plot (PNG)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exchange.cli.options import check_output_path

    check_output_path("--plot", args.plot)
    import torch
    from rich.console import Console

    from exchange.errors import InvalidArgument
    from exchange.objectives import get
    from exchange.oracle import TabularPolicy, exact_credit, expected_coefficients, get_env

    torch.set_num_threads(1)
    if args.group_size < 2:
        raise InvalidArgument(f"--group-size={args.group_size}: group-relative objectives need G >= 2.")
    names = list(args.targets) or ["grpo"]
    loss_fns = [get(n).bind() for n in names]
    env = get_env(args.env)
    table = exact_credit(env, TabularPolicy.random(env, seed=args.seed, scale=args.scale))
    results = [
        expected_coefficients(fn, table, args.group_size, method=args.method, max_groups=args.max_groups,
                              samples=args.samples, seed=args.seed, name=n)
        for n, fn in zip(names, loss_fns)
    ]
    console = Console()
    if not console.is_terminal:  # piped output: wide enough for one objective pair per column
        console = Console(width=max(120, 80 + 24 * len(results)))
    from exchange.oracle.tables import event_table, quadrant_table, summary_table, t3_lines

    console.print(f"[bold]{env.name}[/bold]: {env.description}; tabular softmax policy, seed={args.seed}, "
                  f"logit scale={args.scale}; G={args.group_size}")
    console.print(event_table(table, results, limit=args.events))
    console.print(summary_table(results))
    console.print(quadrant_table(results))
    for line in t3_lines(results):
        console.print(line)
    if args.plot:
        from exchange.oracle.plot import plot_credit

        console.print(f"plot: {plot_credit(results, args.plot)}")
    return 0
