import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from exchange.errors import InvalidArgument
from exchange.lab.tasks import (
    EOS,
    FILLER,
    PAD,
    ROLE_DECISION,
    ROLE_FILLER,
    ROLE_TEMPLATE,
    TASKS,
    TEMPLATE,
    get_task,
    token_roles,
    verify,
)


@pytest.mark.parametrize("name", list(TASKS))
def test_reference_solutions_are_correct(name):
    task = TASKS[name]
    gen = torch.Generator().manual_seed(1)
    prompts = task.sample_prompts(64, gen)
    ref = task.reference(prompts, gen)
    assert prompts.shape == (64, task.prompt_len)
    assert verify(task, prompts, ref, ref != PAD).tolist() == [1.0] * 64


@pytest.mark.parametrize("name", list(TASKS))
@given(seed=st.integers(0, 2**31 - 1), inserts=st.lists(st.sampled_from(FILLER + TEMPLATE), max_size=4),
       where=st.integers(0, 6))
def test_template_and_filler_never_change_the_reward(name, seed, inserts, where):
    """Zero credit by construction: inserting template/filler tokens anywhere before EOS
    keeps the reward of a correct and of a wrong response."""
    task = TASKS[name]
    gen = torch.Generator().manual_seed(seed)
    prompt = task.sample_prompts(1, gen)
    ref = [v for v in task.reference(prompt, gen)[0].tolist() if v != PAD]
    wrong = ref[:]
    k = len(ref) - 2  # last answer token
    wrong[k] = TASKS[name].answers(prompt[0].tolist())[0][-1] + 1 if wrong[k] < 17 else 11
    for resp in (ref, wrong):
        pos = min(where, resp.index(EOS))
        changed = resp[:pos] + list(inserts) + resp[pos:]
        width = max(len(resp), len(changed))
        batch = torch.full((2, width), PAD)
        batch[0, : len(resp)] = torch.tensor(resp)
        batch[1, : len(changed)] = torch.tensor(changed)
        r = verify(task, prompt.repeat(2, 1), batch, batch != PAD)
        assert r[0] == r[1]


def test_wrong_answer_and_missing_eos_score_zero():
    task = TASKS["arithmetic"]
    prompt = torch.tensor([[2, 11 + 3, 8, 11 + 5, 3]])  # 3 + 5 = 8 = "1 1" in base 7
    good = torch.tensor([[4, 5, 6, 12, 12, 1]])
    assert verify(task, prompt, good, good != PAD).item() == 1.0
    bad = torch.tensor([[4, 5, 6, 12, 13, 1]])
    assert verify(task, prompt, bad, bad != PAD).item() == 0.0
    no_eos = torch.tensor([[4, 5, 6, 12, 12, 6]])
    assert verify(task, prompt, no_eos, no_eos != PAD).item() == 0.0


def test_roles():
    roles = token_roles(torch.tensor([[4, 5, 6, 7, 12, 1]]))
    assert roles.tolist() == [[ROLE_TEMPLATE, ROLE_TEMPLATE, ROLE_FILLER, ROLE_FILLER, ROLE_DECISION, ROLE_DECISION]]


def test_countdown_accepts_every_correct_operator():
    task = TASKS["countdown"]
    prompt = [2, 11 + 2, 11 + 2, 11 + 4, 3]  # 2 + 2 = 4 and 2 * 2 = 4
    assert sorted(task.answers(prompt)) == [(8,), (10,)]


def test_unknown_task_is_a_precise_error():
    with pytest.raises(InvalidArgument, match="task.name='nope'"):
        get_task("nope")


# ------------------------------------------------ zero-credit certification
def _warm(train_filler: int, filler_after: bool = True):
    import dataclasses

    import torch as _t

    from exchange.lab.sft import sft_warm_start
    from exchange.lab.tasks import VOCAB_SIZE, GrammarLM
    from exchange.models import TinyLM, TinyLMConfig

    task = dataclasses.replace(get_task("arithmetic", 3), filler_after=filler_after)
    lm = GrammarLM(TinyLM(TinyLMConfig(VOCAB_SIZE, 5 + 2 * task.max_response_len, 32, 2, 1, seed=0)), task)
    sft_warm_start(lm, dataclasses.replace(task, max_filler=train_filler), 100, 64, 3e-3, _t.Generator().manual_seed(1))
    return lm, task


