"""Parameter-space measurements of token-gradient cancellation (THEORY.md 1, 4c, 5, 6).

Each measurement runs on a model (:class:`~exchange.models.TinyLM` or a Hugging Face
causal LM), an objective ``loss_fn(logprobs, rollout)`` and a rollout that carries its
prompts, at about the cost of a backward pass:

- :func:`learning_tax`: share of the update carried by zero-credit occurrences
  (masked backward passes);
- :func:`token_space_cancellation`: cancellation on output-embedding rows (closed form);
- :func:`kl_prediction`: Prop. 3.1, ``1/2 eta^2 g^T F g`` from one JVP against the
  measured KL of the step;
- :func:`per_occurrence_grads`: ``grad l[i,t]`` per occurrence (torch.func vmap), with
  :func:`same_token_cosines` and :func:`cosine_histogram`.

:func:`sample_rollout` / :func:`rollout_from_tokens` build event-consistent rollouts
from a model.
"""

from exchange.paramspace.kl import KLPrediction, context_mask, kl_prediction
from exchange.paramspace.occurrence import (
    OccurrenceGrads,
    cosine_histogram,
    per_occurrence_grads,
    per_occurrence_grads_loop,
    plot_cosine_histogram,
    same_token_cosines,
)
from exchange.paramspace.sampling import rollout_from_tokens, sample_rollout
from exchange.paramspace.tax import LearningTax, ZeroCredit, learning_tax, zero_credit_occurrences
from exchange.paramspace.token_space import TokenCancellation, head_features, token_space_cancellation

__all__ = [
    "KLPrediction",
    "LearningTax",
    "OccurrenceGrads",
    "TokenCancellation",
    "ZeroCredit",
    "context_mask",
    "cosine_histogram",
    "head_features",
    "kl_prediction",
    "learning_tax",
    "per_occurrence_grads",
    "per_occurrence_grads_loop",
    "plot_cosine_histogram",
    "rollout_from_tokens",
    "same_token_cosines",
    "sample_rollout",
    "token_space_cancellation",
    "zero_credit_occurrences",
]
