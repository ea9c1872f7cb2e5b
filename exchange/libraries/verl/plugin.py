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
to register only those.
"""

from __future__ import annotations

import os

from exchange.libraries.verl.register import register

_chosen = [n.strip() for n in os.environ.get("EXCHANGE_VERL_OBJECTIVES", "").split(",") if n.strip()]
REGISTERED = register(_chosen or None)
