"""The one-line command that reproduces a report (``Report.reproduce``)."""

from __future__ import annotations

import functools
import inspect
import os

from exchange.core.coefficients import LossFn
from exchange.core.vocabulary import REGIMES

__all__ = ["reproduce_line"]


def reproduce_line(loss_fn: LossFn, label: str, regimes, seed: int, max_examples: int, shrink: bool) -> str:
    """``exchange check TARGET [--regime on|off] --seed S --max-examples N [--no-shrink]``;
    for a loss that carries ``exchange_expression`` (a Python expression that builds it,
    e.g. ``exchange.compose(...).bind()``, which no CLI target names) the same call in
    ``python -c``."""
    expression = getattr(loss_fn, "exchange_expression", None)
    if expression:
        regime_arg = "" if len(regimes) == len(REGIMES) else f", regimes=({str(regimes[0])!r},)"
        shrink_arg = "" if shrink else ", shrink=False"
        return (f'python -c "import exchange; print(exchange.check({expression}, seed={seed}, '
                f'max_examples={max_examples}{regime_arg}{shrink_arg}))"')
    regime_flag = "" if len(regimes) == len(REGIMES) else f" --regime {'off' if regimes[0].off_policy else 'on'}"
    return (f"exchange check {_target(loss_fn, label)}{regime_flag} --seed {seed} --max-examples {max_examples}"
            + " --no-shrink" * (not shrink))


def _target(loss_fn: LossFn, label: str) -> str:
    """A TARGET the CLI can resolve: ``path/to/file.py:function`` for a user's module-level
    function, the label for built-ins (and for functions the CLI cannot reach)."""
    fn = loss_fn
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = inspect.unwrap(fn) if callable(fn) else fn
    module = getattr(fn, "__module__", "") or ""
    qual = getattr(fn, "__qualname__", "") or ""
    if module.startswith("exchange.") or not qual or "<" in qual or "." in qual:
        return label
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return label
    if not path or not os.path.isfile(path):
        return label
    rel = os.path.relpath(path)
    return f"{path if rel.startswith('..') else rel}:{qual}"
