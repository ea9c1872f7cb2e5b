"""Synthetic verifiable tasks whose credit structure is known by construction.

Every response follows one grammar over a shared vocabulary::

    TEMPLATE (the 2 tokens "A" ":")  [STYLE "S"]  DECISION+  FILLER{0..max_filler} ("." or "~")  EOS

The verifier deletes every template, style and filler token, wherever it appears, and
compares what is left before EOS with the task's correct answers. The grammar
(:class:`GrammarLM`, wrapped around every policy) makes filler **zero-credit by
construction**: it caps zero-credit tokens (at most 2 template tokens, one S and
``max_filler`` fillers), and once a filler is emitted only filler or EOS may follow, so
the answer is complete before any filler and ``max_response_len`` leaves room for every
filler plus EOS: the reward is fixed before the first filler, whatever their number.
(With ``filler_after=False``, the old design, filler comes before the answer and shifts
its position; a partly trained model then answers worse after some filler counts, so
filler carried credit.) :func:`filler_accuracy` and :func:`certify_zero_credit`
*measure* that accuracy is flat across filler counts (tested, including a failing case).
Decision tokens (the answer and EOS) carry all of the credit.

Shared events: the template is emitted by every response once warm-started
(near-deterministic), and the **style token S** follows it with probability
``style_p`` in the warm-start data (the issue-31 configs use 0.5, so the warm start
trains the answer branch with and without S equally and S's Fisher information
``p (1 - p)`` is at its maximum); S is shared by a group when every response emits it,
and a non-cancelling ``K_e`` there moves it. The filler count varies, which gives
responses of one group different lengths L_i (the lever of M3, T3). Whether reward and
``1/L`` co-vary, and with which sign, is not fixed by the grammar: truncated responses
are wrong and longest, while filler counts are independent of the reward by
construction. The harness measures the link per step (``len/cov_reward_inv_len``), and
the predicted direction of S's drift is taken from the signed coefficient **at S**,
frozen by the pilot (:mod:`exchange.lab.pilot`), never from a pooled covariance. Whether
S itself carries credit is measured by the forced-prefix certificate
(:mod:`exchange.lab.certificate`).

Tasks (``TASKS``):
    arithmetic: ``Q a + b =`` -> the two base-7 digits (carry, units) of ``a + b``.
    pattern:    ``Q x1 .. x5 =`` -> the next two items of a sequence of period 2 or 3.
    countdown:  ``Q a b t =`` -> an operator with ``a op b = t`` mod 7 (several operators
                may be correct).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from exchange.errors import InvalidArgument

__all__ = [
    "BASE",
    "DIGIT0",
    "EOS",
    "EQ",
    "FILLER",
    "OPS",
    "PAD",
    "ROLE_DECISION",
    "ROLE_FILLER",
    "ROLE_NAMES",
    "ROLE_STYLE",
    "ROLE_TEMPLATE",
    "STYLE",
    "TASKS",
    "TEMPLATE",
    "VOCAB_SIZE",
    "GrammarLM",
    "Q",
    "Task",
    "certify_zero_credit",
    "filler_accuracy",
    "get_task",
    "link_lifted",
    "token_roles",
    "verify",
]

# ----------------------------------------------------------------- vocabulary
PAD, EOS, Q, EQ = 0, 1, 2, 3
TEMPLATE = (4, 5)  # "A" ":" -- the shared answer template
FILLER = (6, 7)  # "." "~" -- reward-irrelevant filler
OPS = (8, 9, 10)  # "+" "-" "*"
BASE = 7
DIGIT0 = 11  # digits 0..BASE-1 are ids 11..17
STYLE = DIGIT0 + BASE  # 18: "S", the shared non-deterministic style token
VOCAB_SIZE = STYLE + 1

ROLE_TEMPLATE, ROLE_FILLER, ROLE_DECISION, ROLE_STYLE = 0, 1, 2, 3
ROLE_NAMES = ("template", "filler", "decision", "style")

_ZERO_CREDIT = torch.zeros(VOCAB_SIZE, dtype=torch.bool)
_ZERO_CREDIT[list(TEMPLATE) + list(FILLER) + [STYLE]] = True
_DECISION = ~_ZERO_CREDIT  # the answer's tokens: neither zero-credit nor PAD / EOS
_DECISION[[PAD, EOS]] = False
_ROLE_OF = torch.full((VOCAB_SIZE,), ROLE_DECISION, dtype=torch.long)
_ROLE_OF[list(TEMPLATE)] = ROLE_TEMPLATE
_ROLE_OF[list(FILLER)] = ROLE_FILLER
_ROLE_OF[STYLE] = ROLE_STYLE


def token_roles(tokens: Tensor) -> Tensor:
    """``LongTensor[N, T]``: ROLE_TEMPLATE / ROLE_FILLER / ROLE_DECISION / ROLE_STYLE of each
    token of responses ``tokens [N, T]``. S is ROLE_STYLE only at its head slot (every
    token before it a template token); an S later in the response is a filler
    (:attr:`Task.probe_as_filler`), so the probe event is never pooled with it."""
    roles = _ROLE_OF[tokens.clamp(0, VOCAB_SIZE - 1)]
    if tokens.ndim != 2:
        return roles
    before = torch.cumsum((roles != ROLE_TEMPLATE).long(), dim=1) - (roles != ROLE_TEMPLATE).long()  # non-template tokens before t
    late_s = (tokens == STYLE) & (before > 0)
    return torch.where(late_s, torch.full_like(roles, ROLE_FILLER), roles)


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
        max_filler: the grammar's cap on filler tokens; the warm-start data draws
            0..max_filler of them uniformly.
        style_p: probability of the style token S after the template in warm-start data.
    """

    name: str
    prompt_len: int
    answer_len: int
    max_filler: int = 3
    style_p: float = 0.9
    filler_after: bool = True
    """Filler after the answer (zero credit by construction); False: the old, before."""
    template_in_prompt: bool = False
    """Issue 31's undiluted dose: the template tokens end the prompt (``prompt_len``
    includes them) instead of opening the response, so the response is ``[S] DECISION+
    FILLER* EOS`` and the shared mass of a group is the probe event S (and decisions that
    happen to agree), not the near-deterministic template that held ~90% of it. The
    grammar allows no template token in the response."""
    forced_style: bool = False
    """Issue 31's teacher-forced shared prefix: S is written into every response at its
    slot by the environment (sampling and greedy decoding emit it whatever the policy),
    while the objective still sees the policy's own ``log p(S)`` there. S is then shared by
    every group and carries **zero credit by construction** (no response lacks it, so it
    cannot predict the reward); its drift is the pathway's. Needs ``template_in_prompt``
    (S opens the response)."""
    probe_as_filler: bool = False
    """Issue 42's non-private probe: S is also a filler token (after the answer, wherever a
    filler may stand), sampled by the policy there, so S's output row carries gradient
    from contexts other than the probe slot (the advantage-weighted filler positions),
    as a shared token of a real vocabulary does. At the head slot S stays what
    :attr:`forced_style` makes it (zero-credit by construction, certified). The warm
    start draws each filler from ``(".", "~", S)``; the drift probes keep plain fillers
    (their S is the head slot's only)."""
    long_wrong: bool = False
    """M3's reward-length link (issue 31): filler may follow only a **wrong** answer; after
    a correct one the grammar allows no filler, so wrong answers run long, as truncation
    makes them in real RLVR, and in a group where S is shared the per-response ``1/L_i``
    weights have one systematic sign (correct short, wrong long). Filler stays zero-credit:
    it can only follow an answer whose reward is already fixed. The warm start's data keep
    their filler (:func:`link_lifted` lifts the link during SFT), so the policy emits
    filler after a wrong answer with the probability it learned."""
    fixed_answer: bool = False
    """Issue 42's M1 design: the grammar allows exactly ``answer_len`` decision tokens, no
    EOS or filler before them and no decision token after them, so with ``max_filler = 0``
    (and the template in the prompt, S forced) every sampled response has one length and
    the per-response ``1/L_i`` is one constant: the residual left is the coupling's. The
    reward is unchanged (a wrong answer is still wrong); only lengths are fixed."""
    exact_filler: bool = False
    """Issue 42's non-private M1 design: every response carries exactly ``max_filler``
    fillers (the grammar allows no EOS before the last of them; the warm start draws
    ``max_filler`` of them), so with :attr:`fixed_answer` every response is ``[S, d1 .. dk,
    F_1 .. F_max_filler, EOS]``, one length, while a filler position may still hold S
    (:attr:`probe_as_filler`): equal lengths (no M3) *and* a probe that is not private.
    Filler stays zero-credit: it follows the complete answer."""

    @property
    def head(self) -> list[int]:
        """The zero-credit tokens that open every response before S: the template, or
        nothing when it ends the prompt (:attr:`template_in_prompt`)."""
        return [] if self.template_in_prompt else list(TEMPLATE)

    @property
    def filler_tokens(self) -> tuple[int, ...]:
        """The tokens a filler position may hold: ``FILLER``, plus S with :attr:`probe_as_filler`."""
        return FILLER + ((STYLE,) if self.probe_as_filler else ())

    @property
    def max_response_len(self) -> int:
        """The longest grammatical response: template (unless in the prompt), S,
        max_filler fillers, answer, EOS."""
        return len(self.head) + 1 + self.max_filler + self.answer_len + 1

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
        tail = [torch.tensor([TEMPLATE]).expand(n, -1)] if self.template_in_prompt else []
        return torch.cat([q, body, eq, *tail], dim=1)

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

    def reference(self, prompts: Tensor, gen: torch.Generator, n_filler: Tensor | None = None,
                  style: Tensor | None = None, plain_filler: bool = False) -> Tensor:
        """Correct responses ``LongTensor[n, max_response_len]``, PAD-padded.

        ``n_filler: LongTensor[n]`` fixes the filler count (else uniform 0..max_filler);
        ``style: BoolTensor[n]`` fixes whether S follows the template (else with ``style_p``);
        ``plain_filler``: fillers from ``FILLER`` only (else :attr:`filler_tokens`).
        """
        fillers = FILLER if plain_filler else self.filler_tokens
        n = prompts.shape[0]
        if n_filler is None:
            n_filler = torch.randint(0, self.max_filler + 1, (n,), generator=gen)
            if self.exact_filler:  # every grammatical response has max_filler of them (same draws of gen)
                n_filler = torch.full_like(n_filler, self.max_filler)
        elif self.exact_filler and bool((n_filler != self.max_filler).any()):
            raise InvalidArgument(f"n_filler={n_filler.tolist()}: with task.exact_filler every response has exactly "
                                  f"max_filler={self.max_filler} fillers; pass n_filler=None or {self.max_filler}.")
        kinds = torch.randint(0, len(fillers), (n, max(self.max_filler, 1)), generator=gen)
        if style is None:
            style = torch.rand(n, generator=gen) < self.style_p
        out = torch.full((n, self.max_response_len), PAD, dtype=torch.long)
        for i, prompt in enumerate(prompts.tolist()):
            answer = self.answers(prompt)[0]
            f = int(n_filler[i])
            fill = [fillers[k] for k in kinds[i, :f].tolist()]
            head = self.head + ([STYLE] if bool(style[i]) else [])
            row = head + (list(answer) + fill if self.filler_after else fill + list(answer)) + [EOS]
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


