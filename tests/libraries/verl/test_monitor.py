"""The verl monitor (``exchange.libraries.verl.monitor``) through verl's own ``ppo_loss``.

verl 0.9.1's FSDP engine asserts CUDA at its first batch, so the batch goes through the
steps the trainer and the engine take, with verl's own functions: ``DataProto`` ->
``to_tensordict`` -> ``left_right_2_no_padding`` (``RayPPOTrainer._update_actor``), the
sizes ``_update_actor`` assigns, ``tu.make_iterator`` (``train_mini_batch``: one
optimizer step per mini-batch), ``batch_num_tokens``/``dp_size`` and
``tu.chunk_tensordict`` (``forward_backward_batch`` / ``prepare_micro_batches`` without
dynamic batch size), the loss called as ``forward_step`` calls it, and the metrics
aggregated as ``train_mini_batch`` and the trainer aggregate them. The model is a tiny
Llama built from a config (no download).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from exchange.core.events import events, shared_residual_parts
from exchange.core.metric_keys import SHARED_EVENTS, SHARED_KAPPA_SHARE, SHARED_RESIDUAL

pytestmark = pytest.mark.usefixtures("verl_ready")

N_GEN, N_GROUPS, P, R = 4, 3, 3, 6
KEYS = (SHARED_RESIDUAL, SHARED_EVENTS, SHARED_KAPPA_SHARE)


def _verl_source(relative: str) -> str:
    """The text of an installed verl module (some cannot be imported here: the FSDP
    engine imports peft)."""
    root = Path(importlib.util.find_spec("verl").submodule_search_locations[0])
    return " ".join((root / relative).read_text().split())  # whitespace-normalised


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(cfg).double()


def _sequence_logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    """``[L]``: log p(ids[j+1] | ids[:j+1]) at ``j`` (verl's left-shifted layout), 0 last."""
    logits = model(input_ids=ids[None]).logits[0]
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(1, ids[1:, None])[:, 0]
    return torch.cat([lp, lp.new_zeros(1)])


def _model_output(model, micro) -> dict:
    """What the engine's ``forward_step`` hands the loss: ``log_probs`` as a jagged
    nested tensor over each row's unpadded prompt + response."""
    ids = micro["input_ids"]
    offsets = ids.offsets()
    values = torch.cat([_sequence_logprobs(model, ids.values()[offsets[i]:offsets[i + 1]])
                        for i in range(len(offsets) - 1)])
    return {"log_probs": torch.nested.nested_tensor_from_jagged(values, offsets=offsets)}


def _dataproto(model, hole: bool = False):
    """``N_GROUPS`` groups of ``N_GEN`` responses sharing their first two tokens per
    group (shared events), unequal lengths, binary rewards, verl's GRPO advantages, old
    log-probs equal to the model's (on-policy). ``hole``: row 1 gets a tool-output span
    (``response_mask`` 0, attention 1) inside its response, as verl's agent loop does."""
    import numpy as np
    from verl import DataProto
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    g = torch.Generator().manual_seed(3)
    n = N_GEN * N_GROUPS
    prompts = torch.randint(1, 32, (n, P), generator=g)
    pmask = torch.ones(n, P, dtype=torch.long)
    pmask[0, 0] = 0  # left padding
    prompts[0, 0] = 0
    responses = torch.randint(1, 32, (n, R), generator=g)
    for grp in range(N_GROUPS):
        rows = slice(grp * N_GEN, (grp + 1) * N_GEN)
        prompts[rows] = prompts[grp * N_GEN]
        pmask[rows] = pmask[grp * N_GEN]
        responses[rows, :2] = responses[grp * N_GEN, :2]
    lengths = torch.tensor([3 + (i * 5) % 4 for i in range(n)])
    rmask = (torch.arange(R)[None, :] < lengths[:, None]).long()
    responses = responses * rmask
    attention = torch.cat([pmask, rmask], dim=1)
    if hole:
        rmask[1, 2:4] = 0  # tool output: context, not the policy's tokens
    rewards = torch.tensor([float((i * 7) % 3 == 0) for i in range(n)], dtype=torch.float64)
    scores = torch.zeros(n, R, dtype=torch.float64)
    scores[torch.arange(n), lengths - 1] = rewards
    uid = np.array([f"prompt-{i // N_GEN}" for i in range(n)], dtype=object)
    adv, _ = compute_grpo_outcome_advantage(scores, rmask, uid)
    input_ids = torch.cat([prompts, responses], dim=1)
    old = torch.zeros(n, R, dtype=torch.float64)
    with torch.no_grad():
        for i in range(n):
            seq = input_ids[i][attention[i].bool()]
            lp = _sequence_logprobs(model, seq)
            plen = int(pmask[i].sum())
            old[i, : int(lengths[i])] = lp[plen - 1: plen - 1 + int(lengths[i])]
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": input_ids, "attention_mask": attention,
                 "position_ids": (attention.cumsum(1) - 1).clamp(min=0), "response_mask": rmask,
                 "old_log_probs": old * rmask, "advantages": adv, "token_level_scores": scores},
        non_tensors={"uid": uid},
        meta_info={"temperature": 1.0},
    )


