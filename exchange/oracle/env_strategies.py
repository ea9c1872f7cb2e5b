"""Hypothesis strategies over random oracle environments and tabular policies.

``random_env(seed, ...)`` builds an environment whose reward is a seeded random table
over every token tuple; ``oracle_cases()`` draws ``(env, policy)`` pairs for property
tests (the CMI bound, the per-event policy-gradient identity).
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from exchange.errors import InvalidArgument
from exchange.oracle.env import Env
from exchange.oracle.policy import TabularPolicy

__all__ = ["random_env", "oracle_cases"]


def random_env(seed: int, vocab_size: int = 3, horizon: int = 3, n_prompts: int = 1, levels: int = 2,
               eos: bool = False, tie_last_token: bool = False) -> Env:
    """A random-reward environment: ``reward(tokens)`` is uniform on ``levels`` values
    ``0, 1/(levels-1), ..., 1``, fixed per (seed, prompt, tokens).

    ``tie_last_token``: the tabular policy ignores the most recent token (exercises
    tied contexts, whose tokens then share logits).
    """
    if levels < 2:
        raise InvalidArgument(f"levels={levels} must be >= 2.")

    def make(x: int):
        def reward(tokens: tuple[int, ...]) -> float:
            return random.Random(hash((seed, x, tokens))).randrange(levels) / (levels - 1)

        return reward

    state = (lambda prompt, prefix: (len(prefix), prefix[:-1])) if tie_last_token else None
    return Env(
        name=f"random-{seed}",
        vocab=tuple(f"t{i}" for i in range(vocab_size)),
        horizon=horizon,
        rewards=tuple(make(x) for x in range(n_prompts)),
        eos=vocab_size - 1 if eos else None,
        state=state,
    )


@st.composite
def oracle_cases(draw, max_vocab: int = 3, max_horizon: int = 3, max_prompts: int = 2):
    """``(env, TabularPolicy)`` with random sizes, rewards and logits (scale 0 to 4)."""
    env = random_env(
        seed=draw(st.integers(0, 2**16)),
        vocab_size=draw(st.integers(2, max_vocab)),
        horizon=draw(st.integers(1, max_horizon)),
        n_prompts=draw(st.integers(1, max_prompts)),
        levels=draw(st.integers(2, 3)),
        eos=draw(st.booleans()),
        tie_last_token=draw(st.booleans()),
    )
    scale = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0]))
    return env, TabularPolicy.random(env, seed=draw(st.integers(0, 2**16)), scale=scale)
