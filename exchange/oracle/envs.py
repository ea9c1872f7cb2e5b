"""Built-in oracle environments and their registry.

- ``template``: every response starts with the fixed answer prefix ``ans =`` (shared
  events, true credit 0), then 1-3 digits; the reward is an exact match. Prompt ``p0``
  wants ``1`` (the correct answer is the shortest response), prompt ``p1`` wants
  ``0 1 1`` (the longest): GRPO's length drift (T3) has opposite signs on the two.
- ``filler``: a preamble filler (``,`` or ``;``), one decision digit that fixes the
  reward, then filler or ``<eos>``. Filler events have zero credit by construction;
  the preamble ones occur independently of reward and length, the tail ones change
  the length only.
- ``parity``: four binary tokens, reward ``y[1] xor y[3]``: two decision positions
  carry all the credit, the same tokens at positions 0 and 2 carry none.

Users build their own with :class:`~exchange.oracle.env.Env` and a plain
``reward(tokens) -> float``.
"""

from __future__ import annotations

from typing import Callable

from exchange.errors import InvalidArgument
from exchange.oracle.env import Env

__all__ = ["template_env", "filler_env", "parity_env", "get_env", "env_names"]


def _exact_match(target: tuple[int, ...], start: int, eos: int) -> Callable[[tuple[int, ...]], float]:
    def reward(tokens: tuple[int, ...]) -> float:
        answer = tuple(t for t in tokens[start:] if t != eos)
        return 1.0 if answer == target else 0.0

    return reward


def template_env() -> Env:
    """``ans = d [d [d]] [<eos>]``; rewards: exact match of ``1`` (p0) and ``0 1 1`` (p1)."""
    ans, eq, zero, one, eos = range(5)

    def allowed(prompt: int, prefix: tuple[int, ...]) -> tuple[int, ...]:
        t = len(prefix)
        if t == 0:
            return (ans,)
        if t == 1:
            return (eq,)
        if t == 2:
            return (zero, one)
        return (zero, one, eos)

    return Env(
        name="template",
        vocab=("ans", "=", "0", "1", "<eos>"),
        horizon=5,
        rewards=(_exact_match((one,), 2, eos), _exact_match((zero, one, one), 2, eos)),
        prompts=("answer-1", "answer-011"),
        eos=eos,
        allowed=allowed,
        zero_credit_tokens=frozenset({ans, eq}),
        description="fixed answer prefix 'ans =' then 1-3 digits; exact-match reward",
    )


def filler_env() -> Env:
    """``f d [f [f|<eos>]|<eos>]`` with filler ``f`` in {``,``, ``;``}; reward ``d == 1``.

    The tabular policy keys on (position, non-filler tokens): the choice between two
    fillers never changes what follows, so filler events have credit exactly 0.
    """
    zero, one, comma, semi, eos = range(5)
    fillers = frozenset({comma, semi})

    def allowed(prompt: int, prefix: tuple[int, ...]) -> tuple[int, ...]:
        t = len(prefix)
        if t == 0:
            return (comma, semi)
        if t == 1:
            return (zero, one)
        return (comma, semi, eos)

    def state(prompt: int, prefix: tuple[int, ...]) -> tuple:
        return (len(prefix), tuple(t for t in prefix if t not in fillers))

    def reward(tokens: tuple[int, ...]) -> float:
        return 1.0 if tokens[1] == one else 0.0

    return Env(
        name="filler",
        vocab=("0", "1", ",", ";", "<eos>"),
        horizon=4,
        rewards=(reward,),
        prompts=("say-1",),
        eos=eos,
        allowed=allowed,
        state=state,
        zero_credit_tokens=fillers,
        description="preamble filler, one decision digit, filler tail or <eos>; reward = digit is 1",
    )


def parity_env(tie_irrelevant: bool = True) -> Env:
    """Four binary tokens, reward ``y[1] xor y[3]``.

    With ``tie_irrelevant`` the tabular policy keys on (position, decision tokens), so
    positions 0 and 2 carry zero credit exactly; without it they carry weak credit
    through their effect on the later policy.
    """
    decisions = (1, 3)

    def state(prompt: int, prefix: tuple[int, ...]) -> tuple:
        return (len(prefix), tuple(prefix[i] for i in decisions if i < len(prefix)))

    def reward(tokens: tuple[int, ...]) -> float:
        return float(tokens[1] ^ tokens[3])

    return Env(
        name="parity",
        vocab=("0", "1"),
        horizon=4,
        rewards=(reward,),
        prompts=("xor-1-3",),
        state=state if tie_irrelevant else None,
        description="4 binary tokens, reward y[1] xor y[3]; positions 0 and 2 irrelevant",
    )


_ENVS: dict[str, Callable[[], Env]] = {"template": template_env, "filler": filler_env, "parity": parity_env}


def env_names() -> list[str]:
    return list(_ENVS)


def get_env(name: str) -> Env:
    """A built-in environment by name; unknown names list the built-ins."""
    try:
        return _ENVS[name]()
    except KeyError:
        raise InvalidArgument(f"env={name!r} is not a built-in; choose one of: {', '.join(_ENVS)}.") from None
