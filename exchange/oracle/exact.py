"""Exact per-event credit by enumeration (THEORY.md section 6), float64.

For every prompt ``x`` the oracle walks the tree of all responses. For each context
``c = (x, prefix)`` it records the visitation probability ``d(c) = P(prefix | x)``, the
value ``V(c) = E[R | c]``, the entropy ``H(y | c)`` and ``I(y; R | c)``; for each event
``e = (x, prefix, y)`` the action value ``Q(c, y)``, the true credit ``A = Q - V``
and the hindsight posterior ``p(y | c, R = r)``.

Event kinds (``EVENT_KINDS``):
- ``shared``: occurs in every response of the prompt (``d pi = 1``); credit 0.
- ``null``: credit 0 and its occurrence is independent of the response's (reward,
  length): THEORY.md (D) says an exchangeable objective must not move it in expectation.
- ``zero``: credit 0 (``|Q - V| <= tol``) but its occurrence is informative (a filler
  after the decision, which changes the length only).
- ``credit``: the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from exchange.errors import InvalidArgument
from exchange.oracle.env import Env
from exchange.oracle.information import conditional_mutual_information, entropy, hindsight_posterior
from exchange.oracle.policy import Policy

__all__ = ["EVENT_KINDS", "Responses", "ExactCredit", "exact_credit", "expected_reward", "MAX_RESPONSES"]

EVENT_KINDS = ("shared", "null", "zero", "credit")
MAX_RESPONSES = 20_000
# Credit below this (times the reward range) counts as zero: sums of <= 10^4 float64
# products stay ~1e-13 from their exact value.
CREDIT_TOL = 1e-10


@dataclass(frozen=True)
class Responses:
    """All responses of one prompt. ``M`` responses, ``T = env.horizon``.

    Fields: ``tokens`` ``int64[M, T]`` (right-padded with 0), ``lengths`` ``int64[M]``,
    ``prob`` ``float64[M]`` = ``pi(y | x)``, ``reward`` ``float64[M]``, ``logprobs``
    ``float64[M, T]`` = ``log pi(y_t | x, y_<t)`` (0 on padding), ``entropy``
    ``float64[M, T]`` = ``H(. | x, y_<t)``, ``event`` ``int64[M, T]`` global event id
    (-1 on padding).
    """

    prompt: int
    tokens: np.ndarray
    lengths: np.ndarray
    prob: np.ndarray
    reward: np.ndarray
    logprobs: np.ndarray
    entropy: np.ndarray
    event: np.ndarray

    @property
    def m(self) -> int:
        return int(self.prob.shape[0])


@dataclass(frozen=True)
class ExactCredit:
    """Exact per-event table of an (environment, policy) pair. ``E`` events, ``C``
    contexts, ``K`` reward values (``reward_values``, sorted).

    Event columns (``[E]`` unless noted): ``prompt``, ``context`` (context id),
    ``token``, ``position``, ``d`` (visitation of the context, given the prompt),
    ``pi`` (``pi(y | c)``), ``visit`` (``d * pi`` = P(event in a response)), ``value``
    (``V(c)``), ``q`` (``Q(c, y)``), ``credit`` (``Q - V``), ``entropy`` (``H(y | c)``),
    ``cmi`` (``I(y; R | c)``), ``posterior`` ``[E, K]`` (``p(y | c, R = r)``),
    ``reward_dist`` ``[E, K]`` (``P(R = r | c, y)``),
    ``kind`` (index into ``EVENT_KINDS``).
    Context columns (``[C]``): ``ctx_prompt``, ``ctx_prefix`` (tuples), ``ctx_d``,
    ``ctx_value``, ``ctx_entropy``, ``ctx_cmi``, ``ctx_events`` (list of event ids).
    """

    env: Env
    reward_values: np.ndarray
    responses: tuple[Responses, ...]
    prompt: np.ndarray
    context: np.ndarray
    token: np.ndarray
    position: np.ndarray
    d: np.ndarray
    pi: np.ndarray
    visit: np.ndarray
    value: np.ndarray
    q: np.ndarray
    credit: np.ndarray
    entropy: np.ndarray
    cmi: np.ndarray
    posterior: np.ndarray
    reward_dist: np.ndarray
    kind: np.ndarray
    ctx_prompt: np.ndarray
    ctx_prefix: tuple[tuple[int, ...], ...]
    ctx_d: np.ndarray
    ctx_value: np.ndarray
    ctx_entropy: np.ndarray
    ctx_cmi: np.ndarray
    ctx_events: tuple[tuple[int, ...], ...]

    @property
    def n_events(self) -> int:
        return int(self.token.shape[0])

    def kind_mask(self, *kinds: str) -> np.ndarray:
        """``bool[E]``: events of the given kinds."""
        for k in kinds:
            if k not in EVENT_KINDS:
                raise InvalidArgument(f"kind={k!r} is not one of {EVENT_KINDS}.")
        return np.isin(self.kind, [EVENT_KINDS.index(k) for k in kinds])

    def label(self, e: int) -> str:
        """``"p0| ans = |1"``: prompt, prefix and token of event ``e``."""
        prefix = self.ctx_prefix[self.context[e]]
        return f"{self.env.prompts[self.prompt[e]]}|{self.env.show(prefix)}|{self.env.vocab[self.token[e]]}"


def _walk(env: Env, policy: Policy, x: int) -> tuple[list, list]:
    """Depth-first: contexts ``(prefix, reach, pi[V])`` and responses ``(tokens, prob)``."""
    contexts: list = []
    responses: list = []

    def rec(prefix: tuple[int, ...], reach: Tensor) -> None:
        pi = policy.probs(x, prefix)
        if len(responses) > MAX_RESPONSES:
            raise InvalidArgument(
                f"env {env.name!r} has more than {MAX_RESPONSES} responses per prompt; "
                "lower the horizon or the vocabulary (the oracle enumerates every response)."
            )
        contexts.append((prefix, reach, pi))
        for y in env.legal(x, prefix):
            child = prefix + (y,)
            if env.ends(child):
                responses.append((child, reach * pi[y]))
            else:
                rec(child, reach * pi[y])

    rec((), torch.ones((), dtype=torch.float64))
    return contexts, responses


def expected_reward(env: Env, policy: Policy) -> Tensor:
    """``J = sum_x w_x sum_y pi(y | x) R(x, y)``, differentiable in a tabular policy's logits."""
    total = torch.zeros((), dtype=torch.float64)
    for x in range(env.n_prompts):
        _, responses = _walk(env, policy, x)
        for tokens, p in responses:
            total = total + env.prompt_weights[x] * p * env.reward(x, tokens)
    return total


