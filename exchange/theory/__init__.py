"""The theorem registry (:mod:`~exchange.theory.registry`) and the Coq proof driver
(:mod:`~exchange.theory.coq`). The links from properties and mechanisms to theorems
are part of the vocabulary (:mod:`exchange.core.vocabulary`)."""
