"""Command-line interface: ``exchange [--debug] <command>``.

Each command lives in its own module ``exchange/cli/cmd_<name>.py`` exposing
``add_parser(subparsers)``; the module registers its sub-parser and sets
``func`` to a callable ``run(args) -> int`` (the exit code). Modules import their
heavy dependencies inside ``run`` so that ``exchange --help`` stays fast.

Exit codes:

- 0: every checked property holds / success;
- 1: a property is broken (or, for ``proofs``, a check failed);
- 2: the user's error: a usage or input error (an :class:`~exchange.errors.ExchangeError`,
  raised on purpose), user code (a loss, a target module) that raised or called
  ``sys.exit``, a training engine that rejected the user's configuration, or the
  operating system (a missing file, a full disk): one line on stderr, no traceback;
- 3: a bug in exchange (an exception raised inside the package's own code): one line
  that says so, where to report it and how to get the traceback;
- 130: interrupted (Ctrl-C).

A ``sys.exit(n)`` from the package's own code (a deliberate exit, its message already
printed) keeps its status ``n``.

:func:`is_internal_error` is the one rule that tells 2 from 3. ``--debug`` (before or
after the command) or ``EXCHANGE_DEBUG=1`` prints the full traceback above the line,
for a bug and for a user error alike (the exit code does not change).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys


# The explicit command registry (no import side effects): order = help order.
COMMANDS = ("list", "check", "inspect", "audit", "derive", "proofs", "measure", "credit", "experiment", "plot")

# Where a bug report goes (the one place that says it; there is no public URL).
BUG_REPORT = "the project's issue tracker"

# ``EXCHANGE_DEBUG=1`` (or true/yes/on) is ``--debug`` for every command.
DEBUG_ENV = "EXCHANGE_DEBUG"

EXIT_OK, EXIT_BROKEN, EXIT_USER_ERROR, EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# The training engines the adapters and the lab drive (exchange.libraries.LIBRARIES, by
# import name: skyrl is ``skyrl_train``). Their code runs on the user's configuration
# (``--param``, ``--trl-config``, an experiment's TOML), so an exception raised inside
# them counts as the user's (tests/cli/test_cli_errors.py checks the list against LIBRARIES).
ENGINE_PACKAGES = ("trl", "verl", "openrlhf", "skyrl_train", "areal", "art")

_DEBUG_HELP = f"on an error, print the full traceback (also: {DEBUG_ENV}=1)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="exchange",
        description="Check token-gradient exchangeability of group-relative RL objectives.",
        epilog="Exit codes: 0 holds / success, 1 a property is broken, 2 a usage or input error "
        "(or user code that failed), 3 a bug in exchange (report it).",
    )
    parser.add_argument("--debug", action="store_true", default=False, help=_DEBUG_HELP)
    from exchange.core.distribution import DISTRIBUTION, VERSION  # dependency-free

    parser.add_argument("--version", action="version", version=f"exchange {VERSION} ({DISTRIBUTION})")
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
    # ``--debug`` after the command too; SUPPRESS: absent there, the global flag stands.
    for command in {id(p): p for p in sub.choices.values()}.values():
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
    return parser


def debug_requested(args: argparse.Namespace | None = None) -> bool:
    """``--debug`` was given, or ``EXCHANGE_DEBUG`` is 1/true/yes/on."""
    flag = bool(getattr(args, "debug", False))
    return flag or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from exchange.cli.options import keep_hypothesis_out_of_the_tree, merge_targets

        merge_targets(args)
        keep_hypothesis_out_of_the_tree()
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"exchange {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseException as err:  # noqa: BLE001 -- every failure ends as one line and an exit code
        return _report(args.command, err, debug_requested(args))


def _report(command: str, err: BaseException, debug: bool) -> int:
    """Print what went wrong (one line; the traceback above it when ``debug``) and return
    the exit code: 2 for the user's error, 3 for a bug in exchange (:func:`is_internal_error`)."""
    if debug:
        import traceback

        traceback.print_exception(err, file=sys.stderr)
    internal = is_internal_error(err)
    if isinstance(err, SystemExit):
        if internal:  # the package (or a library it called) exits on purpose: keep its status
            return _exit_status(err.code)
        # user code (a loss, a target module) called sys.exit
        print(f"exchange {command}: error: user code called sys.exit({err.code!r}); nothing was checked", file=sys.stderr)
        return EXIT_USER_ERROR
    if not internal:  # the user's: one line, never a traceback (unless asked) or a pass
        from exchange.errors import ExchangeError  # dependency-free: costs nothing at start-up

        what = str(err) if isinstance(err, ExchangeError) else f"{type(err).__name__}: {err}"
        print(f"exchange {command}: error: {what}", file=sys.stderr)
        return EXIT_USER_ERROR
    lines = str(err).strip().splitlines()
    what = type(err).__name__ + (f": {lines[0]}" + (" ..." if len(lines) > 1 else "") if lines else "")
    how = ("report it with the command and the traceback above at " if debug else
           f"rerun with --debug (or {DEBUG_ENV}=1) for the traceback and report it with the command and the traceback at ")
    print(f"exchange {command}: internal error: {what} -- this is a bug in exchange; {how}{BUG_REPORT}", file=sys.stderr)
    return EXIT_INTERNAL_ERROR


