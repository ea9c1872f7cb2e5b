"""``dump_batch``: a verl DataProto (duck-typed here) -> a batch ``exchange inspect`` reads."""

from types import SimpleNamespace

import numpy as np
import torch

from exchange.checker.batch_analysis import inspect
from exchange.core.batch_io import load_batch
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
