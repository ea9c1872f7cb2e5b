"""Command-line interface: ``exchange <command>``.

Each command lives in its own module ``exchange/cli/cmd_<name>.py`` exposing
``add_parser(subparsers)``; the module registers its sub-parser and sets
``func`` to a callable ``run(args) -> int`` (the exit code). Modules import their
heavy dependencies inside ``run`` so that ``exchange --help`` stays fast.

Exit codes: 0 every checked property holds / success, 1 a property is broken,
2 usage or input error (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys


# The explicit command registry (no import side effects): order = help order.
COMMANDS = ("list", "check", "inspect", "audit", "derive", "proofs", "measure", "credit", "experiment")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="exchange",
        description="Check token-gradient exchangeability of group-relative RL objectives.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"exchange.cli.cmd_{name}")
        except ModuleNotFoundError as err:  # command not built yet in this checkout
            if err.name != f"exchange.cli.cmd_{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from exchange.cli.options import merge_targets

    merge_targets(args)
    from exchange.cli.options import keep_hypothesis_out_of_the_tree

    keep_hypothesis_out_of_the_tree()
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"exchange {args.command}: interrupted", file=sys.stderr)
        return 130
    except SystemExit as err:  # user code (a loss, a target module) called sys.exit
        print(f"exchange {args.command}: error: user code called sys.exit({err.code!r}); nothing was checked", file=sys.stderr)
        return 2
    except Exception as err:  # user code raised: one line, never a traceback or a pass
        from exchange.errors import ExchangeError  # dependency-free: costs nothing at start-up

        if isinstance(err, ExchangeError):
            print(f"exchange {args.command}: error: {err}", file=sys.stderr)
            return 2
        print(f"exchange {args.command}: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
