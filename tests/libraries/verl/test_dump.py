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