def _actor(mode: str = "token-mean", loss_mode: str = "vanilla"):
    from verl.workers.config import ActorConfig, PolicyLossConfig

    return ActorConfig(strategy="fsdp", rollout_n=N_GEN, ppo_micro_batch_size_per_gpu=2, ppo_mini_batch_size=2,
                       clip_ratio=0.2, loss_agg_mode=mode, policy_loss=PolicyLossConfig(loss_mode=loss_mode))


def _train(monitor_or_loss, model, data, mini_batch_rows: int, micro_rows: int, config, shuffle=True, dp_group=None):
    """One ``update_actor`` call, as verl 0.9.1 runs it: returns the metrics the trainer
    logs (``reduce_metrics`` of the ``actor/``-prefixed worker output) and, per optimizer
    step, the rows and the oracle ``kappa [rows, T]`` of each micro-batch. ``dp_group``:
    ``data`` is this rank's share, ``mini_batch_rows`` the global mini-batch (as
    ``train_mini_batch`` divides it) and the token count is all-reduced as the engine does."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.metric import Metric, reduce_metrics
    from verl.utils.py_functional import append_to_dict, rename_dict
    from verl.workers.utils.padding import left_right_2_no_padding

    td = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(td, global_batch_size=mini_batch_rows, mini_batch_size=mini_batch_rows, epochs=1, seed=0,
                         dataloader_kwargs={"shuffle": shuffle}, compute_loss=True)
    loss_function = partial(monitor_or_loss, config=config)
    steps, per_step_outputs = [], []
    dp = 1 if dp_group is None else torch.distributed.get_world_size(dp_group)
    for mini in tu.make_iterator(td, mini_batch_size=mini_batch_rows // dp, epochs=1, seed=0,
                                 dataloader_kwargs={"shuffle": shuffle}):
        tokens = mini["loss_mask"].sum()
        if dp_group is not None:
            torch.distributed.all_reduce(tokens, group=dp_group)
        tu.assign_non_tensor(mini, batch_num_tokens=int(tokens), dp_size=dp)
        aggregated, step = {}, []
        for micro in tu.chunk_tensordict(mini, len(mini) // micro_rows):
            out = _model_output(model, micro)
            loss, metrics = loss_function(model_output=out, data=micro, dp_group=dp_group)
            loss.backward()
            append_to_dict(aggregated, metrics)  # postprocess_batch_func
            step.append((micro, _oracle_kappa(model, micro, config)))
        steps.append(step)
        per_step_outputs.append(aggregated)
    metrics: dict = {}
    for output in per_step_outputs:  # train_mini_batch (dp_group None: no list of ranks)
        for key, val in output.items():
            if isinstance(val, list) and val and isinstance(val[0], Metric):
                output[key] = Metric.aggregate_dp(val)
        append_to_dict(metrics, output)
    return reduce_metrics(rename_dict(metrics, "actor/")), steps


def _oracle_kappa(model, micro, config) -> torch.Tensor:
    """``-d loss / d log_prob`` on a padded ``[bs, T]`` leaf, by verl's policy loss as
    ``ppo_loss`` calls it (``global_batch_info`` as ``ppo_loss`` left it)."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.utils.padding import no_padding_2_padding

    with torch.no_grad():
        values = _model_output(model, micro)["log_probs"].values()
    lp = no_padding_2_padding(values, micro).clone().requires_grad_(True)
    padded = micro.select("response_mask", "old_log_probs", "advantages").to_padded_tensor()
    loss, _ = get_policy_loss_fn(config.policy_loss.loss_mode)(
        old_log_prob=padded["old_log_probs"], log_prob=lp, advantages=padded["advantages"],
        response_mask=padded["response_mask"].bool(), loss_agg_mode=config.loss_agg_mode, config=config,
        rollout_is_weights=None)
    (grad,) = torch.autograd.grad(loss, lp)
    return -grad