def get_task(name: str, max_filler: int | None = None, style_p: float | None = None,
             long_wrong: bool = False, template_in_prompt: bool = False, forced_style: bool = False,
             probe_as_filler: bool = False, fixed_answer: bool = False, exact_filler: bool = False) -> Task:
    """The task called ``name`` (``max_filler`` overrides the filler cap, ``style_p`` the
    warm-start probability of the style token, ``long_wrong`` sets :attr:`Task.long_wrong`;
    the other flags set the :class:`Task` fields of their names)."""
    if name not in TASKS:
        raise InvalidArgument(f"task.name={name!r} is not a task; choose one of: {', '.join(TASKS)}.")
    task = TASKS[name]
    if max_filler is not None:
        if max_filler < 0:
            raise InvalidArgument(f"task.max_filler={max_filler} must be >= 0.")
        task = dataclasses.replace(task, max_filler=max_filler)
    if style_p is not None:
        if not 0.0 <= style_p <= 1.0:
            raise InvalidArgument(f"task.style_p={style_p} must lie in [0, 1].")
        task = dataclasses.replace(task, style_p=style_p)
    if long_wrong:
        task = dataclasses.replace(task, long_wrong=True)
    if template_in_prompt:
        task = dataclasses.replace(task, template_in_prompt=True, prompt_len=task.prompt_len + len(TEMPLATE))
    if forced_style:
        if not template_in_prompt:
            raise InvalidArgument("task.forced_style=true needs task.template_in_prompt=true: the forced S opens "
                                  "the response; set both.")
        task = dataclasses.replace(task, forced_style=True)
    if probe_as_filler:
        if not (forced_style and task.filler_after and task.max_filler > 0):
            raise InvalidArgument("task.probe_as_filler=true needs task.forced_style=true and max_filler > 0: S is "
                                  "the forced head token and also a filler after the answer; set both.")
        task = dataclasses.replace(task, probe_as_filler=True)
    if fixed_answer:
        task = dataclasses.replace(task, fixed_answer=True)
    if exact_filler:
        if not (fixed_answer and task.max_filler > 0 and not task.long_wrong):
            raise InvalidArgument(
                f"task.exact_filler=true with fixed_answer={fixed_answer}, max_filler={task.max_filler}, "
                f"long_wrong={task.long_wrong}: exact filler makes every response one length, so it needs "
                "task.fixed_answer=true (one answer length), max_filler > 0 (the filler count; with 0 use "
                "fixed_answer alone) and long_wrong=false (which bans filler after a correct answer); set those.")
        task = dataclasses.replace(task, exact_filler=True)
    return task


