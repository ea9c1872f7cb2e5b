"""The forced-prefix certificate rejects a probe that carries credit and certifies one
that does not; its exact P(correct) agrees with sampling."""

from __future__ import annotations

import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.lab.certificate import certify, credit_bound, style_credit
from exchange.lab.generation import sample_group_rollout
from exchange.lab.tasks import DIGIT0, EOS, STYLE, VOCAB_SIZE, GrammarLM, get_task


class Oracle(torch.nn.Module):
    """Answers correctly (logit +4 on the right token, then EOS) after S when
    ``needs_s``, else always; otherwise prefers a wrong digit."""

    def __init__(self, task, needs_s: bool):
        super().__init__()
        self.task, self.needs_s = task, needs_s
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, ids):
        b, s = ids.shape
        p = self.task.prompt_len
        out = torch.zeros(b, s, VOCAB_SIZE) + self.dummy
        for r, seq in enumerate(ids.tolist()):
            answer = self.task.answers(seq[:p])[0]
            for t in range(p - 1, s):
                resp = seq[p: t + 1]
                knows = (STYLE in resp) or not self.needs_s
                k = sum(1 for v in resp if v >= DIGIT0 and v != STYLE or v in (8, 9, 10))
                if k < len(answer):
                    out[r, t, answer[k] if knows else DIGIT0 + (answer[k] - DIGIT0 + 1) % 7] += 4.0
                else:
                    out[r, t, EOS] += 4.0
        return out


TASK = get_task("countdown", max_filler=2, style_p=0.5)


def prompts(n=24, seed=0):
    return TASK.sample_prompts(n, torch.Generator().manual_seed(seed))


def test_credit_carrying_probe_is_rejected():
    model = GrammarLM(Oracle(TASK, needs_s=True), TASK)
    c = style_credit(model, TASK, prompts())
    assert c.forced > c.banned + 0.2 and c.low > 0
    cert = certify(c, bound=credit_bound(0.05, 1.0), bound_source="test")
    assert not cert.certified


def test_zero_credit_probe_is_certified():
    model = GrammarLM(Oracle(TASK, needs_s=False), TASK)
    c = style_credit(model, TASK, prompts())
    assert c.credit == pytest.approx(0.0, abs=1e-12)
    assert certify(c, bound=0.01, bound_source="test").certified


def test_exact_probability_matches_sampling():
    """P(correct | template, S forced) against the reward of sampled completions."""
    from exchange.lab.certificate import p_correct

    torch.manual_seed(0)
    model = GrammarLM(Oracle(TASK, needs_s=True), TASK)
    pr = prompts(4)
    exact = p_correct(model, TASK, pr, forced=False)
    gen = torch.Generator().manual_seed(3)
    # sample with S banned: the oracle never emits S unless sampled; compare on rollouts without S
    ro = sample_group_rollout(model, TASK, pr, 64, 7, 1.0, gen)
    assert exact.mean().item() == pytest.approx(float(ro.rewards.mean()), abs=0.15)


def test_bad_inputs():
    with pytest.raises(InvalidArgument):
        credit_bound(0.0, 1.0)
    model = GrammarLM(Oracle(TASK, needs_s=False), TASK)
    c = style_credit(model, TASK, prompts())
    with pytest.raises(InvalidArgument, match="bound_source"):
        certify(c, 0.1, "")
    with pytest.raises(InvalidArgument, match=">= 2"):
        style_credit(model, TASK, prompts(1))