def _oracle_metrics(step) -> dict[str, float]:
    """The step's metrics from the definitions, computed apart from the monitor's path."""
    from exchange.core.rollout import Rollout
    from verl.utils import tensordict_utils as tu

    tokens = torch.cat([m["responses"] for m, _ in step])
    mask = torch.cat([m["response_mask"] for m, _ in step]).bool()
    kappa = torch.cat([k for _, k in step]).double() * mask
    uid = [u for m, _ in step for u in tu.get(m, "uid")]
    names = sorted(set(uid))
    group = torch.tensor([names.index(u) for u in uid])
    n = len(uid)
    r = Rollout(tokens=tokens * mask, mask=mask, rewards=torch.zeros(n, dtype=torch.float64), group=group,
                old_logprobs=torch.zeros(mask.shape, dtype=torch.float64), advantages=torch.zeros(n, dtype=torch.float64))
    parts = shared_residual_parts(kappa, r, events(r))
    total = float(kappa.abs().sum())
    return {SHARED_RESIDUAL: parts.value, SHARED_EVENTS: float(parts.events),
            SHARED_KAPPA_SHARE: parts.mass / total if total else 0.0}


def _monitor():
    from verl.workers.utils.losses import ppo_loss

    from exchange.libraries.verl.monitor import StepMonitor

    return StepMonitor(ppo_loss)


# ------------------------------------------------------------------ contract
def test_verls_loss_signature_and_call_site_are_the_ones_the_monitor_wraps():
    """The contact: ``ppo_loss(config, model_output, data, dp_group=None)``, bound by the
    actor worker as ``partial(ppo_loss, config=...)`` from ``verl.workers.utils.losses``
    and called per micro-batch by the engine with keywords; the step sizes the monitor
    reads are assigned where it expects them; the actor's metrics reach the log under
    ``actor/``. A verl that changes any of these fails here."""
    from verl.workers.utils.losses import ppo_loss

    params = inspect.signature(ppo_loss).parameters
    assert list(params) == ["config", "model_output", "data", "dp_group"]
    assert params["dp_group"].default is None
    workers = _verl_source("workers/engine_workers.py")
    assert "from verl.workers.utils.losses import ppo_loss" in workers
    assert "self.loss_fn = partial(ppo_loss, config=actor_config)" in workers
    engine = _verl_source("workers/engine/fsdp/transformer_impl.py")
    assert ("loss, metrics = loss_function( model_output=model_output, data=micro_batch, "
            "dp_group=self.get_data_parallel_group() )") in engine
    assert "tu.assign_non_tensor(data, dp_size=self.get_data_parallel_size())" in engine
    assert "mini_batch_size_per_gpu = mini_batch_size // self.engine.get_data_parallel_size()" in workers
    trainer = _verl_source("trainer/ppo/ray_trainer.py")
    assert "global_batch_size=ppo_mini_batch_size, mini_batch_size=ppo_mini_batch_size," in trainer
    assert 'actor_output = rename_dict(actor_output, "actor/")' in trainer
    losses = _verl_source("workers/utils/losses.py")
    assert 'log_prob = no_padding_2_padding(model_output["log_probs"], data)' in losses
    assert re.search(r"values = tensor\.values\(\) if tensor\.is_nested else tensor",
                     _verl_source("workers/utils/padding.py"))


