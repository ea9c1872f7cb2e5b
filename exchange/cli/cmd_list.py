"""``exchange list``: the built-in objectives, one line each, with their sources.

The catalog's metadata is read from ``catalog.json`` next to this module, so the command
does not import torch and the objectives (0.1 s instead of ~2 s). The file is generated
from the live catalog by ``python -m exchange.cli.cmd_list --write``, and
tests/cli/test_cli_speed.py fails when it is stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from exchange.core.vocabulary import Regime  # torch-free

CATALOG = Path(__file__).with_name("catalog.json")


def add_parser(sub) -> None:
    p = sub.add_parser("list", help="list built-in objectives with their sources")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def live_catalog() -> list[dict]:
    """The catalog's metadata, computed from the objectives (imports torch)."""
    from exchange.objectives import get, names

    return [
        {
            "name": o.name,
            "summary": o.summary,
            "source": o.source,
            "defaults": {k: v for k, v in o.defaults.items()},
            "expected": {r: {"breaks": sorted(e.breaks), "mechanisms": sorted(e.mechanisms)} for r, e in o.expected.items()},
        }
        for o in map(get, names())
    ]


def catalog() -> list[dict]:
    try:
        return json.loads(CATALOG.read_text())
    except OSError:
        return live_catalog()


def _verdict(expected: dict | None) -> str:
    if expected is None:
        return "?"
    if not expected["breaks"]:
        return "holds"
    return "breaks " + ",".join(expected["mechanisms"]) if expected["mechanisms"] else "breaks"


def run(args) -> int:
    objs = catalog()
    if args.json:
        print(json.dumps(objs, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(objs)} built-in objectives")
    for col in ("name", "summary", "source", "on-policy", "off-policy"):
        table.add_column(col)
    for o in objs:
        table.add_row(o["name"], o["summary"], o["source"], _verdict(o["expected"].get(Regime.ON_POLICY)),
                      _verdict(o["expected"].get(Regime.OFF_POLICY)))
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:] == ["--write"]:
        CATALOG.write_text(json.dumps(live_catalog(), indent=2) + "\n")
