"""``Env``: a small verifiable-reward environment whose responses can all be enumerated.

A response to prompt ``x`` is a token tuple ``y = (y_1, ..., y_L)`` over a vocabulary
of a few tokens, ``1 <= L <= horizon``. It ends when the end token ``eos`` is emitted
(the end token is part of the response, as in an LLM) or at the horizon. The reward
is a plain callable on the token tuple, one per prompt.

Two optional hooks shape the policy:

- ``allowed(prompt, prefix) -> tokens``: the tokens the policy may emit next (a fixed
  template position allows one token; a decision position allows the answer digits).
- ``state(prompt, prefix) -> hashable``: the context key of a tabular policy. Two
  prefixes with the same key share one next-token distribution. The default keys on
  the whole prefix; the filler environments key on the reward-relevant tokens only, so
  that filler tokens carry exactly zero credit by construction (THEORY.md section 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

from exchange.errors import InvalidArgument

__all__ = ["Env", "RewardFn", "MAX_HORIZON", "MAX_VOCAB"]

RewardFn = Callable[[tuple[int, ...]], float]
"""``reward(tokens) -> float``: the verifiable reward of one response (``tokens`` is the
response token-id tuple, end token included)."""

MAX_VOCAB = 6
MAX_HORIZON = 8


@dataclass(frozen=True)
class Env:
    """An enumerable environment.

    Fields:
        name: short name shown in tables.
        vocab: token names; token ids are ``0 .. len(vocab)-1`` (2 to 6 tokens).
        horizon: the longest response (1 to 8 tokens).
        rewards: one reward callable per prompt (``reward(tokens) -> float``).
        prompts: prompt names, one per reward (default ``p0, p1, ...``).
        prompt_weights: the prompt distribution (default uniform).
        eos: the end token id, or None for fixed-length responses.
        allowed: ``allowed(prompt, prefix) -> Sequence[int]``, the legal next tokens
            (default every token; ``eos`` is never legal as the first token).
        state: ``state(prompt, prefix) -> hashable``, the tabular policy's context key
            (default ``(prompt, prefix)``: one distribution per context).
        zero_credit_tokens: token ids the environment declares reward-irrelevant
            (fillers); the oracle verifies that their credit is 0.
        description: one line for ``exchange credit``.
    """

    name: str
    vocab: tuple[str, ...]
    horizon: int
    rewards: tuple[RewardFn, ...]
    prompts: tuple[str, ...] = ()
    prompt_weights: tuple[float, ...] = ()
    eos: int | None = None
    allowed: Callable[[int, tuple[int, ...]], Sequence[int]] | None = field(default=None, repr=False)
    state: Callable[[int, tuple[int, ...]], Hashable] | None = field(default=None, repr=False)
    zero_credit_tokens: frozenset[int] = frozenset()
    description: str = ""

    def __post_init__(self) -> None:
        if callable(self.rewards):
            object.__setattr__(self, "rewards", (self.rewards,))
        object.__setattr__(self, "vocab", tuple(self.vocab))
        object.__setattr__(self, "rewards", tuple(self.rewards))
        object.__setattr__(self, "zero_credit_tokens", frozenset(self.zero_credit_tokens))
        if not 2 <= len(self.vocab) <= MAX_VOCAB:
            raise InvalidArgument(
                f"Env.vocab has len={len(self.vocab)} tokens; use 2 to {MAX_VOCAB} so every response can be enumerated."
            )
        if not 1 <= self.horizon <= MAX_HORIZON:
            raise InvalidArgument(f"Env.horizon={self.horizon} must be in 1..{MAX_HORIZON}.")
        if not self.rewards or not all(callable(r) for r in self.rewards):
            raise InvalidArgument("Env.rewards must be one callable reward(tokens) -> float per prompt.")
        if not self.prompts:
            object.__setattr__(self, "prompts", tuple(f"p{i}" for i in range(len(self.rewards))))
        if len(self.prompts) != len(self.rewards):
            raise InvalidArgument(
                f"Env.prompts has len={len(self.prompts)} but rewards has len={len(self.rewards)}; give one reward per prompt."
            )
        if not self.prompt_weights:
            object.__setattr__(self, "prompt_weights", tuple(1.0 / len(self.prompts) for _ in self.prompts))
        w = tuple(float(v) for v in self.prompt_weights)
        if len(w) != len(self.prompts) or min(w) <= 0 or abs(sum(w) - 1.0) > 1e-9:
            raise InvalidArgument(
                f"Env.prompt_weights={w} must be {len(self.prompts)} positive numbers summing to 1."
            )
        object.__setattr__(self, "prompt_weights", w)
        if self.eos is not None and not 0 <= self.eos < len(self.vocab):
            raise InvalidArgument(f"Env.eos={self.eos} is not a token id in 0..{len(self.vocab) - 1}.")
        bad = sorted(t for t in self.zero_credit_tokens if not 0 <= t < len(self.vocab))
        if bad:
            raise InvalidArgument(f"Env.zero_credit_tokens has unknown token id {bad[0]}.")

    @property
    def n_prompts(self) -> int:
        return len(self.prompts)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def legal(self, prompt: int, prefix: tuple[int, ...]) -> tuple[int, ...]:
        """The legal next tokens at ``prefix`` (sorted, non-empty)."""
        if self.allowed is None:
            tokens = tuple(range(self.vocab_size))
            if not prefix and self.eos is not None:
                tokens = tuple(t for t in tokens if t != self.eos)
        else:
            tokens = tuple(sorted(set(int(t) for t in self.allowed(prompt, prefix))))
        if not tokens or not all(0 <= t < self.vocab_size for t in tokens):
            raise InvalidArgument(
                f"Env {self.name!r}: allowed(prompt={prompt}, prefix={prefix}) returned {tokens}; "
                f"return a non-empty set of token ids in 0..{self.vocab_size - 1}."
            )
        return tokens

    def key(self, prompt: int, prefix: tuple[int, ...]) -> Hashable:
        """The tabular policy's context key of ``prefix``."""
        return (prompt, prefix) if self.state is None else (prompt, self.state(prompt, prefix))

    def ends(self, response: tuple[int, ...]) -> bool:
        """True when ``response`` is complete (end token emitted or horizon reached)."""
        return len(response) >= self.horizon or (self.eos is not None and bool(response) and response[-1] == self.eos)

    def reward(self, prompt: int, response: tuple[int, ...]) -> float:
        """The reward of a complete response, checked to be a finite number."""
        try:
            value = float(self.rewards[prompt](tuple(response)))
        except Exception as err:  # a user's reward: say which response made it fail
            raise InvalidArgument(
                f"Env {self.name!r}: reward of prompt={prompt} raised {type(err).__name__}: {err} "
                f"on tokens={tuple(response)}."
            ) from err
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidArgument(f"Env {self.name!r}: reward(tokens={tuple(response)}) = {value} is not finite.")
        return value

    def show(self, tokens: Sequence[int]) -> str:
        """Token ids as their names, space separated (``"ans = 1 <eos>"``)."""
        return " ".join(self.vocab[t] for t in tokens)
