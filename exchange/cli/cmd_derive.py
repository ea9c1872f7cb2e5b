"""``exchange derive OBJECTIVE``: closed-form coefficients with sympy; ``--claim``: the
paper's quantitative claims (THEORY.md sections 3, 4c).

Exit codes: 0 derived / claim evaluated; 2 usage error or an objective without a
closed form (the message says why).
"""

from __future__ import annotations

import argparse

CLAIMS = ("t1", "necessity", "t3", "t4", "t5", "cor3.3", "prop3.1", "cor3.2", "hapo", "all")  # = claims.CLAIM_KEYS


from exchange.cli.options import add_group_size, add_params, add_targets


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "derive",
        help="closed-form token / shared-event coefficients (sympy), or check a paper claim",
        description="Differentiate an objective's surrogate symbolically for a group of G responses: "
        "the per-token coefficient, the shared-event coefficient K, when K vanishes for every reward "
        "vector, and its sign with one correct response. --claim checks the paper's corollaries.",
    )
    add_targets(p, many=False, default=None, help="catalog name (exchange list); omit with --claim or --list")
    add_group_size(p, default=3, help="group size for the derivation, 2..8")
    add_params(p, help="objective hyperparameter override, e.g. --param eps_high=0.28")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--latex", action="store_true", help="print formulas as LaTeX")
    fmt.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--ascii", action="store_true", help="ASCII instead of Unicode pretty-printing")
    p.add_argument("--all-regions", action="store_true",
                   help="every mixed region of the sequence ratios (GSPO; G <= 3)")
    p.add_argument("--claim", choices=CLAIMS, help="check a claim instead of deriving an objective")
    p.add_argument("--list", action="store_true", help="list derivable objectives and those without a closed form")
    p.set_defaults(func=run)


def _params(items: list[str]) -> dict[str, str | None]:
    from exchange.targets import parse_param_items

    return {k: None if v.lower() == "none" else v for k, v in parse_param_items(items).items()}


def run(args: argparse.Namespace) -> int:
    import json

    from exchange.errors import InvalidArgument

    if args.list:
        from exchange.symbolic import NO_CLOSED_FORM, spec_names

        print("derivable:", ", ".join(spec_names()))
        for name, why in NO_CLOSED_FORM.items():
            print(f"no closed form: {name}: {why}")
        return 0
    if args.claim:
        from exchange.symbolic.claims import check_claims

        results = check_claims(args.claim, G=args.group_size if args.group_size != 3 else None)
        if args.json:
            print(json.dumps([r.to_dict() for r in results], indent=2))
        else:
            print("\n\n".join(r.render(latex=args.latex) for r in results))
        return 0
    if not args.target:
        raise InvalidArgument("TARGET is missing: name an objective (exchange derive grpo), or pass --claim / --list.")
    from exchange.symbolic import derive
    from exchange.symbolic.render import render_latex, render_text

    d = derive(args.target, args.group_size, all_regions=args.all_regions, **_params(args.param))
    if args.json:
        print(json.dumps(d.to_dict(), indent=2, default=str))
    elif args.latex:
        print(render_latex(d))
    else:
        print(render_text(d, unicode=not args.ascii))
    return 0