# ------------------------------------------------------------ the grammar cap
_NEG = -1e4  # a logit that underflows to probability 0 without making entropies NaN


class GrammarLM(torch.nn.Module):
    """``forward(ids) -> logits`` of ``lm`` with the task grammar's caps applied.

    ``ids: LongTensor[B, P + t]`` are a prompt of the task's fixed length ``P`` followed by
    response tokens. At each response position the logits of a zero-credit token are
    pushed to ``-1e4`` (probability 0) once its cap is reached: 2 template tokens, 1 S,
    ``max_filler`` fillers. Sampling, training log-probs and evaluation all go through
    this forward, so the cap is part of the policy, not a post-hoc filter.
    """

    def __init__(self, lm: torch.nn.Module, task: Task) -> None:
        super().__init__()
        self.lm = lm
        self.prompt_len = task.prompt_len
        self.fillers = list(task.filler_tokens)
        # with probe_as_filler, S counts as a filler after its head slot (the head slot's S is forced)
        self.head_len = len(task.head) + 1 if task.probe_as_filler else 0
        head_caps = () if task.probe_as_filler else (([STYLE], 1),)
        self.caps = ((list(TEMPLATE), len(task.head)), *head_caps, (self.fillers, task.max_filler))
        self.filler_after = task.filler_after
        self.after_filler = torch.ones(VOCAB_SIZE, dtype=torch.bool)  # blocked once a filler is out
        self.after_filler[self.fillers + [EOS]] = False
        self.task = task
        self.link_active = task.long_wrong  # Task.long_wrong: no filler after a correct answer
        self._answers: dict[tuple[int, ...], set[tuple[int, ...]]] = {}

    def forward(self, ids: Tensor) -> Tensor:
        return self.mask_logits(ids, self.lm(ids))

    def mask_logits(self, ids: Tensor, logits: Tensor) -> Tensor:
        """``logits`` with the grammar's caps applied, given the whole sequence ``ids``.

        ``logits: [B, K, V]`` are those of the last ``K <= S`` positions of ``ids [B, S]``
        (a Hugging Face forward with ``logits_to_keep``); any device. The caps count the
        response tokens up to each position, so ``ids`` must hold the whole prefix."""
        p = self.prompt_len
        if ids.shape[1] < p:
            return logits
        resp = ids.clone()
        resp[:, :p] = PAD
        if self.head_len:  # the forced head S is not a filler: counted by no cap
            resp[:, p + len(self.task.head): p + self.head_len] = PAD
        block = torch.zeros((*ids.shape, logits.shape[-1]), dtype=torch.bool, device=ids.device)
        for toks, cap in self.caps:
            count = torch.isin(resp, torch.tensor(toks, device=ids.device)).long().cumsum(1)  # emitted up to here
            full = count >= cap
            block[..., toks] |= full[..., None]
        if self.filler_after:  # after a filler: only filler or EOS, so the answer is already fixed
            started = torch.isin(resp, torch.tensor(self.fillers, device=ids.device)).long().cumsum(1) > 0  # [B, S]
            block[..., : VOCAB_SIZE] |= started[..., None] & self.after_filler.to(ids.device)
        if self.task.fixed_answer:  # exactly answer_len decision tokens: before them no EOS or filler, after none
            decision = _DECISION.to(ids.device)
            short = decision[resp].long().cumsum(1) < self.task.answer_len  # [B, S], up to and including t
            block[..., [EOS, *self.fillers]] |= short[..., None]
            block[..., decision] |= ~short[..., None]
            block[..., PAD] = True  # never sampled (an untrained policy would, and end the answer early)
            slot = p + self.head_len - 2  # probe_as_filler: the position that predicts the head slot's forced S
            if self.head_len and ids.shape[1] > slot:  # S is no filler there (its log p stays the policy's own)
                block[:, slot, STYLE] = False
        if self.task.exact_filler:  # Task.exact_filler: no EOS before max_filler fillers (S included as one)
            fillers = torch.isin(resp, torch.tensor(self.fillers, device=ids.device)).long().cumsum(1)  # [B, S]
            block[..., EOS] |= fillers < self.task.max_filler
        if self.link_active:  # Task.long_wrong: after a correct answer, no filler
            block[..., self.fillers] |= self._correct_so_far(ids)[..., None].to(ids.device)
        block = block[:, ids.shape[1] - logits.shape[1]:].to(logits.device)
        return logits.masked_fill(block, _NEG)

    def _correct_so_far(self, ids: Tensor) -> Tensor:
        """``BoolTensor[B, S]`` (CPU): the decision tokens of the response up to and
        including position ``t`` are a correct answer of the row's prompt."""
        p = self.prompt_len
        zero_credit = _ZERO_CREDIT.tolist()
        out = []
        for row in ids.detach().cpu().tolist():
            key = tuple(row[:p])
            if key not in self._answers:
                self._answers[key] = set(self.task.answers(row[:p]))
            answers, so_far, flags = self._answers[key], (), [False] * p
            for v in row[p:]:
                if v not in (PAD, EOS) and not zero_credit[v]:
                    so_far += (v,)
                flags.append(so_far in answers)
            out.append(flags)
        return torch.tensor(out, dtype=torch.bool).reshape(ids.shape)


