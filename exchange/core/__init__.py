"""The core: a validated batch (:mod:`~exchange.core.rollout`) and its files
(:mod:`~exchange.core.batch_io`), its token coefficients
(:mod:`~exchange.core.coefficients`), its events and shared residual
(:mod:`~exchange.core.events`), the metric keys that report them
(:mod:`~exchange.core.metric_keys`) and the vocabulary of the theory
(:mod:`~exchange.core.vocabulary`). Imports nothing above it."""
