"""Synthetic verifiable tasks whose credit structure is known by construction.

Every response follows one grammar over a shared vocabulary::

    TEMPLATE (the 2 tokens "A" ":")  FILLER* ("." or "~")  DECISION+  EOS

The verifier deletes every template and filler token, wherever it appears, and
compares what is left before EOS with the task's correct answers. Template and filler
tokens therefore have **zero credit by construction**: changing them never changes the
reward. Decision tokens (the answer and EOS) carry all of it. The template is emitted
by every response once the policy is warm-started, so its events are *shared events*
(THEORY.md section 1); the filler count varies, which gives responses of one group
different lengths L_i (the lever of M3, T3).

Tasks (``TASKS``):
    arithmetic: ``Q a + b =`` -> the two base-7 digits (carry, units) of ``a + b``.
    pattern:    ``Q x1 .. x5 =`` -> the next two items of a sequence of period 2 or 3.
    countdown:  ``Q a b t =`` -> an operator with ``a op b = t`` mod 7 (several operators
                may be correct).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from exchange.errors import InvalidArgument

__all__ = [
    "PAD", "EOS", "Q", "EQ", "TEMPLATE", "FILLER", "OPS", "BASE", "DIGIT0", "VOCAB_SIZE",
    "ROLE_TEMPLATE", "ROLE_FILLER", "ROLE_DECISION", "ROLE_NAMES",
    "Task", "TASKS", "get_task", "token_roles", "verify",
]

# ----------------------------------------------------------------- vocabulary
PAD, EOS, Q, EQ = 0, 1, 2, 3
TEMPLATE = (4, 5)  # "A" ":" -- the shared answer template
FILLER = (6, 7)  # "." "~" -- reward-irrelevant filler
OPS = (8, 9, 10)  # "+" "-" "*"
BASE = 7
DIGIT0 = 11  # digits 0..BASE-1 are ids 11..17
VOCAB_SIZE = DIGIT0 + BASE

ROLE_TEMPLATE, ROLE_FILLER, ROLE_DECISION = 0, 1, 2
ROLE_NAMES = ("template", "filler", "decision")

_ZERO_CREDIT = torch.zeros(VOCAB_SIZE, dtype=torch.bool)
_ZERO_CREDIT[list(TEMPLATE) + list(FILLER)] = True
_ROLE_OF = torch.full((VOCAB_SIZE,), ROLE_DECISION, dtype=torch.long)
_ROLE_OF[list(TEMPLATE)] = ROLE_TEMPLATE
_ROLE_OF[list(FILLER)] = ROLE_FILLER


def token_roles(tokens: Tensor) -> Tensor:
    """``LongTensor[N, T]``: ROLE_TEMPLATE / ROLE_FILLER / ROLE_DECISION of each token id."""
    return _ROLE_OF[tokens.clamp(0, VOCAB_SIZE - 1)]


def _apply(op: int, x: int, y: int) -> int:
    if op == OPS[0]:
        return (x + y) % BASE
    if op == OPS[1]:
        return (x - y) % BASE
    return (x * y) % BASE


# ----------------------------------------------------------------- the tasks
@dataclass(frozen=True)
class Task:
    """A prompt distribution with an exact verifier.

    Fields:
        name: registry name.
        prompt_len: ``P``, the (fixed) prompt length.
        answer_len: number of answer tokens before EOS.
        max_filler: the warm-start data draws 0..max_filler filler tokens.
    """

    name: str
    prompt_len: int
    answer_len: int
    max_filler: int = 3

    def sample_prompts(self, n: int, gen: torch.Generator) -> Tensor:
        """``LongTensor[n, P]`` prompts drawn with ``gen``."""
        x = torch.randint(0, BASE, (n, 5), generator=gen)
        if self.name == "arithmetic":
            plus = torch.full((n, 1), OPS[0])
            body = torch.cat([x[:, :1] + DIGIT0, plus, x[:, 1:2] + DIGIT0], dim=1)
        elif self.name == "pattern":
            period = torch.randint(2, 4, (n, 1), generator=gen)  # 2 or 3
            idx = torch.arange(5)[None] % period  # [n, 5]
            body = x.gather(1, idx) + DIGIT0
        else:  # countdown: target from a random operator, so an answer exists
            ops = torch.randint(0, len(OPS), (n,), generator=gen)
            t = [_apply(OPS[o], a, b) for (a, b), o in zip(x[:, :2].tolist(), ops.tolist())]
            body = torch.cat([x[:, :2], torch.tensor(t)[:, None]], dim=1) + DIGIT0
        q, eq = torch.full((n, 1), Q), torch.full((n, 1), EQ)
        return torch.cat([q, body, eq], dim=1)

    def answers(self, prompt: list[int]) -> list[tuple[int, ...]]:
        """Every correct answer (decision tokens before EOS) of one prompt."""
        d = [v - DIGIT0 for v in prompt[1:-1] if v >= DIGIT0]
        if self.name == "arithmetic":
            s = d[0] + d[1]
            return [(s // BASE + DIGIT0, s % BASE + DIGIT0)]
        if self.name == "pattern":
            period = 2 if d[2] == d[0] and d[3] == d[1] and d[4] == d[0] else 3
            return [(d[5 % period] + DIGIT0, d[6 % period] + DIGIT0)]
        a, b, t = d
        return [(op,) for op in OPS if _apply(op, a, b) == t]

    def reference(self, prompts: Tensor, gen: torch.Generator, n_filler: Tensor | None = None) -> Tensor:
        """Correct responses ``LongTensor[n, 2 + max_filler + answer_len + 1]``, PAD-padded.

        ``n_filler: LongTensor[n]`` fixes the filler count (else uniform 0..max_filler).
        """
        n = prompts.shape[0]
        if n_filler is None:
            n_filler = torch.randint(0, self.max_filler + 1, (n,), generator=gen)
        kinds = torch.randint(0, len(FILLER), (n, self.max_filler), generator=gen)
        width = len(TEMPLATE) + self.max_filler + self.answer_len + 1
        out = torch.full((n, width), PAD, dtype=torch.long)
        for i, prompt in enumerate(prompts.tolist()):
            answer = self.answers(prompt)[0]
            f = int(n_filler[i])
            row = list(TEMPLATE) + [FILLER[k] for k in kinds[i, :f].tolist()] + list(answer) + [EOS]
            out[i, : len(row)] = torch.tensor(row)
        return out


def verify(task: Task, prompts: Tensor, responses: Tensor, mask: Tensor) -> Tensor:
    """Exact rewards ``Tensor[N]`` in {0, 1} (float64).

    ``responses: LongTensor[N, T]`` with ``mask: BoolTensor[N, T]``. A response scores 1
    iff it contains EOS and its non-template, non-filler tokens before EOS are a correct
    answer of its prompt ``prompts[i]``.
    """
    rewards = torch.zeros(responses.shape[0], dtype=torch.float64)
    for i, (prompt, row, m) in enumerate(zip(prompts.tolist(), responses.tolist(), mask.tolist())):
        row = [v for v, keep in zip(row, m) if keep]
        if EOS not in row:
            continue
        body = tuple(v for v in row[: row.index(EOS)] if not _ZERO_CREDIT[v])
        rewards[i] = float(body in task.answers(prompt))
    return rewards


TASKS = {
    "arithmetic": Task("arithmetic", prompt_len=5, answer_len=2),
    "pattern": Task("pattern", prompt_len=7, answer_len=2),
    "countdown": Task("countdown", prompt_len=5, answer_len=1),
}


def get_task(name: str, max_filler: int | None = None) -> Task:
    """The task called ``name`` (``max_filler`` overrides the warm-start filler range)."""
    if name not in TASKS:
        raise InvalidArgument(f"task.name={name!r} is not a task; choose one of: {', '.join(TASKS)}.")
    task = TASKS[name]
    if max_filler is not None:
        if max_filler < 0:
            raise InvalidArgument(f"task.max_filler={max_filler} must be >= 0.")
        task = Task(task.name, task.prompt_len, task.answer_len, max_filler)
    return task
