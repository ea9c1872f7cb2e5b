"""The theorem registry (:mod:`~exchange.theory.registry`), the Coq proof driver
(:mod:`~exchange.theory.coq`), the reviewed record of the statements
(:mod:`~exchange.theory.record`) and its non-vacuity shape
(:mod:`~exchange.theory.nonvacuity`), the checks of the development as a whole
(:mod:`~exchange.theory.development`), the link to the package's code
(:mod:`~exchange.theory.link`) and the result cache (:mod:`~exchange.theory.cache`).
The links from properties and mechanisms to theorems are part of the vocabulary
(:mod:`exchange.core.vocabulary`)."""
