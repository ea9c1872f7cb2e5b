"""The core: a validated batch (:mod:`~exchange.core.rollout`), its token coefficients
(:mod:`~exchange.core.coefficients`), its events (:mod:`~exchange.core.events`) and the
vocabulary of the theory (:mod:`~exchange.core.vocabulary`). Imports nothing above it."""
