"""verl as it batches: ``balance_batch`` reorders rows, micro-batches split groups, a
micro-batch may hold one row. The ``exchange_*`` losses use verl's advantages as given
(never re-centred), so ``exchange_grpo`` equals verl's own ``vanilla`` loss micro-batch by
micro-batch whenever no token reaches vanilla's dual clip (``clip_ratio_c``), the one
term exchange's grpo does not have."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from exchange.checker.cases import Case, GroupConfig, build

pytestmark = pytest.mark.usefixtures("verl_ready")

N_GEN = 4  # rollout.n
CASE = Case(
    groups=tuple(
        GroupConfig(tuple((1 + g, *range(1, 2 + (3 * i + g) % 6)) for i in range(N_GEN)),
                    tuple(float((i + g) % 3 == 0) for i in range(N_GEN)))
        for g in range(3)
    ),
    off_policy=True,
    seed=11,
)


def _actor(mode: str):
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=N_GEN, ppo_micro_batch_size_per_gpu=3, clip_ratio=0.2,
                       clip_ratio_c=3.0, loss_agg_mode=mode)


def _balanced_batch():
    """A DataProto of 12 rows (3 groups of 4), reordered as verl's ``_balance_batch`` does
    for 2 data-parallel ranks: its partitioning (``get_seqlen_balanced_partitions`` over
    ``calculate_workload``) and its in-partition order (smaller workloads at both ends)
    then ``DataProto.reorder``. ``RayPPOTrainer`` itself cannot be imported here (its
    module imports torchdata and peft, which the verl extra does not install)."""
    import numpy as np
    from verl import DataProto
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.utils.seqlen_balancing import (
        calculate_workload,
        get_seqlen_balanced_partitions,
    )

    r = build(CASE).to(torch.float64)
    rewards = torch.zeros(r.mask.shape, dtype=torch.float64)
    rewards[torch.arange(r.n), r.lengths - 1] = r.rewards
    adv, _ = compute_grpo_outcome_advantage(rewards, r.mask.long(), np.array(r.group.tolist()))
    batch = DataProto.from_dict(
        tensors={"attention_mask": r.mask.long(), "response_mask": r.mask.long(), "old_log_probs": r.old_logprobs,
                 "log_probs": r.logprobs, "advantages": adv, "row": torch.arange(r.n)},
        non_tensors={"uid": np.array([f"g{int(g)}" for g in r.group])},
    )
    # ray_trainer.RayPPOTrainer._balance_batch (verl 0.9.1), dp_size=2, no prefix grouper:
    workload = calculate_workload(batch.batch["attention_mask"].sum(-1))
    partitions = get_seqlen_balanced_partitions(workload, k_partitions=2, equal_size=True)
    for idx, partition in enumerate(partitions):
        partition.sort(key=lambda x: (workload[x], x))
        partitions[idx] = partition[::2] + partition[1::2][::-1]
    batch.reorder(torch.tensor([j for partition in partitions for j in partition]))
    return batch


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_balanced_micro_batches_equal_verls_vanilla(mode):
    from verl.trainer.ppo import core_algos

    from exchange.libraries.verl.register import register

    register(["grpo"])
    batch = _balanced_batch()
    rows = batch.batch["row"].tolist()
    assert rows != sorted(rows)  # balance_batch did reorder
    ours, vanilla = core_algos.get_policy_loss_fn("exchange_grpo"), core_algos.get_policy_loss_fn("vanilla")
    config = _actor(mode)
    sizes = []
    for micro in batch.split(3) + batch.split(5) + batch[:1].split(1):  # 3 does not divide groups of 4
        b = micro.batch
        sizes.append(len(micro))
        ratio = torch.exp(b["log_probs"] - b["old_log_probs"])
        assert bool((ratio < config.clip_ratio_c).all())  # no dual clip: the one term grpo lacks
        grads = []
        for fn in (ours, vanilla):
            lp = b["log_probs"].clone().requires_grad_(True)
            loss, _ = fn(b["old_log_probs"], lp, b["advantages"], b["response_mask"].bool(), mode, config)
            grads.append((loss, torch.autograd.grad(loss, lp)[0]))
        (l1, g1), (l2, g2) = grads
        torch.testing.assert_close(l1, l2, rtol=1e-12, atol=1e-15)
        torch.testing.assert_close(g1, g2, rtol=1e-12, atol=1e-15)
    assert 1 in sizes and 3 in sizes


def test_advantages_are_never_recentred():
    """One group of three split as 1 + 2 rows: verl's 0.866/-0.866/... stay as they are (the old
    plugin re-centred the micro-batch, turning them into 1.155/-0.577/-0.577 and flipping
    the sign of the loss)."""
    from exchange.libraries.verl.register import rollout_from_verl

    mask = torch.ones(3, 2, dtype=torch.bool)
    adv = torch.tensor([0.866, -0.866, -0.866], dtype=torch.float64)[:, None].expand(3, 2)
    r = rollout_from_verl(torch.full((3, 2), -1.0, dtype=torch.float64), adv, mask)
    assert r.advantages.tolist() == [0.866, -0.866, -0.866]
    one = rollout_from_verl(torch.full((1, 2), -1.0, dtype=torch.float64), adv[:1], mask[:1])
    assert one.n == 1 and one.advantages.tolist() == [0.866]
    per_token = adv.clone()
    per_token[0, 1] = 0.5  # an estimator whose advantage varies along the response
    assert rollout_from_verl(torch.full((3, 2), -1.0, dtype=torch.float64), per_token, mask).advantages.shape == (3, 2)


def test_a_misspelt_objective_stops_the_plugin_naming_it():
    from exchange.errors import InvalidArgument
    from exchange.libraries.verl.plugin import chosen_objectives

    assert chosen_objectives("dapo, grpo") == ["dapo", "grpo"]
    assert chosen_objectives("") is None
    with pytest.raises(InvalidArgument, match="EXCHANGE_VERL_OBJECTIVES='dapoo'.*'dapoo'"):
        chosen_objectives("dapoo")


# ~5 s: a fresh process imports verl (the slow tier)
@pytest.mark.slow
def test_a_misspelt_objective_is_not_swallowed_by_verls_plugin_loader():
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "EXCHANGE_VERL_OBJECTIVES": "dapoo", "VERL_USE_EXTERNAL_MODULES": "exchange.libraries.verl.plugin",
           "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, "-c", "import verl"], capture_output=True, text=True, timeout=240, env=env,
                          check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "dapoo" in proc.stderr.strip().splitlines()[-1]
