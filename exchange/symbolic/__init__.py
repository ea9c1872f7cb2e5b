"""Symbolic derivations (sympy) of token and shared-event coefficients, and of the
paper's quantitative claims (THEORY.md sections 3 and 4c).

- :func:`derive` : closed-form ``kappa``, ``K``, when ``K`` vanishes, binary-reward sign.
- :func:`closed_form_coefficients` : the closed form evaluated on a one-group rollout
  (to compare with ``exchange.token_coefficients``).
- :func:`necessity` : T2 for ``G = 2..8`` as a linear system; :func:`cor33_example`.
- :func:`prop31` and :func:`cor32` : the learning-tax KL and log-odds drift claims.
"""

from exchange.symbolic.catalog import NO_CLOSED_FORM, NoClosedForm, get_spec, spec_names
from exchange.symbolic.derive import ClosedForm, Derivation, RegionVerdict, closed_form, derive
from exchange.symbolic.numeric import closed_form_coefficients, closed_form_shared_K
from exchange.symbolic.spec import AdvantageForm, SymbolicSpec

__all__ = [
    "AdvantageForm",
    "ClosedForm",
    "Derivation",
    "NO_CLOSED_FORM",
    "NoClosedForm",
    "RegionVerdict",
    "SymbolicSpec",
    "closed_form",
    "closed_form_coefficients",
    "closed_form_shared_K",
    "derive",
    "get_spec",
    "spec_names",
]