def test_filler_is_certified_zero_credit_after_the_warm_start():
    import torch as _t

    from exchange.lab.tasks import certify_zero_credit, filler_accuracy

    lm, task = _warm(3)
    accs, n = filler_accuracy(lm, task, task.sample_prompts(400, _t.Generator().manual_seed(2)), task.max_response_len)
    flat, p = certify_zero_credit(accs, n)
    assert flat, (accs, p)
    assert max(accs) - min(accs) < 0.1 and min(accs) > 0.3


def test_certification_fails_when_filler_counts_lie_outside_the_warm_start():
    """The old design: filler before the answer, warm start on 0..1 fillers, 2-3 allowed."""
    import torch as _t

    from exchange.lab.tasks import certify_zero_credit, filler_accuracy

    lm, task = _warm(1, filler_after=False)
    accs, n = filler_accuracy(lm, task, task.sample_prompts(400, _t.Generator().manual_seed(2)), task.max_response_len)
    assert certify_zero_credit(accs, n)[0] is False, accs


def test_grammar_caps_zero_credit_tokens():
    import torch as _t

    from exchange.lab.generation import generate
    from exchange.lab.tasks import STYLE, GrammarLM

    class Uniform(_t.nn.Module):
        def forward(self, ids):
            return _t.zeros(ids.shape + (VOCAB_SIZE,))

    from exchange.lab.tasks import VOCAB_SIZE

    task = get_task("arithmetic", 2)
    tokens, mask, _ = generate(GrammarLM(Uniform(), task), task.sample_prompts(200, _t.Generator().manual_seed(0)),
                               12, 1.0, _t.Generator().manual_seed(1))
    t = _t.where(mask, tokens, _t.full_like(tokens, PAD))
    assert int(_t.isin(t, _t.tensor(FILLER)).sum(1).max()) == 2
    assert int(_t.isin(t, _t.tensor(TEMPLATE)).sum(1).max()) == 2
    assert int((t == STYLE).sum(1).max()) == 1


def test_after_a_filler_only_filler_or_eos_can_follow():
    import torch as _t

    from exchange.lab.generation import generate
    from exchange.lab.tasks import STYLE, VOCAB_SIZE, GrammarLM

    class Uniform(_t.nn.Module):
        def forward(self, ids):
            return _t.zeros(ids.shape + (VOCAB_SIZE,))

    task = get_task("arithmetic", 3)
    tokens, mask, _ = generate(GrammarLM(Uniform(), task), task.sample_prompts(300, _t.Generator().manual_seed(0)),
                               task.max_response_len, 1.0, _t.Generator().manual_seed(1))
    for row, m in zip(tokens.tolist(), mask.tolist()):
        row = [v for v, k in zip(row, m) if k]
        if any(v in FILLER for v in row):
            first = next(i for i, v in enumerate(row) if v in FILLER)
            assert all(v in FILLER + (EOS,) for v in row[first:]), row
            if row[-1] != EOS:  # truncated: only when the answer part was already too long (wrong anyway)
                assert sum(v not in FILLER + TEMPLATE + (STYLE,) for v in row) > task.answer_len, row


# ----------------------------------------- M3's reward-length link (Task.long_wrong)
def _uniform_grammar(task):
    import torch as _t

    from exchange.lab.tasks import VOCAB_SIZE, GrammarLM

    class Uniform(_t.nn.Module):
        def forward(self, ids):
            return _t.zeros(ids.shape + (VOCAB_SIZE,))

    return GrammarLM(Uniform(), task)


@pytest.mark.parametrize("name", list(TASKS))
def test_long_wrong_allows_filler_only_after_a_wrong_answer(name):
    from exchange.lab.tasks import STYLE, link_lifted

    task = get_task(name, 3, 0.5, long_wrong=True)
    lm = _uniform_grammar(task)
    prompt = task.sample_prompts(1, torch.Generator().manual_seed(3))
    right = list(task.answers(prompt[0].tolist())[0])
    wrong = [v + 1 if v + 1 != right[0] + 1 or len(right) > 1 else v + 2 for v in right]
    wrong = wrong if tuple(wrong) not in task.answers(prompt[0].tolist()) else [right[0]] * len(right) + [right[0]]
    assert verify(task, prompt, torch.tensor([list(TEMPLATE) + wrong + [EOS]]), torch.ones(1, len(wrong) + 3,
                                                                                          dtype=torch.bool)).item() == 0

    def filler_blocked(answer):
        ids = torch.cat([prompt, torch.tensor([list(TEMPLATE) + [STYLE] + answer])], 1)
        return bool((lm(ids)[0, -1, list(FILLER)] < -1e3).all())

    assert filler_blocked(right) and not filler_blocked(wrong)
    assert not filler_blocked(right[:-1]) or len(right) == 1  # an unfinished answer is not yet correct
    with link_lifted(lm):  # the warm start trains filler after correct answers as usual
        assert not filler_blocked(right)
    assert filler_blocked(right)
    assert not _uniform_grammar(get_task(name, 3, 0.5))(torch.cat(
        [prompt, torch.tensor([list(TEMPLATE) + [STYLE] + right])], 1))[0, -1, list(FILLER)].lt(-1e3).any()