def test_install_wraps_ppo_loss_in_a_fresh_process_through_the_plugin(monkeypatch):
    """The plugin (loaded in every verl process) installs the monitor under
    ``EXCHANGE_VERL_MONITOR=1``, before the actor worker binds ``ppo_loss``; otherwise
    it leaves verl's loss alone."""
    import os

    from exchange.libraries.verl.monitor import ENV, wanted

    code = ("import verl\n"
            "from verl.workers.utils import losses\n"
            "from exchange.libraries.verl.monitor import StepMonitor, install\n"
            "assert isinstance(losses.ppo_loss, StepMonitor), type(losses.ppo_loss)\n"
            "assert install() is losses.ppo_loss\n"  # idempotent
            "print('wrapped')\n")
    env = {"VERL_USE_EXTERNAL_MODULES": "exchange.libraries.verl.plugin", ENV: "1", "EXCHANGE_VERL_OBJECTIVES": "grpo"}
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "wrapped" in done.stdout, done.stderr[-2000:]
    for value, on in (("", False), ("0", False), ("1", True), ("true", True)):
        monkeypatch.setenv(ENV, value)
        assert wanted() is on


# ------------------------------------------------------------------ measurements
def test_one_step_of_whole_groups_cancels_and_reaches_verls_log():
    """Mini-batch = the whole batch (one optimizer step), micro-batches of 2 rows that
    split every group: vanilla token-mean on-policy normalises by the step's tokens
    (``batch_num_tokens``), so the step's shared events cancel (T1) although no
    micro-batch holds a whole group. The logged value is the monitor's, through verl's
    metric aggregation, and equals the definitions computed apart."""
    model, config = _model(), _actor()
    data = _dataproto(model)
    monitor = _monitor()
    logged, steps = _train(monitor, model, data, mini_batch_rows=len(data), micro_rows=2, config=config)
    assert len(monitor.history) == len(steps) == 1
    want = _oracle_metrics(steps[0])
    assert want[SHARED_EVENTS] >= 2 * N_GROUPS  # the first two tokens of each group
    for key in KEYS:
        assert monitor.history[0][key] == pytest.approx(want[key], rel=1e-9, abs=1e-12)
        assert logged[f"actor/{key}"] == pytest.approx(want[key], rel=1e-9, abs=1e-12)
    assert logged[f"actor/{SHARED_RESIDUAL}"] < 1e-12
    assert 0 < logged[f"actor/{SHARED_KAPPA_SHARE}"] < 1
    assert "actor/pg_loss" in logged  # verl's own metrics are untouched


def test_per_response_normalisation_shows_as_a_residual():
    """seq-mean-token-mean weights each response by 1/L_i (M3): with unequal lengths the
    shared events do not cancel; the monitor measures what the definitions say."""
    model, config = _model(), _actor("seq-mean-token-mean")
    data = _dataproto(model)
    monitor = _monitor()
    logged, steps = _train(monitor, model, data, mini_batch_rows=len(data), micro_rows=4, config=config)
    want = _oracle_metrics(steps[0])
    assert want[SHARED_RESIDUAL] > 1e-3
    assert logged[f"actor/{SHARED_RESIDUAL}"] == pytest.approx(want[SHARED_RESIDUAL], rel=1e-9)


def test_mini_batches_that_split_groups_are_judged_per_step(tmp_path, monkeypatch):
    """ppo_mini_batch_size below the batch with verl's shuffle (M8): each optimizer step
    holds part of each group, whose advantages do not sum to zero inside the step. The
    monitor logs one value per step (the log is their mean) and each equals the
    definitions on that step's rows only. Written by verl's FileLogger, ``exchange plot``
    draws the three ``actor/tax/*`` series."""
    from exchange.training_log import read_training_log
    from exchange.training_plot import select_series
    from tests.test_training_log import _verl_file

    model, config = _model(), _actor()
    data = _dataproto(model)
    monitor = _monitor()
    logged, steps = _train(monitor, model, data, mini_batch_rows=len(data) // 2, micro_rows=2, config=config)
    assert len(monitor.history) == len(steps) == 2
    wants = [_oracle_metrics(step) for step in steps]
    for got, want in zip(monitor.history, wants):
        for key in KEYS:
            assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12)
    assert max(w[SHARED_RESIDUAL] for w in wants) > 1e-3
    assert logged[f"actor/{SHARED_RESIDUAL}"] == pytest.approx(sum(w[SHARED_RESIDUAL] for w in wants) / 2, rel=1e-9)
    path = _verl_file(tmp_path, monkeypatch, [(1, {k: float(v) for k, v in logged.items()})])
    assert select_series(read_training_log(path)).keys[:3] == tuple(sorted(f"actor/{k}" for k in KEYS))


