"""Rollout construction: every bad field gets a RolloutError naming the field and the fix."""

import pytest
import torch

from exchange import Rollout, RolloutError


def make(**overrides):
    fields = dict(
        tokens=torch.tensor([[1, 2, 3], [1, 2, 0], [4, 0, 0], [4, 5, 0]]),
        mask=torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0]], dtype=torch.bool),
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.5]),
        group=torch.tensor([3, 3, 7, 7]),
        old_logprobs=torch.full((4, 3), -0.5),
    )
    fields.update(overrides)
    return Rollout(**fields)


BAD = [
    ("tokens", dict(tokens=torch.tensor([1, 2, 3])), "not 2-D"),
    ("tokens", dict(tokens=torch.zeros(4, 3)), "integer"),
    ("tokens", dict(tokens=[[1, 2, 3]] * 4), "not a torch.Tensor"),
    ("mask", dict(mask=torch.ones(4, 3)), "torch.bool"),
    ("mask", dict(mask=torch.ones(4, 2, dtype=torch.bool)), "differs from tokens"),
    ("mask", dict(mask=torch.tensor([[1, 1, 1], [0, 0, 0], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)), "no real token"),
    ("mask", dict(mask=torch.tensor([[1, 0, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0]])), "is not torch.bool"),
    ("mask", dict(mask=torch.tensor([[1, 0, 2], [1, 1, 0], [1, 0, 0], [1, 1, 0]])), "holds 2, neither 0 nor 1"),
    ("mask", dict(mask=torch.tensor([[1, 0, 0.5], [1, 1, 0], [1, 0, 0], [1, 1, 0]])), "neither 0 nor 1"),
    ("rewards", dict(rewards=torch.tensor([1.0, 0.0, 1.0])), "[N]=[4]"),
    ("rewards", dict(rewards=torch.tensor([1.0, float("nan"), 1.0, 0.0])), "non-finite"),
    ("rewards", dict(rewards=torch.tensor([1.0, float("inf"), 1.0, 0.0])), "non-finite"),
    ("rewards", dict(rewards=torch.tensor([1, 0, 1, 0])), "float"),
    ("rewards", dict(rewards=torch.ones(4, 3)), "sum token rewards"),
    ("group", dict(group=torch.tensor([0, 0, 1, 2])), "single response"),
    ("group", dict(group=torch.tensor([0.0, 0.0, 1.0, 1.0])), "integer"),
    ("group", dict(group=torch.tensor([-1, -1, 1, 1])), "negative"),
    ("old_logprobs", dict(old_logprobs=torch.full((4, 3), 0.5)), "positive log-probability"),
    ("old_logprobs", dict(old_logprobs=torch.full((4, 2), -0.5)), "differs from tokens"),
    ("old_logprobs", dict(old_logprobs=torch.tensor([[-1.0, float("nan"), -1.0]] * 4)), "non-finite"),
    ("old_logprobs", dict(old_logprobs=None), "required"),
    ("entropy", dict(entropy=torch.full((4, 3), -1.0)), "negative entropy"),
    ("ref_logprobs", dict(ref_logprobs=torch.full((4, 3), 2.0)), "positive log-probability"),
    ("tokens", dict(tokens=torch.zeros(0, 3, dtype=torch.long)), "empty"),
    ("prompt_mask", dict(prompt_tokens=torch.zeros(4, 2, dtype=torch.long)), "together"),
]


@pytest.mark.parametrize("field,overrides,message", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_field_names_field_and_fix(field, overrides, message):
    with pytest.raises(RolloutError) as err:
        make(**overrides)
    text = str(err.value)
    assert f"Rollout.{field}" in text and message in text
    assert text.rstrip().endswith(".")  # a sentence with the fix, not a bare traceback


def test_group_helpers_are_per_group_and_order_free():
    r = make()
    assert r.lengths.tolist() == [3, 2, 1, 2]
    assert r.n_groups == 2 and r.group_sizes.tolist() == [2, 2, 2, 2]
    assert torch.allclose(r.group_mean(r.rewards), torch.tensor([0.5, 0.5, 0.75, 0.75]))
    assert torch.allclose(r.group_std(r.rewards), torch.tensor([0.5**0.5, 0.5**0.5, 0.125**0.5, 0.125**0.5]))
    assert r.group_max(r.rewards).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert r.group_min(r.rewards).tolist() == [0.0, 0.0, 0.5, 0.5]
    flipped = r.select([3, 0, 2, 1])
    assert torch.equal(flipped.group_mean(flipped.rewards), r.group_mean(r.rewards)[[3, 0, 2, 1]])


def test_round_trips():
    r = make(entropy=torch.ones(4, 3))
    again = Rollout.from_dict(r.to_dict())
    assert torch.equal(again.tokens, r.tokens) and torch.equal(again.mask, r.mask)
    assert torch.allclose(again.rewards, r.rewards.double())
    code = r.to_code()
    rebuilt = eval(code, {"Rollout": Rollout, "torch": torch})
    assert torch.equal(rebuilt.tokens, r.tokens) and torch.equal(rebuilt.group, r.group)
    assert "group=3" in str(r) and "L=3" in str(r)
    assert r.to(torch.float64).old_logprobs.dtype == torch.float64


def test_a_mask_with_holes_is_a_multi_turn_row():
    """A False before a row's last True is a context (tool-output) token, not a malformed
    mask: the row is accepted (it raised "not right-padded" before issue 41), ``lengths``
    counts the policy's tokens and ``spans`` reaches the last one."""
    holes = torch.tensor([[1, 0, 1], [1, 1, 0], [1, 0, 0], [1, 0, 1]], dtype=torch.bool)
    r = make(mask=holes)
    assert r.lengths.tolist() == [2, 2, 1, 2]
    assert r.spans.tolist() == [3, 2, 1, 3]
    assert torch.equal(r.mask, holes)
    # round trips keep the holes; the table brackets the context tokens
    assert torch.equal(Rollout.from_dict(r.to_dict()).mask, holes)
    assert "L=2 tokens=(1 [2] 3)" in str(r) and "L=2 tokens=(4 [5] 0)" in str(r)


def test_spans_follow_the_mask_device():
    r = make(mask=torch.tensor([[1, 0, 1], [1, 1, 0], [1, 0, 0], [1, 0, 1]], dtype=torch.bool))
    meta = r.mask.to("meta")
    spans = Rollout.spans.fget(type("R", (), {"mask": meta})())
    assert spans.device.type == "meta" and spans.shape == (4,)
