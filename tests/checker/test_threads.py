"""``check()`` runs with one torch thread and restores the caller's setting."""

import pytest
import torch

from exchange import check
from exchange.objectives import get


@pytest.mark.parametrize("fails", [False, True])
def test_check_uses_one_thread_and_restores(fails):
    seen = set()
    grpo = get("dr_grpo").bind()

    def loss(logprobs, rollout):
        seen.add(torch.get_num_threads())
        if fails and len(seen) and rollout.n > 3:
            raise RuntimeError("boom")
        return grpo(logprobs, rollout)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        try:
            check(loss, properties=["zero_sum"], max_examples=5, regimes=("on_policy",))
        except Exception:
            assert fails
        assert seen == {1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