def _exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives the process: None 0, an int itself, else 1 (the
    value printed, as Python does)."""
    if code is None:
        return EXIT_OK
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return EXIT_BROKEN


def is_internal_error(err: BaseException) -> bool:
    """Whether ``err`` is a bug in exchange (exit 3) rather than the user's error (exit 2).

    The rule:

    1. an :class:`~exchange.errors.ExchangeError` is the user's: the package raises it
       on purpose, about the input, with the fix in its message;
    2. so is an ``OSError`` or ``MemoryError``: the machine refused (a missing or
       unwritable file, a full disk, no memory), which the user fixes, not the package;
    3. any other exception is the user's when its traceback, walked from the raise point
       outward (or the traceback of the exception it was raised ``from``, or of one in an
       exception group), has a frame of **user code**: code that is neither the
       package's (a file in the installed ``exchange`` folder) nor a library's (the
       standard library, anything under site-packages/dist-packages such as torch,
       numpy, sympy, Hypothesis, rich, or code generated at run time, whose file name is
       ``<...>``). A frame of a training engine (:data:`ENGINE_PACKAGES`: TRL, verl,
       OpenRLHF, ...) counts as user code: the engine runs on the user's configuration
       and raises on it;
    4. otherwise it is a bug: the exception passed only through the package and the
       libraries it calls, so the innermost frame that is not a library's is the
       package's: exchange raised it, or handed a library something it should have
       validated first (validation raises an ``ExchangeError``, rule 1).

    The reason: user code can fail in any way, and a user frame anywhere on the way (a
    loss that calls a helper of exchange with a wrong argument counts too) means the one
    line names something the user can act on. The package's own code fails otherwise
    only through a bug; calling that "error" would send the user to search their own
    code for a fault that is not there, so it says "bug" and asks for a report.
    A library frame is transparent: torch raising on a tensor exchange built says
    nothing about the user. The limit of the rule: a user's module installed under
    site-packages reads as a library (its failures inside a loss are still the user's:
    the checker wraps what a loss raises in an ``ObjectiveError``).
    """
    from exchange.errors import ExchangeError

    seen: set[int] = set()
    todo = [err]
    while todo:
        exc = todo.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        if isinstance(exc, (ExchangeError, OSError, MemoryError)):
            return False
        if any(_origin(frame) == "user" for frame in _frames(exc)):
            return False
        if exc.__cause__ is not None:
            todo.append(exc.__cause__)
        members = getattr(exc, "exceptions", None)  # an exception group (3.11, or the 3.10 backport)
        if isinstance(members, tuple):
            todo.extend(m for m in members if isinstance(m, BaseException))
    return True


def _frames(exc: BaseException):
    import traceback

    return [frame for frame, _ in traceback.walk_tb(exc.__traceback__)]


def _origin(frame) -> str:
    """``"exchange"``, ``"library"`` or ``"user"``: where the code of ``frame`` lives
    (:func:`is_internal_error`, rule 3)."""
    filename = frame.f_code.co_filename
    if filename.startswith("<") and filename.endswith(">"):  # <frozen ...>, <string> (dataclasses)
        return "library"
    package, stdlib = _roots()
    path = os.path.realpath(filename)
    if path == package or path.startswith(package + os.sep):
        return "exchange"
    module = str(frame.f_globals.get("__name__") or "")
    parts = path.split(os.sep)
    installed = [i for i, part in enumerate(parts) if part in ("site-packages", "dist-packages")]
    top = parts[installed[-1] + 1].removesuffix(".py") if installed and installed[-1] + 1 < len(parts) else ""
    if module.split(".", 1)[0] in ENGINE_PACKAGES or top in ENGINE_PACKAGES:
        return "user"
    if installed or any(path == root or path.startswith(root + os.sep) for root in stdlib):
        return "library"
    return "user"


_ROOTS: tuple[str, tuple[str, ...]] | None = None


def _roots() -> tuple[str, tuple[str, ...]]:
    """The package's folder and the standard library's folders (real paths)."""
    global _ROOTS
    if _ROOTS is None:
        import sysconfig

        package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
        paths = sysconfig.get_paths()
        stdlib = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if k in paths}
        stdlib.add(os.path.dirname(os.path.realpath(os.__file__)))
        _ROOTS = (package, tuple(sorted(stdlib)))
    return _ROOTS


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
