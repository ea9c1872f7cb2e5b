"""``[task] exact_filler`` (issue 42's non-private M1 design): every response is
``[S, d1, d2, F_1 .. F_k, EOS]`` with exactly ``k = max_filler`` fillers, a filler may be S
(``probe_as_filler``), the forced head S keeps the policy's own log-prob, filler stays
zero-credit, and the option's combinations are validated."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.lab.generation import sample_group_rollout
from exchange.lab.tasks import (
    EOS, FILLER, PAD, ROLE_FILLER, ROLE_STYLE, STYLE, VOCAB_SIZE, GrammarLM, get_task, token_roles, verify,
)

K = 2


def _task(exact: bool = True):
    return get_task("arithmetic", K, 0.5, template_in_prompt=True, forced_style=True, probe_as_filler=True,
                    fixed_answer=True, exact_filler=exact)


class _Uniform(torch.nn.Module):
    def forward(self, ids):
        return torch.zeros(ids.shape + (VOCAB_SIZE,))


def _sample(task, grammar_task=None, n=128):
    lm = GrammarLM(_Uniform(), grammar_task or task)
    return sample_group_rollout(lm, task, task.sample_prompts(n, torch.Generator().manual_seed(0)), 4,
                                task.max_response_len, 1.0, torch.Generator().manual_seed(1))


def test_every_response_has_one_length_and_s_is_sampled_at_filler_positions():
    task = _task()
    assert task.max_response_len == 1 + 2 + K + 1
    r = _sample(task)
    assert set(r.lengths.tolist()) == {task.max_response_len}
    assert bool((r.tokens[:, -1] == EOS).all()) and bool((r.tokens[:, 0] == STYLE).all())
    fill = r.tokens[:, 3:3 + K]
    assert bool(torch.isin(fill, torch.tensor(FILLER + (STYLE,))).all())
    assert 0.2 < float((fill == STYLE).double().mean()) < 0.5  # S is a sampled filler (uniform: 1/3)
    roles = token_roles(r.tokens)
    assert bool((roles[:, 0] == ROLE_STYLE).all()) and bool((roles[:, 3:3 + K] == ROLE_FILLER).all())
    # the forced head S keeps the policy's own log p (uniform over the 12 decision ids and S), not the grammar's -1e4
    assert torch.allclose(r.old_logprobs[:, 0], torch.full((r.n,), -math.log(13.0), dtype=torch.float64))


def test_a_grammar_that_lets_eos_come_early_fails_the_length_check():
    """The planted bug: the same sampler under a grammar without exact_filler (EOS allowed right
    after the answer) gives responses of several lengths, so the check above can fail."""
    task = _task()
    r = _sample(task, grammar_task=_task(exact=False))
    assert len(set(r.lengths.tolist())) > 1


def test_the_verifier_ignores_filler_whatever_it_holds():
    task = _task()
    prompts = task.sample_prompts(8, torch.Generator().manual_seed(2))
    ref = task.reference(prompts, torch.Generator().manual_seed(3), style=torch.ones(8, dtype=torch.bool))
    assert bool((ref != PAD).sum(1).eq(task.max_response_len).all())  # the warm start's data: exactly K fillers
    assert bool(verify(task, prompts, ref, ref != PAD).eq(1).all())
    for fill in itertools.product(FILLER + (STYLE,), repeat=K):
        rows = ref.clone()
        rows[:, 3:3 + K] = torch.tensor(fill)
        assert bool(verify(task, prompts, rows, rows != PAD).eq(1).all()), fill
        wrong = rows.clone()
        wrong[:, 1] = torch.where(wrong[:, 1] == 11, 12, 11)  # another carry digit: wrong whatever the filler
        assert bool(verify(task, prompts, wrong, wrong != PAD).eq(0).all()), fill
    with pytest.raises(InvalidArgument, match="exactly max_filler=2 fillers; pass n_filler=None or 2"):
        task.reference(prompts, torch.Generator(), n_filler=torch.zeros(8, dtype=torch.long))


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"fixed_answer": False}, "fixed_answer=False"),
    ({"max_filler": 0}, "max_filler=0"),
    ({"long_wrong": True}, "long_wrong=True"),
])
def test_exact_filler_combinations_are_validated(kwargs, why):
    args = {"max_filler": K, "style_p": 0.5, "template_in_prompt": True, "forced_style": True,
            "probe_as_filler": K > 0 and kwargs.get("max_filler", K) > 0, "fixed_answer": True, **kwargs}
    with pytest.raises(InvalidArgument, match=f"task.exact_filler=true with .*{why}.*needs task.fixed_answer"):
        get_task("arithmetic", exact_filler=True, **args)


def test_the_drift_probes_are_grammatical_under_exact_filler():
    """Both probe rows carry K fillers (a row without any would end where the grammar bans EOS)."""
    from exchange.lab.drift import make_probes, probe_logprobs

    task = _task()
    probes = make_probes(task, 4, torch.Generator().manual_seed(4))
    assert bool(probes.mask.sum(1).eq(task.max_response_len).all())
    got = probe_logprobs(GrammarLM(_Uniform(), task), probes)
    assert got["drift/ref_seq_logp"] > -30.0  # no -1e4 token anywhere
    assert got["drift/style_logp"] == pytest.approx(-math.log(13.0))
