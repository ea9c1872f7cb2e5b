"""The theorem registry (:mod:`~exchange.theory.registry`), the Coq proof driver
(:mod:`~exchange.theory.coq`) and its result cache (:mod:`~exchange.theory.cache`).
The links from properties and mechanisms to theorems are part of the vocabulary
(:mod:`exchange.core.vocabulary`)."""
