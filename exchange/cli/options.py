"""The one CLI vocabulary, shared by every command.

- the objective is a positional ``TARGET`` (one, or several where a command compares);
- ``--json`` prints one JSON document instead of tables;
- ``--regime on|off|both`` picks the regime;
- ``-G/--group-size`` is the number of responses per group;
- ``--param KEY=VALUE`` (repeatable) overrides a hyperparameter.

Older spellings (``--objective``, ``--objectives``, ``--G``, ``--format json``) keep
working for one release: they print a one-line deprecation notice on stderr and set
the new option.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from exchange.core.vocabulary import REGIMES, Regime  # torch-free

__all__ = [
    "REGIME_CHOICES",
    "add_group_size",
    "add_json",
    "add_params",
    "add_targets",
    "deprecated",
    "merge_targets",
    "regimes_of",
]

# --regime value -> the regimes checked (exchange.core.vocabulary.REGIMES spells them).
REGIME_CHOICES: dict[str, tuple[Regime, ...]] = {
    "on": (Regime.ON_POLICY,),
    "off": (Regime.OFF_POLICY,),
    "both": REGIMES,
}
REMOVED_IN = "0.3"


class _Deprecated(argparse.Action):
    """Store under the new option's ``dest`` and say once, on stderr, what to type instead."""

    def __init__(self, *args: Any, replacement: str, split: bool = False, **kwargs: Any) -> None:
        self.replacement = replacement
        self.split = split
        super().__init__(*args, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(
            f"{parser.prog}: {option_string} is deprecated and will be removed in {REMOVED_IN}; use {self.replacement}",
            file=sys.stderr,
        )
        if self.split:
            values = [v.strip() for v in str(values).split(",") if v.strip()]
        setattr(namespace, self.dest, values)


def deprecated(parser: argparse.ArgumentParser, old: str, *, dest: str, replacement: str,
               split: bool = False, **kwargs: Any) -> None:
    """Register ``old`` as a hidden, deprecated spelling of the option stored in ``dest``."""
    parser.add_argument(old, dest=dest, action=_Deprecated, replacement=replacement, split=split,
                        help=argparse.SUPPRESS, **kwargs)


def add_targets(parser: argparse.ArgumentParser, *, many: bool, default: str | list[str] | None,
                help: str, old: str | None = None) -> None:
    """The positional ``TARGET`` (``many``: zero or more), with ``old`` (``--objective``,
    ``--objectives``) as its deprecated comma-separated spelling."""
    dest = "targets" if many else "target"
    # argparse always stores a positional (its default when absent), so the deprecated
    # spelling keeps its own dest and set_defaults' hook merges the two after parsing.
    parser.add_argument(dest, nargs="*" if many else "?", metavar="TARGET", default=None, help=help)
    if old:
        deprecated(parser, old, dest=f"legacy_{dest}",
                   replacement="positional TARGET ..." if many else "a positional TARGET", split=many)
    parser.set_defaults(**{f"legacy_{dest}": None, f"default_{dest}": default})


def merge_targets(args: argparse.Namespace) -> None:
    """Fill ``args.target(s)`` from the positional, else the deprecated spelling, else
    the command's default (called by ``exchange.cli.main`` after parsing)."""
    for dest in ("targets", "target"):
        if hasattr(args, f"default_{dest}"):
            value = getattr(args, dest) or getattr(args, f"legacy_{dest}") or getattr(args, f"default_{dest}")
            setattr(args, dest, list(value) if dest == "targets" else value)


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")


def add_shrink(parser: argparse.ArgumentParser, default: bool) -> None:
    """``--shrink/--no-shrink``: shrink fuzz-found counterexamples (``check(shrink=...)``)."""
    parser.add_argument(
        "--shrink", action=argparse.BooleanOptionalAction, default=default,
        help="shrink a fuzz-found failure to a minimal counterexample (the verdicts do not depend on it; "
        f"--no-shrink reports the failing configuration as found, faster where shrinking dominates; default: {'on' if default else 'off'})",
    )


def add_group_size(parser: argparse.ArgumentParser, default: int, help: str = "responses per group") -> None:
    parser.add_argument("-G", "--group-size", dest="group_size", type=int, default=default,
                        help=f"{help} (default: {default})")
    deprecated(parser, "--G", dest="group_size", replacement="-G/--group-size", type=int)


def add_params(parser: argparse.ArgumentParser, help: str = "override a hyperparameter (repeatable)") -> None:
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help=help)


def regimes_of(value: str) -> tuple[str, ...]:
    """``--regime`` value -> regime names."""
    return REGIME_CHOICES[value]


def check_output_path(option: str, path: str | None) -> None:
    """Fail before the work, not after it: the folder of an output ``path`` must exist
    and be writable, and ``path`` must not be a folder."""
    if not path:
        return
    import os
    from pathlib import Path

    from exchange.errors import InvalidArgument

    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise InvalidArgument(f"{option} {path!r} is a folder; give a file name (e.g. {path.rstrip('/')}/plot.png).")
    if not folder.is_dir():
        raise InvalidArgument(f"{option} {path!r}: folder {str(folder)!r} does not exist; create it first.")
    if not os.access(folder, os.W_OK):
        raise InvalidArgument(f"{option} {path!r}: folder {str(folder)!r} is not writable.")


def keep_hypothesis_out_of_the_tree() -> None:
    """Hypothesis writes ``.hypothesis/`` into the working directory; unless the user
    configured a location (HYPOTHESIS_STORAGE_DIRECTORY), keep it in a cache folder."""
    import os
    import tempfile

    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    where = os.path.join(base, "exchange", "hypothesis")
    try:
        os.makedirs(where, exist_ok=True)
    except OSError:
        where = os.path.join(tempfile.gettempdir(), "exchange-hypothesis")
    # Hypothesis reads the variable when it is first imported, so this costs no import
    # of Hypothesis here (``exchange --help`` stays fast); set it before any command runs.
    if "hypothesis" in sys.modules:
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(where)
    else:
        os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = where