def test_a_registered_exchange_loss_is_measured_too():
    """``ppo_loss`` looks ``loss_mode`` up in verl's registry, so ``exchange_dapo`` goes
    through the same monitor (DAPO's token-sum over the step: cancels on-policy)."""
    from exchange.libraries.verl.register import register

    register(["dapo"])
    model, config = _model(), _actor(loss_mode="exchange_dapo")
    data = _dataproto(model)
    monitor = _monitor()
    logged, steps = _train(monitor, model, data, mini_batch_rows=len(data), micro_rows=3, config=config)
    want = _oracle_metrics(steps[0])
    assert len(monitor.history) == 1 and want[SHARED_EVENTS] > 0
    for key in KEYS:
        assert logged[f"actor/{key}"] == pytest.approx(want[key], rel=1e-9, abs=1e-12)


def test_a_multi_turn_row_keeps_tool_tokens_as_context():
    """A response_mask with a hole (tool output inside the response) goes through the
    loss and the monitor: the tool tokens carry no coefficient and stay context."""
    model, config = _model(), _actor()
    data = _dataproto(model, hole=True)
    monitor = _monitor()
    logged, steps = _train(monitor, model, data, mini_batch_rows=len(data), micro_rows=2, config=config)
    kappa = torch.cat([k for _, k in steps[0]])
    mask = torch.cat([m["response_mask"] for m, _ in steps[0]]).bool()
    assert float(kappa[~mask].abs().max()) == 0.0  # verl's loss masks the tool tokens
    assert len(monitor.history) == 1
    assert 0 < logged[f"actor/{SHARED_KAPPA_SHARE}"] < 1


def test_what_the_monitor_creates_follows_its_inputs_device():
    """Every tensor the monitor creates follows its inputs (tests/test_device.py's guard:
    under ``torch.device("meta")`` a tensor made without ``device=`` lands on meta, and
    mixing it with the CPU inputs raises or leaves a meta result). ``kappa`` is made
    from the log-probs (``zeros_like``, ``new_zeros``), :func:`step_rollout`'s tensors on
    the mask's device. One move is deliberate, as in the TRL callback: each micro-batch's
    rows and ``kappa`` go to the CPU (``_add``), because the step is gathered over
    micro-batches and over ranks (``all_gather_object`` pickles them) and the events are
    found there; the metrics are plain numbers (``batch_sums`` on the CPU). On a GPU run
    that CPU is the one real device besides the inputs'; here the test checks that
    nothing else (meta) appears and that the step's metrics are the ones computed
    without the guard. The batch has a multi-turn hole, and two micro-batches make one
    step, so the gather of parts runs too."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    from exchange.libraries.step_metrics import batch_sums
    from exchange.libraries.verl.monitor import step_rollout

    model, config = _model(), _actor()
    td = left_right_2_no_padding(_dataproto(model, hole=True).to_tensordict())
    tu.assign_non_tensor(td, global_batch_size=len(td), batch_num_tokens=int(td["loss_mask"].sum()), dp_size=1)
    micros = list(tu.chunk_tensordict(td, 2))
    outputs = [_model_output(model, micro) for micro in micros]  # the model's forward: not the monitor's

    tokens, mask = _padded_cat(micros, "responses"), _padded_cat(micros, "response_mask")
    kappa = torch.ones(mask.shape, dtype=torch.float64)  # an input (on the CPU)

    def step(guard):
        monitor = _monitor()
        with guard():
            for micro, out in zip(micros, outputs):
                loss, metrics = monitor(config=config, model_output=out, data=micro)
                assert loss.device.type == "cpu"
            rollout = step_rollout(tokens, mask, [str(u) for m in micros for u in tu.get(m, "uid")])
            sums = batch_sums(kappa, rollout)
        created = [rollout.group, rollout.rewards, rollout.old_logprobs, rollout.tokens, rollout.mask, sums]
        assert all(t.device.type == "cpu" for t in created), [t.device for t in created]
        return monitor.history, {k: metrics[k].aggregate() for k in KEYS}, sums

    import contextlib

    guarded, plain = step(lambda: torch.device("meta")), step(contextlib.nullcontext)
    assert len(guarded[0]) == 1 and guarded[0] == plain[0] and guarded[1] == plain[1]
    assert torch.equal(guarded[2], plain[2]) and guarded[0][0][SHARED_EVENTS] > 0


def _padded_cat(micros, key: str) -> torch.Tensor:
    """``[N, T]``: ``key`` of every micro-batch, padded to one width and concatenated."""
    from exchange.libraries.verl.monitor import _padded, _width

    parts = [_padded(m[key]) for m in micros]
    width = max(p.shape[1] for p in parts)
    return torch.cat([_width(p, width) for p in parts])


def test_forward_only_calls_and_missing_keys_pass_through():
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    model, config = _model(), _actor()
    data = _dataproto(model)
    td = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(td, global_batch_size=len(td), batch_num_tokens=int(td["loss_mask"].sum()), dp_size=1)
    monitor = _monitor()
    with torch.no_grad():
        loss, metrics = monitor(config=config, model_output=_model_output(model, td), data=td)
    assert not set(metrics) & set(KEYS) and monitor.history == []
    td2 = td.exclude("uid")
    with pytest.warns(UserWarning, match="no uid"):
        loss, metrics = monitor(config=config, model_output=_model_output(model, td2), data=td2)
    assert not set(metrics) & set(KEYS) and loss.requires_grad


_DP_SCRIPT = """
import os, sys, json
import torch
sys.path.insert(0, sys.argv[1])
import test_monitor as tm


