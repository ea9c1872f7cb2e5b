"""Launched by test_multiprocess.py under ``accelerate launch --cpu --num_processes 2``:
a plain GRPOTrainer with ExchangeCallback, then ExchangeGRPOTrainer, both with gradient
accumulation 2, on the tiny model of test_trainer.py; then one SGD step of TRL's bnpo and
of ExchangeGRPOTrainer(objective="bnpo") with a group split between the processes, plain
and with top_entropy_quantile=0.5. Rank 0 writes the log histories and the four steps."""

import json
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
warnings.filterwarnings("ignore")

from datasets import Dataset  # noqa: E402
from test_trainer import _reward, _tiny_model_and_tokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from exchange.libraries.trl.callback import ExchangeCallback  # noqa: E402
from exchange.libraries.trl.trainer import ExchangeGRPOTrainer  # noqa: E402

out = Path(sys.argv[1])
dataset = Dataset.from_dict({"prompt": ["a b c", "d e f", "g h", "i j k", "l m", "n o p", "q r", "s t u"]})
result = {}
for name in ("callback", "trainer"):
    model, tokenizer = _tiny_model_and_tokenizer()
    args = GRPOConfig(
        output_dir=str(out / name), report_to="none", use_cpu=True, max_steps=2, logging_steps=1,
        per_device_train_batch_size=4, num_generations=4, gradient_accumulation_steps=2, max_completion_length=6,
        learning_rate=1e-3, save_strategy="no", seed=0, bf16=False,
    )
    common = dict(model=model, reward_funcs=_reward, args=args, processing_class=tokenizer, train_dataset=dataset)
    if name == "callback":
        trainer = GRPOTrainer(**common, callbacks=[ExchangeCallback()])
    else:
        trainer = ExchangeGRPOTrainer(**common, objective="grpo")
    trainer.train()
    result[name] = {"num_processes": trainer.accelerator.num_processes, "log_history": trainer.state.log_history}
# One SGD step (lr 1: the parameter change is the gradient) of TRL's bnpo with
# scale_rewards=batch and of ExchangeGRPOTrainer(objective="bnpo"): one group of 8 split
# between the two processes, each process's half row-shuffled into 2 micro-batches, so
# the advantages must come from the gathered rewards and the normalisers per micro-batch.
import torch

# The same with TRL's high-entropy mask (top_entropy_quantile=0.5): its quantile is taken
# over the micro-batch tokens of both processes (gathered), then each process masks its own.
for name in ("trl_bnpo", "exchange_bnpo", "trl_entropy", "exchange_entropy"):
    model, tokenizer = _tiny_model_and_tokenizer()
    entropy = {"top_entropy_quantile": 0.5} if name.endswith("entropy") else {}
    args = GRPOConfig(
        output_dir=str(out / name), report_to="none", use_cpu=True, max_steps=1, logging_steps=1,
        per_device_train_batch_size=2, num_generations=8, gradient_accumulation_steps=2, max_completion_length=6,
        learning_rate=1.0, optim="sgd", lr_scheduler_type="constant", max_grad_norm=0.0, weight_decay=0.0,
        save_strategy="no", seed=0, bf16=False, loss_type="bnpo", scale_rewards="batch",
        generation_kwargs={"sequence_bias": {(1,): 2.0}}, **entropy,
    )
    common = {"model": model, "reward_funcs": _reward, "args": args, "processing_class": tokenizer,
              "train_dataset": dataset}
    trainer = GRPOTrainer(**common) if name.startswith("trl") else ExchangeGRPOTrainer(**common, objective="bnpo")
    before = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    trainer.train()
    after = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    result[name] = {"step": (before - after).double().tolist()}
if trainer.accelerator.is_main_process:
    (out / "result.json").write_text(json.dumps(result))
# End deterministically: left to interpreter teardown, gloo's threads are sometimes
# destroyed while running ("terminate called without an active exception", exit -6).
import torch.distributed as dist  # noqa: E402

if dist.is_initialized():
    dist.barrier()
    dist.destroy_process_group()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