@pytest.mark.slow
def test_long_wrong_makes_wrong_answers_long_after_the_warm_start():
    """The design's lever, measured on sampled responses of a warm-started policy: with
    the link, correct responses carry no filler and wrong ones are longer; without it,
    correct responses carry filler too (the check can fail)."""
    from exchange.lab.generation import sample_group_rollout
    from exchange.lab.sft import sft_warm_start
    from exchange.lab.tasks import VOCAB_SIZE, GrammarLM
    from exchange.models import TinyLM, TinyLMConfig

    out = {}
    for link in (True, False):
        task = get_task("arithmetic", 3, 0.5, long_wrong=link)
        lm = GrammarLM(TinyLM(TinyLMConfig(VOCAB_SIZE, 5 + 2 * task.max_response_len, 32, 2, 1, seed=0)), task)
        sft_warm_start(lm, task, 60, 64, 3e-3, torch.Generator().manual_seed(1))
        r = sample_group_rollout(lm, task, task.sample_prompts(64, torch.Generator().manual_seed(2)), 4,
                                 task.max_response_len, 1.0, torch.Generator().manual_seed(3))
        fill = torch.isin(r.tokens, torch.tensor(FILLER)).logical_and(r.mask).sum(1).double()
        good = r.rewards > 0
        assert 0.1 < float(good.double().mean()) < 0.9  # both kinds present
        out[link] = (float(fill[good].mean()), float(fill[~good].mean()))
    assert out[True][0] == 0.0 and out[True][1] > 0.3, out
    assert out[False][0] > 0.3, out


# ------------------------------------- template in the prompt (Task.template_in_prompt)
@pytest.mark.parametrize("name", list(TASKS))
def test_template_in_prompt_moves_the_template_out_of_the_response(name):
    from exchange.lab.generation import generate
    from exchange.lab.tasks import STYLE

    base, moved = get_task(name, 2, 0.5), get_task(name, 2, 0.5, template_in_prompt=True)
    assert moved.prompt_len == base.prompt_len + 2 and moved.max_response_len == base.max_response_len - 2
    gen = torch.Generator().manual_seed(0)
    prompts = moved.sample_prompts(64, gen)
    assert prompts.shape == (64, moved.prompt_len) and (prompts[:, -2:] == torch.tensor(TEMPLATE)).all()
    ref = moved.reference(prompts, gen)
    assert verify(moved, prompts, ref, ref != PAD).tolist() == [1.0] * 64
    assert not torch.isin(ref, torch.tensor(TEMPLATE)).any() and bool((ref[:, 0] == STYLE).any())
    tokens, mask, _ = generate(_uniform_grammar(moved), prompts, moved.max_response_len, 1.0,
                               torch.Generator().manual_seed(1))
    assert not torch.isin(torch.where(mask, tokens, PAD), torch.tensor(TEMPLATE)).any()  # the grammar bans it


def test_template_in_prompt_leaves_the_shared_mass_to_the_probe_event():
    """The dose is not diluted: on a GRPO update of sampled groups the template holds
    shared mass when it opens the response (the control: the check can fail) and none
    when it ends the prompt; S's shared events remain."""
    from exchange.core.coefficients import token_coefficients
    from exchange.core.events import events, shared_event_coefficients
    from exchange.core.rollout import Rollout
    from exchange.lab.klstep import control_contexts
    from exchange.lab.tasks import STYLE
    from exchange.objectives import resolve

    share = {}
    for moved in (False, True):
        task = get_task("arithmetic", 2, 0.5, template_in_prompt=moved)
        gen = torch.Generator().manual_seed(0)
        prompts = task.sample_prompts(32, gen).repeat_interleave(4, 0)  # groups of 4 warm-start-like responses
        tokens = task.reference(prompts, gen)
        zeros = torch.zeros(tokens.shape, dtype=torch.float64)
        r = Rollout(tokens=tokens, mask=tokens != PAD, rewards=torch.arange(128, dtype=torch.float64) % 3,
                    group=torch.arange(128) // 4, old_logprobs=zeros, logprobs=zeros, prompt_tokens=prompts,
                    prompt_mask=torch.ones(prompts.shape, dtype=torch.bool))
        kappa = token_coefficients(resolve("grpo"), r.logprobs, r)
        ev = events(r)
        ids, _, mass = shared_event_coefficients(kappa, ev)
        tok = torch.zeros(ev.count, dtype=torch.long)
        tok[ev.ids[ev.ids >= 0]] = r.tokens[ev.ids >= 0]
        template = torch.isin(tok[ids], torch.tensor(TEMPLATE))
        share[moved] = (float(mass[template].sum() / mass.sum()), int((tok[ids] == STYLE).sum()))
        if moved:  # the S slot is response position 0 and stays out of the control contexts
            assert not control_contexts(r)[:, 0].any()
    assert share[False][0] > 0.3 and share[True][0] == 0.0, share
    assert share[True][1] > 0, share


