"""``exchange list``: the built-in objectives, one line each, with their sources."""

from __future__ import annotations

import json


def add_parser(sub) -> None:
    p = sub.add_parser("list", help="list built-in objectives with their sources")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def _verdict(expected) -> str:
    if expected is None:
        return "?"
    if not expected.breaks:
        return "holds"
    return "breaks " + ",".join(sorted(expected.mechanisms)) if expected.mechanisms else "breaks"


def run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from exchange.objectives import get, names

    objs = [get(n) for n in names()]
    if args.json:
        print(json.dumps([
            {
                "name": o.name,
                "summary": o.summary,
                "source": o.source,
                "defaults": {k: v for k, v in o.defaults.items()},
                "expected": {r: {"breaks": sorted(e.breaks), "mechanisms": sorted(e.mechanisms)} for r, e in o.expected.items()},
            }
            for o in objs
        ], indent=2))
        return 0
    table = Table(title=f"{len(objs)} built-in objectives")
    for col in ("name", "summary", "source", "on-policy", "off-policy"):
        table.add_column(col)
    for o in objs:
        table.add_row(o.name, o.summary, o.source, _verdict(o.expected.get("on_policy")), _verdict(o.expected.get("off_policy")))
    Console(width=160).print(table)
    return 0