def exact_credit(env: Env, policy: Policy) -> ExactCredit:
    """Enumerate every response of every prompt and tabulate the exact credit."""
    walks = [_walk(env, policy, x) for x in range(env.n_prompts)]
    rewards = {(x, tok): env.reward(x, tok) for x, (_, resp) in enumerate(walks) for tok, _ in resp}
    support = np.array(sorted(set(rewards.values())), dtype=np.float64)
    k_of = {r: k for k, r in enumerate(support.tolist())}
    scale = max(1.0, float(support.max() - support.min()))

    ev: dict[str, list] = {n: [] for n in ("prompt", "context", "token", "position", "d", "pi", "value", "q", "entropy", "cmi", "posterior", "reward_dist")}
    ctx: dict[str, list] = {n: [] for n in ("prompt", "prefix", "d", "value", "entropy", "cmi", "events")}
    responses = []
    for x, (contexts, resp) in enumerate(walks):
        # Bottom-up: reward distribution after each (prefix, y); children follow parents
        # in depth-first order, so the reversed list sees every child first.
        dist: dict[tuple[int, ...], np.ndarray] = {}
        for tokens, _ in resp:
            onehot = np.zeros(len(support))
            onehot[k_of[rewards[(x, tokens)]]] = 1.0
            dist[tokens] = onehot
        for prefix, _, pi in reversed(contexts):
            p = pi.detach().numpy()
            dist[prefix] = sum(p[y] * dist[prefix + (y,)] for y in env.legal(x, prefix))
        event_of: dict[tuple[tuple[int, ...], int], int] = {}
        for prefix, reach, pi in contexts:
            p = pi.detach().numpy()
            legal = env.legal(x, prefix)
            p_r = np.stack([dist[prefix + (y,)] for y in legal])  # [Y, K]
            post = hindsight_posterior(p[list(legal)], p_r)  # [K, Y]
            h, i_yr = entropy(p[list(legal)]), conditional_mutual_information(p[list(legal)], p_r)
            v = float(dist[prefix] @ support)
            c_id = len(ctx["prompt"])
            ids = []
            for j, y in enumerate(legal):
                e = len(ev["prompt"])
                event_of[(prefix, y)] = e
                ids.append(e)
                for name, val in (("prompt", x), ("context", c_id), ("token", y), ("position", len(prefix)),
                                  ("d", float(reach.detach())), ("pi", float(p[y])), ("value", v),
                                  ("q", float(p_r[j] @ support)), ("entropy", h), ("cmi", i_yr),
                                  ("posterior", post[:, j]), ("reward_dist", p_r[j])):
                    ev[name].append(val)
            for name, val in (("prompt", x), ("prefix", prefix), ("d", float(reach.detach())), ("value", v),
                              ("entropy", h), ("cmi", i_yr), ("events", tuple(ids))):
                ctx[name].append(val)
        responses.append(_responses(env, x, contexts, resp, rewards, event_of))

    a = {n: np.asarray(v, dtype=np.float64) for n, v in ev.items() if n not in ("prompt", "context", "token", "position", "posterior", "reward_dist")}
    ints = {n: np.asarray(ev[n], dtype=np.int64) for n in ("prompt", "context", "token", "position")}
    visit = a["d"] * a["pi"]
    credit = a["q"] - a["value"]
    kind = _kinds(responses, ints["prompt"], visit, credit, CREDIT_TOL * scale)
    return ExactCredit(
        env=env, reward_values=support, responses=tuple(responses), **ints,
        d=a["d"], pi=a["pi"], visit=visit, value=a["value"], q=a["q"], credit=credit,
        entropy=a["entropy"], cmi=a["cmi"], posterior=np.asarray(ev["posterior"]).reshape(len(visit), len(support)),
        reward_dist=np.asarray(ev["reward_dist"]).reshape(len(visit), len(support)),
        kind=kind, ctx_prompt=np.asarray(ctx["prompt"], dtype=np.int64), ctx_prefix=tuple(ctx["prefix"]),
        ctx_d=np.asarray(ctx["d"]), ctx_value=np.asarray(ctx["value"]), ctx_entropy=np.asarray(ctx["entropy"]),
        ctx_cmi=np.asarray(ctx["cmi"]), ctx_events=tuple(ctx["events"]),
    )


