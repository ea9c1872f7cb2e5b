"""Training-side hooks: use exchange objectives inside TRL and verl.

- :mod:`exchange.integrations.trl`: ``ExchangeGRPOTrainer``, a TRL ``GRPOTrainer`` whose
  loss is any exchange objective, logging the shared-event residual every step.
- :mod:`exchange.integrations.verl`: ``register()`` puts exchange objectives in verl's
  policy-loss registry so a verl config can name them.

Each submodule imports its library at import time; this package imports nothing heavy.
"""
