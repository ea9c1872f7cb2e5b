"""Policies for the oracle: a tabular softmax over context keys, or the tiny LM.

A policy answers ``probs(prompt, prefix) -> Tensor[V]`` (float64, zero outside the
legal tokens, summing to 1). The tabular policy is differentiable in its logits, so
the exact expected reward can be differentiated with autograd (the policy-gradient
check in tests/oracle).
"""

from __future__ import annotations

from typing import Hashable, Protocol

import torch
from torch import Tensor

from exchange.errors import InvalidArgument
from exchange.oracle.env import Env

__all__ = ["Policy", "TabularPolicy", "LMPolicy", "context_keys"]


class Policy(Protocol):
    def probs(self, prompt: int, prefix: tuple[int, ...]) -> Tensor:
        """``Tensor[V]`` next-token distribution at ``(prompt, prefix)``, float64."""
        ...


def context_keys(env: Env) -> list[Hashable]:
    """Every context key the environment can reach, in first-visit (depth-first) order."""
    seen: dict[Hashable, None] = {}

    def walk(prompt: int, prefix: tuple[int, ...]) -> None:
        seen.setdefault(env.key(prompt, prefix))
        for y in env.legal(prompt, prefix):
            child = prefix + (y,)
            if not env.ends(child):
                walk(prompt, child)

    for x in range(env.n_prompts):
        walk(x, ())
    return list(seen)


def _masked_softmax(logits: Tensor, legal: tuple[int, ...]) -> Tensor:
    mask = torch.full(logits.shape, float("-inf"), dtype=logits.dtype)
    mask[list(legal)] = 0.0
    return torch.softmax(logits + mask, dim=-1)


class TabularPolicy:
    """``pi(y | c) = softmax(theta[key(c)])`` over the legal tokens.

    ``logits``: ``Tensor[S, V]`` float64, one row per context key (``keys[s]``). Keep
    ``requires_grad`` on it to differentiate exact expectations.
    """

    def __init__(self, env: Env, logits: Tensor, keys: list[Hashable] | None = None) -> None:
        self.env = env
        self.keys = context_keys(env) if keys is None else list(keys)
        self.index = {k: s for s, k in enumerate(self.keys)}
        expected = (len(self.keys), env.vocab_size)
        if tuple(logits.shape) != expected:
            raise InvalidArgument(
                f"TabularPolicy logits shape={list(logits.shape)}; env {env.name!r} needs "
                f"[S={expected[0]} context keys, V={expected[1]}]."
            )
        if not logits.is_floating_point():
            raise InvalidArgument(f"TabularPolicy logits dtype={logits.dtype}; pass float64 logits.")
        self.logits = logits

    @classmethod
    def random(cls, env: Env, seed: int = 0, scale: float = 1.0) -> "TabularPolicy":
        """Logits drawn i.i.d. ``N(0, scale^2)`` (``scale=0``: uniform over legal tokens)."""
        if scale < 0:
            raise InvalidArgument(f"scale={scale} must be >= 0.")
        keys = context_keys(env)
        gen = torch.Generator().manual_seed(seed)
        logits = torch.randn(len(keys), env.vocab_size, generator=gen, dtype=torch.float64) * scale
        return cls(env, logits, keys)

    def with_logits(self, logits: Tensor) -> "TabularPolicy":
        return TabularPolicy(self.env, logits, self.keys)

    def row(self, prompt: int, prefix: tuple[int, ...]) -> int:
        """Index ``s`` of the logit row used at ``(prompt, prefix)``."""
        key = self.env.key(prompt, prefix)
        try:
            return self.index[key]
        except KeyError:
            raise InvalidArgument(
                f"context (prompt={prompt}, prefix={prefix}) is not reachable in env {self.env.name!r}."
            ) from None

    def probs(self, prompt: int, prefix: tuple[int, ...]) -> Tensor:
        return _masked_softmax(self.logits[self.row(prompt, prefix)], self.env.legal(prompt, prefix))


class LMPolicy:
    """The tiny LM of :mod:`exchange.models` as an oracle policy.

    ``prompt_tokens[x]`` are the token ids fed before the response for prompt ``x``;
    the LM's first ``env.vocab_size`` logits are used, masked to the legal tokens.
    The LM conditions on the whole prefix (no state tying), like a real LLM.
    """

    def __init__(self, env: Env, model: torch.nn.Module, prompt_tokens: list[tuple[int, ...]] | None = None) -> None:
        vocab = getattr(getattr(model, "cfg", None), "vocab_size", None)
        if vocab is not None and vocab < env.vocab_size:
            raise InvalidArgument(
                f"model vocab_size={vocab} < env vocab of {env.vocab_size} tokens; build the TinyLM with "
                f"TinyLMConfig(vocab_size={env.vocab_size})."
            )
        if prompt_tokens is None:
            prompt_tokens = [(x % env.vocab_size,) for x in range(env.n_prompts)]
        if len(prompt_tokens) != env.n_prompts or any(len(p) == 0 for p in prompt_tokens):
            raise InvalidArgument(
                f"prompt_tokens has {len(prompt_tokens)} entries; give one non-empty token tuple per prompt "
                f"({env.n_prompts})."
            )
        self.env = env
        self.model = model
        self.prompt_tokens = [tuple(int(t) for t in p) for p in prompt_tokens]
        self._cache: dict[tuple[int, tuple[int, ...]], Tensor] = {}

    def probs(self, prompt: int, prefix: tuple[int, ...]) -> Tensor:
        key = (prompt, prefix)
        if key not in self._cache:
            ids = torch.tensor([self.prompt_tokens[prompt] + prefix], dtype=torch.long)
            with torch.no_grad():
                logits = self.model(ids)[0, -1, : self.env.vocab_size].to(torch.float64)  # [V]
            self._cache[key] = _masked_softmax(logits, self.env.legal(prompt, prefix))
        return self._cache[key]