def _responses(env: Env, x: int, contexts: list, resp: list, rewards: dict, event_of: dict) -> Responses:
    t_max = env.horizon
    m = len(resp)
    probs = {prefix: pi.detach().numpy() for prefix, _, pi in contexts}
    tokens = np.zeros((m, t_max), dtype=np.int64)
    logp = np.zeros((m, t_max))
    ent = np.zeros((m, t_max))
    event = np.full((m, t_max), -1, dtype=np.int64)
    for i, (tok, _) in enumerate(resp):
        for t, y in enumerate(tok):
            pi = probs[tok[:t]]
            tokens[i, t] = y
            logp[i, t] = np.log(pi[y])
            ent[i, t] = entropy(pi)
            event[i, t] = event_of[(tok[:t], y)]
    return Responses(
        prompt=x, tokens=tokens, lengths=np.array([len(t) for t, _ in resp], dtype=np.int64),
        prob=np.array([float(p.detach()) for _, p in resp]), reward=np.array([rewards[(x, t)] for t, _ in resp]),
        logprobs=logp, entropy=ent, event=event,
    )


def _kinds(responses: list[Responses], prompt: np.ndarray, visit: np.ndarray, credit: np.ndarray, tol: float) -> np.ndarray:
    """Classify events (see the module docstring). ``int64[E]`` into ``EVENT_KINDS``."""
    kind = np.full(visit.shape, EVENT_KINDS.index("credit"), dtype=np.int64)
    zero = np.abs(credit) <= tol
    kind[zero] = EVENT_KINDS.index("zero")
    for r in responses:
        # Joint law of (reward, length) given that the event occurs, vs. unconditional.
        outcome = np.unique(np.stack([r.reward, r.lengths]), axis=1, return_inverse=True)[1].reshape(-1)
        n_out = int(outcome.max()) + 1
        member = np.zeros((r.m, len(visit)))
        rows = np.repeat(np.arange(r.m), r.event.shape[1])
        valid = r.event.reshape(-1) >= 0
        member[rows[valid], r.event.reshape(-1)[valid]] = 1.0
        joint = np.zeros((n_out, len(visit)))
        np.add.at(joint, outcome, member * r.prob[:, None])  # [outcomes, E] = P(outcome, e in y)
        base = np.bincount(outcome, weights=r.prob, minlength=n_out)  # P(outcome)
        here = prompt == r.prompt
        independent = np.all(np.abs(joint - base[:, None] * visit[None, :]) <= 1e-10, axis=0)
        kind[here & zero & independent] = EVENT_KINDS.index("null")
        kind[here & (np.abs(visit - 1.0) <= 1e-12)] = EVENT_KINDS.index("shared")
    return kind