class link_lifted:
    """``with link_lifted(model):`` the grammar's reward-length link (``Task.long_wrong``)
    is off in every :class:`GrammarLM` of ``model`` (its modules, or the one a Hugging
    Face model carries, :func:`exchange.lab.llm.constrain_to_grammar`): the warm start
    trains filler after correct answers as in every other design."""

    def __init__(self, model: torch.nn.Module) -> None:
        found = [m for m in model.modules() if isinstance(m, GrammarLM)]
        found += [g for m in model.modules() if isinstance(g := getattr(m, "_exchange_grammar_lm", None), GrammarLM)]
        self.grammars = found
        self.saved = [g.link_active for g in found]

    def __enter__(self) -> link_lifted:
        for g in self.grammars:
            g.link_active = False
        return self

    def __exit__(self, *exc) -> None:
        for g, was in zip(self.grammars, self.saved):
            g.link_active = was


# ------------------------------------------------------- zero-credit certificate
@torch.no_grad()
def _greedy(model: torch.nn.Module, ids: Tensor, steps: int, allowed: Tensor | None = None) -> Tensor:
    """``steps`` greedy tokens after ``ids`` (only ``allowed`` ids when given); EOS repeats as PAD."""
    out = []
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    for _ in range(steps):
        logits = model(ids)[:, -1]
        if allowed is not None:
            logits = logits.masked_fill(~allowed, float("-inf"))
        nxt = torch.where(done, torch.full_like(done, PAD, dtype=torch.long), logits.argmax(-1))
        done = done | (nxt == EOS)
        out.append(nxt)
        ids = torch.cat([ids, nxt[:, None]], 1)
    return torch.stack(out, 1) if out else ids[:, :0]