# ------------------------------------------ the teacher-forced shared prefix (forced_style)
def test_forced_style_writes_s_into_every_response_and_keeps_its_log_prob():
    """S is emitted whatever the policy (sampling and greedy), so it is shared by every
    group and carries no credit by construction; the objective still sees the policy's
    own log p(S) there (not 0), so its drift is measurable."""
    from exchange.lab.generation import greedy_accuracy, sample_group_rollout
    from exchange.lab.tasks import STYLE

    task = get_task("arithmetic", 2, 0.5, template_in_prompt=True, forced_style=True)
    lm = _uniform_grammar(task)
    r = sample_group_rollout(lm, task, task.sample_prompts(16, torch.Generator().manual_seed(0)), 4,
                             task.max_response_len, 1.0, torch.Generator().manual_seed(1))
    assert bool((r.tokens[:, 0] == STYLE).all())
    # the policy's own log p(S): uniform over the 17 ids the grammar allows there (no template)
    assert torch.allclose(r.old_logprobs[:, 0], torch.full((r.n,), -math.log(17.0), dtype=torch.float64))
    free = get_task("arithmetic", 2, 0.5, template_in_prompt=True)  # the control: S is sampled, not forced
    r0 = sample_group_rollout(_uniform_grammar(free), free, free.sample_prompts(16, torch.Generator().manual_seed(0)),
                              4, free.max_response_len, 1.0, torch.Generator().manual_seed(1))
    assert not bool((r0.tokens[:, 0] == STYLE).all())
    greedy_accuracy(lm, task, task.sample_prompts(4, torch.Generator().manual_seed(2)), task.max_response_len)
    with pytest.raises(InvalidArgument, match="forced_style=true needs task.template_in_prompt=true"):
        get_task("arithmetic", 2, 0.5, forced_style=True)


def test_a_forced_probe_is_certified_by_construction_and_a_sampled_one_is_not():
    from exchange.lab.pilot import freeze
    from exchange.lab.predictions import RunData

    def run(k):
        init = {"drift/style_logp": -0.7, "entropy/fixed_weak_credit": 0.5, **{f"cert/style_{x}": v for x, v in
                (("forced", 0.6), ("banned", 0.5), ("credit", 0.1), ("low", 0.08), ("high", 0.12), ("n", 64))}}
        rows = [{"step": 0, "tax/style_K_signed": 0.1, "tax/shared_update_share": 0.01 * k,
                 "attr/drift/style_logp/shared": 0.01 * k, "attr/entropy/fixed_weak_credit/shared": 0.0,
                 "drift/style_logp": -0.7 + 0.01 * k, "entropy/fixed_weak_credit": 0.5, **{
                     f"cert/style_{x}": v for x, v in (("forced", 0.6), ("banned", 0.5), ("credit", 0.1),
                                                      ("low", 0.08), ("high", 0.12), ("n", 64))}}]
        return RunData(init=init, rows=rows, target_accuracy=0.0)

    runs = {"baseline": {s: run(s + 1) for s in (0, 1)}, "surgical": {s: run(0) for s in (0, 1)}}
    sens = {s: run(s + 3) for s in (0, 1)}
    assert freeze("x", runs, sens).certified is False  # S carries 0.1 of P(correct): above any bound here
    forced = freeze("x", runs, {}, by_construction=True)
    assert forced.certified is True and any("by construction" in n for n in forced.notes)
    # no bound (no sensitivity runs): still not certified, and S's measured credit is recorded (issue 42:
    # an uncertified probe's rows are measurements that carry the credit S was measured to have)
    unbound = freeze("x", runs, {})
    assert unbound.certified is False and unbound.bound is None
    assert [(c["when"], c["credit"], c["certified"]) for c in unbound.certificates] == [
        ("warm start", 0.1, False), ("end", 0.1, False)] * 4
