"""Exact-credit oracle (THEORY.md section 6): small enumerable environments where the
true credit ``Q(c, y) - V(c)`` of every event, the hindsight posterior and
``I(y; R | c)`` are exact, and where each objective's expected event coefficients can
be compared with them without sampling noise.
"""

from exchange.oracle.closed_form import grpo_expected_shared_drift, grpo_shared_coefficient, hapo_shared_coefficient
from exchange.oracle.env import Env
from exchange.oracle.envs import env_names, filler_env, get_env, parity_env, template_env
from exchange.oracle.exact import EVENT_KINDS, ExactCredit, Responses, exact_credit, expected_reward
from exchange.oracle.expectation import QUADRANTS, ExpectedCoefficients, expected_coefficients
from exchange.oracle.gradient import event_policy_gradient, policy_gradient_coefficients
from exchange.oracle.information import conditional_mutual_information, entropy, hindsight_posterior
from exchange.oracle.policy import LMPolicy, TabularPolicy

__all__ = [
    "Env", "env_names", "get_env", "template_env", "filler_env", "parity_env",
    "TabularPolicy", "LMPolicy",
    "EVENT_KINDS", "ExactCredit", "Responses", "exact_credit", "expected_reward",
    "entropy", "hindsight_posterior", "conditional_mutual_information",
    "policy_gradient_coefficients", "event_policy_gradient",
    "QUADRANTS", "ExpectedCoefficients", "expected_coefficients",
    "grpo_shared_coefficient", "grpo_expected_shared_drift", "hapo_shared_coefficient",
]
