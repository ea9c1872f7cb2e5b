"""Registers every catalog objective in verl when verl is imported, in every process.

verl computes the policy loss in Ray worker processes, which never run the driver's
``register()``. verl 0.9.1 imports two kinds of plugin in ``verl/__init__.py``, so in
every worker:

- the ``verl.plugins`` entry point group: this package declares
  ``exchange = "exchange.libraries.verl.plugin"`` (pyproject.toml), so with exchange
  installed (``pip install -e .``) nothing else is needed. verl's
  ``VERL_USE_EXTERNAL_PLUGINS`` (default ``auto``) must not be ``none``; ``exchange``
  names this plugin in a list;
- ``VERL_USE_EXTERNAL_MODULES=exchange.libraries.verl.plugin`` (comma-separated module
  list), for an environment where exchange is on ``PYTHONPATH`` but not installed. Set
  it in Ray's runtime env so workers inherit it:
  ``+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=exchange.libraries.verl.plugin``.

Then ``actor_rollout_ref.actor.policy_loss.loss_mode=exchange_dapo`` (any
``exchange_<objective>``) works in the workers. Set ``EXCHANGE_VERL_OBJECTIVES=dapo,grpo``
to register only those. ``EXCHANGE_VERL_MONITOR=1`` also wraps verl's ``ppo_loss`` in the
monitor (:mod:`exchange.libraries.verl.monitor`: ``tax/*`` of every optimizer step).

A bad ``EXCHANGE_VERL_OBJECTIVES`` (``dapoo``) stops the process with exit status 2 and
one line naming it. verl loads entry-point plugins inside ``except Exception:
logging.debug(...)``, so an ordinary exception would vanish and the ``loss_mode`` lookup
fail later without its cause; ``SystemExit`` is not an ``Exception``.
"""

from __future__ import annotations

import os
import sys

from exchange.errors import ExchangeError, InvalidArgument
from exchange.libraries.verl.monitor import install as install_monitor
from exchange.libraries.verl.monitor import wanted as wanted_monitor
from exchange.libraries.verl.register import register

ENV = "EXCHANGE_VERL_OBJECTIVES"


def chosen_objectives(value: str) -> list[str] | None:
    """The objectives ``EXCHANGE_VERL_OBJECTIVES=value`` names (``None``: all), each checked
    against the catalog; an unknown one raises :class:`InvalidArgument` naming it."""
    from exchange.objectives import get

    from exchange.libraries.verl.register import refuse_surgical

    names = [n.strip() for n in value.split(",") if n.strip()]
    for name in names:
        try:
            refuse_surgical(name)
            get(name)
        except InvalidArgument as err:
            raise InvalidArgument(f"{ENV}={value!r}: {err}") from None
    return names or None


try:
    REGISTERED = register(chosen_objectives(os.environ.get(ENV, "")))
    if wanted_monitor():  # EXCHANGE_VERL_MONITOR=1: tax/* of every optimizer step (exchange.libraries.verl.monitor)
        install_monitor()
except ExchangeError as err:
    print(f"exchange verl plugin: {err}", file=sys.stderr)
    raise SystemExit(2) from err
