"""``dump_batch``: a verl DataProto (duck-typed here) -> a batch ``exchange inspect`` reads."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from exchange.checker.batch_analysis import inspect
from exchange.core.batch_io import load_batch
from exchange.errors import InvalidArgument
from exchange.libraries.verl.dump import dump_batch
from exchange.objectives import get


def test_dump_and_inspect(tmp_path):
    responses = torch.tensor([[3, 4, 5, 0], [3, 4, 6, 6], [3, 7, 0, 0], [3, 7, 2, 1]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]])
    scores = torch.zeros(4, 4)
    scores[0, 2] = 1.0
    scores[3, 3] = 1.0
    data = SimpleNamespace(
        batch={"responses": responses, "response_mask": mask, "token_level_scores": scores,
               "old_log_probs": torch.full((4, 4), -0.5)},
        non_tensor_batch={"uid": np.array(["p1", "p1", "p2", "p2"], dtype=object)},
    )
    path = dump_batch(data, tmp_path / "b" / "step-1.pt")
    r = load_batch(path)
    assert r.rewards.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert r.n_groups == 2 and r.group[0] == r.group[1] != r.group[2]
    found = inspect(get("grpo").bind(), r)
    assert found.n_shared == 4  # (3, 4) in one group, (3, 7) in the other


def _verl_batch(advantages):
    """A verl-shaped batch with prompts (left-padded) and the attention mask over prompt + response."""
    responses = torch.tensor([[3, 4, 5, 0], [3, 4, 6, 6], [3, 7, 0, 0], [3, 7, 2, 1]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]])
    prompts = torch.tensor([[0, 9, 8], [0, 9, 8], [7, 7, 6], [7, 7, 6]])
    prompt_mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])
    scores = torch.zeros(4, 4)
    scores[0, 2] = 1.0
    scores[3, 3] = 1.0
    batch = {"responses": responses, "response_mask": mask, "token_level_scores": scores, "prompts": prompts,
             "attention_mask": torch.cat([prompt_mask, mask], dim=1), "old_log_probs": torch.full((4, 4), -0.5),
             "advantages": advantages * mask}
    return SimpleNamespace(batch=batch, non_tensor_batch={"uid": np.array(["p1", "p1", "p2", "p2"], dtype=object)})


def test_dump_keeps_verl_advantages_and_the_prompt(tmp_path):
    """verl's advantages (an outcome estimator's: one value over each response) come back
    as [N]; the prompt as prompt_tokens/prompt_mask with its left padding; an objective
    that reads Rollout.advantages then sees verl's, not its own re-centred ones."""
    per_response = torch.tensor([0.7, -0.7, -0.3, 0.3])
    data = _verl_batch(per_response[:, None].expand(4, 4))
    r = load_batch(dump_batch(data, tmp_path / "step.pt"))
    assert r.advantages is not None and r.advantages.shape == (4,)
    assert torch.allclose(r.advantages, per_response.double())
    assert r.prompt_tokens.tolist() == [[0, 9, 8], [0, 9, 8], [7, 7, 6], [7, 7, 6]]
    assert r.prompt_mask.tolist() == [[False, True, True], [False, True, True], [True] * 3, [True] * 3]


def test_dump_keeps_token_level_advantages_per_token(tmp_path):
    """Advantages that vary over a response's tokens (gae-like) stay [N, T], zero on padding."""
    adv = torch.arange(16, dtype=torch.float32).view(4, 4) / 10
    r = load_batch(dump_batch(_verl_batch(adv), tmp_path / "step.pt"))
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]).bool()
    assert r.advantages.shape == (4, 4)
    assert torch.allclose(r.advantages, torch.where(mask, adv.double(), 0.0))


def test_dump_without_advantages_or_prompts_leaves_them_out(tmp_path):
    data = _verl_batch(torch.zeros(4, 1))
    del data.batch["advantages"], data.batch["prompts"]
    r = load_batch(dump_batch(data, tmp_path / "step.pt"))
    assert r.advantages is None and r.prompt_tokens is None and r.prompt_mask is None


