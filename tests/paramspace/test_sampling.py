"""Rollouts built from a model are on-policy and event-consistent by construction."""

import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.core.events import events
from exchange.models import response_entropy, response_logprobs
from exchange.paramspace import rollout_from_tokens, sample_rollout

from tests.paramspace.helpers import PREFIX


def test_sampled_rollout_fields(lm, rollout):
    r = rollout
    assert r.n == 8 and r.n_groups == 2
    assert (r.tokens[:, : len(PREFIX)] == torch.tensor(PREFIX)).all()
    L = r.lengths - len(PREFIX)
    assert ((L >= 1) & (L <= 6)).all()
    assert torch.equal(r.old_logprobs, r.logprobs)
    assert torch.allclose(r.logprobs, response_logprobs(lm, r), rtol=0, atol=1e-14)
    assert torch.allclose(r.entropy, response_entropy(lm, r), rtol=0, atol=1e-14)
    for g in range(r.n_groups):
        rewards = r.rewards[r.group_index == g]
        assert rewards.min() == 0 and rewards.max() == 1  # mixed: non-zero advantages


def test_event_consistency(rollout):
    ev = events(rollout)
    for field in ("old_logprobs", "entropy"):
        values = getattr(rollout, field)
        for e in range(ev.count):
            occ = values[ev.ids == e]
            assert torch.allclose(occ, occ[:1].expand_as(occ), rtol=0, atol=1e-14)


def test_reward_function_and_eos(lm):
    r = sample_rollout(lm, [[1]], G=3, rewards=lambda p, y: float(len(y)), eos_id=0, max_new_tokens=5, seed=2)
    assert torch.equal(r.rewards, r.lengths.double())
    for i in range(r.n):
        body = r.tokens[i, : int(r.lengths[i])].tolist()
        assert 0 not in body[:-1]  # stops right after the first eos


def test_rollout_from_tokens_scores_given_responses(lm):
    tokens = torch.tensor([[5, 6, 1], [5, 6, 0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    r = rollout_from_tokens(
        lm, torch.tensor([[1, 2], [1, 2]]), torch.ones(2, 2, dtype=torch.bool), tokens, mask,
        torch.tensor([1.0, 0.0]), torch.tensor([0, 0]),
    )
    assert torch.allclose(r.old_logprobs[0, :2], r.old_logprobs[1, :2], rtol=0, atol=1e-15)
    assert r.old_logprobs[1, 2] == 0 and r.entropy[1, 2] == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"G": 1}, "G=1"),
        ({"min_new_tokens": 3, "max_new_tokens": 2}, "min_new_tokens=3"),
        ({"temperature": 0.0}, "temperature=0.0"),
        ({"rewards": torch.zeros(3)}, r"rewards shape=\[3\]"),
    ],
)
def test_bad_arguments(lm, kwargs, match):
    with pytest.raises(InvalidArgument, match=match):
        sample_rollout(lm, [[1]], **kwargs)
    with pytest.raises(InvalidArgument, match="prompts="):
        sample_rollout(lm, [[]])