@torch.no_grad()
def filler_accuracy(model: torch.nn.Module, task: Task, prompts: Tensor, max_len: int) -> tuple[list[float], int]:
    """Greedy accuracy with the filler count forced: ``([acc_k for k in 0..max_filler], n)``.

    For each ``k`` the response is template, S, then (``filler_after``) the greedy answer
    of ``answer_len`` decision tokens, ``k`` forced fillers and greedy decoding to the end,
    or (old design) ``k`` forced fillers then greedy decoding; the whole response is
    verified. If filler carries no credit the accuracies agree within sampling error
    (:func:`certify_zero_credit`).
    """
    n = prompts.shape[0]
    head = torch.tensor(task.head + [STYLE]).repeat(n, 1)
    decision = ~_ZERO_CREDIT.clone()
    decision[[PAD, EOS]] = False
    answer = _greedy(model, torch.cat([prompts, head], 1), task.answer_len, decision) if task.filler_after else head[:, :0]
    accs = []
    for k in range(task.max_filler + 1):
        fill = torch.tensor([FILLER[j % len(FILLER)] for j in range(k)], dtype=torch.long).repeat(n, 1)
        forced = torch.cat([head, answer, fill] if task.filler_after else [head, fill], 1)
        rest = _greedy(model, torch.cat([prompts, forced], 1), max_len - forced.shape[1])
        full = torch.cat([forced, rest], 1)
        accs.append(float(verify(task, prompts, full, full != PAD).mean()))
    return accs, n


def certify_zero_credit(accs: list[float], n: int, alpha: float = 0.01) -> tuple[bool, float]:
    """``(flat, p)``: chi-square test of homogeneity of accuracy across filler counts
    (each count measured on the same ``n`` prompts). ``flat`` when ``p >= alpha``, i.e.
    no filler count changes the accuracy beyond sampling error."""
    from scipy.stats import chi2_contingency

    right = [round(a * n) for a in accs]
    table = [[r, n - r] for r in right]
    if all(r == right[0] for r in right):
        return True, 1.0
    cols = [sum(c) for c in zip(*table)]
    if 0 in cols:
        return True, 1.0
    p = float(chi2_contingency(table)[1])
    return p >= alpha, p