# ------------------------------------------------------------ multi-turn batches (issue 41)
def _multi_turn_batch(response_mask=None):
    """verl's agent loop: policy tokens a=1 b=2, a tool's output (8 9, or 8 7 in row 4;
    response_mask 0, attention_mask 1), then c=3 and more; right padding after. Group p1
    (rows 0-2) saw the same tool output, so a, b and c are shared there; p2's differs."""
    responses = torch.tensor([[1, 2, 8, 9, 3, 4], [1, 2, 8, 9, 3, 5], [1, 2, 8, 9, 3, 0],
                              [1, 2, 8, 9, 3, 0], [1, 2, 8, 7, 3, 0]])
    real = torch.tensor([[1] * 6, [1] * 6, [1] * 5 + [0], [1] * 5 + [0], [1] * 5 + [0]])
    policy = real.clone()
    policy[:, 2:4] = 0
    scores = torch.zeros(5, 6)
    scores[0, 5] = 1.0
    scores[3, 4] = 1.0
    prompts = torch.tensor([[0, 9]] * 3 + [[6, 6]] * 2)
    prompt_mask = torch.tensor([[0, 1]] * 3 + [[1, 1]] * 2)
    batch = {"responses": responses, "response_mask": policy if response_mask is None else response_mask,
             "attention_mask": torch.cat([prompt_mask, real], dim=1), "token_level_scores": scores,
             "prompts": prompts, "old_log_probs": torch.full((5, 6), -0.5)}
    uid = np.array(["p1", "p1", "p1", "p2", "p2"], dtype=object)
    return SimpleNamespace(batch=batch, non_tensor_batch={"uid": uid}), policy.bool()


def test_dump_and_inspect_a_multi_turn_batch(tmp_path):
    """The dump keeps the tool tokens (context of every later token) and the mask's holes;
    inspect finds the shared events by hand (p1: a, b and c after the same tool output;
    p2: a and b, its c's follow different tool outputs) and the verdicts by hand: Dr. GRPO
    (one weight for every token) cancels every shared event; GRPO's 1/L_i over the policy's
    tokens (L = 4, 4, 3 in p1; A proportional to 2, -1, -1) leaves
    |2/4 - 1/4 - 1/3| / (2/4 + 1/4 + 1/3) = 1/13 on each of p1's shared events. Before
    issue 41 the dump raised "row 0 is not right-padded"."""
    data, policy = _multi_turn_batch()
    r = load_batch(dump_batch(data, tmp_path / "step.pt"))
    assert r.tokens.tolist() == data.batch["responses"].tolist()  # tool tokens kept
    assert torch.equal(r.mask, policy)
    assert r.rewards.tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
    found = inspect(get("dr_grpo").bind(), r)
    assert found.n_shared == 5 and found.shared_ids.tolist() == [0, 1, 2, 5, 6]
    assert found.max_residual == pytest.approx(0.0, abs=1e-15)
    found = inspect(get("grpo").bind(), r)
    assert found.n_shared == 5
    p1 = [g for g in found.groups if g.rows == (0, 1, 2)][0]
    assert p1.residual == pytest.approx(1 / 13, rel=1e-9)
    assert found.max_residual == pytest.approx(1 / 13, rel=1e-9)


def test_dump_reads_the_reward_on_a_trailing_tool_token(tmp_path):
    """A response that ends on a tool's output (the agent loop hit its turn limit) keeps
    the reward verl put on its last real token, where response_mask is 0."""
    data, _ = _multi_turn_batch()
    data.batch["response_mask"][0, 5] = 0
    data.batch["token_level_scores"][0] = 0.0
    data.batch["token_level_scores"][0, 5] = 1.0
    r = load_batch(dump_batch(data, tmp_path / "step.pt"))
    assert r.rewards.tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert r.spans.tolist() == [5, 6, 5, 5, 5] and r.tokens[0, 5] == 4


@pytest.mark.parametrize("edit,message", [
    (lambda m: m.__setitem__((1, 0), 2), "response_mask[1, 0]=2 is neither 0 nor 1"),
    (lambda m: m.__setitem__((2, 5), 1), "response_mask row 2 is 1 where attention_mask marks padding (columns [5])"),
])
def test_dump_refuses_a_malformed_multi_turn_mask(tmp_path, edit, message):
    data, policy = _multi_turn_batch()
    mask = policy.long()
    edit(mask)
    data.batch["response_mask"] = mask
    with pytest.raises(InvalidArgument) as err:
        dump_batch(data, tmp_path / "step.pt")
    assert message in str(err.value)
    assert not (tmp_path / "step.pt").exists()