def rank_main(rank, out):
    torch.distributed.init_process_group("gloo", init_method="file://" + out + ".init", rank=rank, world_size=2)
    model, config = tm._model(), tm._actor()
    data = tm._dataproto(model)
    half = len(data) // 2
    share = data[rank * half:(rank + 1) * half]  # the dispatcher's contiguous shard: group 1 spans both ranks
    monitor = tm._monitor()
    tm._train(monitor, model, share, mini_batch_rows=len(data), micro_rows=2, config=config, shuffle=False,
              dp_group=torch.distributed.group.WORLD)
    with open(out + f".{rank}", "w") as f:
        json.dump(monitor.history, f)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    torch.multiprocessing.spawn(rank_main, args=(sys.argv[2],), nprocs=2)
"""


@pytest.mark.slow
def test_ranks_rows_are_gathered_before_the_events(tmp_path):
    """Two data-parallel ranks (gloo, CPU) each hold half of the mini-batch, with group 1
    split between them, as ``balance_batch`` and the dispatcher do: every rank logs the
    metrics of the whole step, equal to one process holding all of its rows (each rank's
    loss carries ``dp_size`` in its normaliser, the same factor on every coefficient)."""
    import json

    script = tmp_path / "dp.py"
    script.write_text(_DP_SCRIPT)
    out = str(tmp_path / "history")
    done = subprocess.run([sys.executable, str(script), str(Path(__file__).parent), out], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(2)]
    model, config = _model(), _actor()
    monitor = _monitor()
    _train(monitor, model, _dataproto(model), mini_batch_rows=N_GEN * N_GROUPS, micro_rows=2, config=config,
           shuffle=False)
    assert len(ranks[0]) == len(ranks[1]) == len(monitor.history) == 1
    for rank in ranks:
        for key in KEYS:
            assert rank[0][key] == pytest.approx(monitor.history[0][key], rel=1e-9, abs=1e-12)
    assert monitor.history[0][SHARED_EVENTS] >= 2 * N_GROUPS


def test_a_step_that_overruns_its_size_is_not_logged():
    """Micro-batches of 3 rows against a step of 4 rows per rank (``global_batch_size``
    that the micro-batches do not tile): the monitor never logs rows of two steps as one;
    it warns once and starts afresh."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    model, config = _model(), _actor()
    td = left_right_2_no_padding(_dataproto(model).to_tensordict())
    tu.assign_non_tensor(td, global_batch_size=4, batch_num_tokens=int(td["loss_mask"].sum()), dp_size=1)
    monitor = _monitor()
    micros = tu.chunk_tensordict(td, 4)  # 3 rows each
    _, first = monitor(config=config, model_output=_model_output(model, micros[0]), data=micros[0])
    with pytest.warns(UserWarning, match="held 6 rows on this rank, not global_batch_size/dp_size=4"):
        _, second = monitor(config=config, model_output=_model_output(model, micros[1]), data=micros[1])
    assert not (set(first) | set(second)) & set(KEYS) and monitor.history == []
