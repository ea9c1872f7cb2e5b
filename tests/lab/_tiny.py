"""A tiny experiment config shared by the lab tests (seconds, not minutes)."""

TINY_TOML = """
name = "{name}"
description = "tiny test experiment"
mechanism = "M3"
seeds = {seeds}
target_accuracy = 0.5
[task]
name = "{task}"
[model]
d_model = 16
n_heads = 2
n_layers = 1
[sft]
steps = {sft_steps}
batch = 16
[train]
steps = {steps}
prompts_per_step = 2
group_size = 4
epochs = 2
minibatches = 2
eval_every = 3
eval_prompts = 8
probe_prompts = 2
ckpt_every = {ckpt_every}
max_response_len = 9
[[arms]]
name = "grpo"
objective = "grpo"
role = "baseline"
[[arms]]
name = "dr_grpo"
objective = "dr_grpo"
role = "treatment"
"""


def tiny_config(tmp_path, name="tiny", seeds=(0,), steps=6, task="arithmetic", sft_steps=5, ckpt_every=2):
    path = tmp_path / f"{name}.toml"
    path.write_text(TINY_TOML.format(name=name, seeds=list(seeds), steps=steps, task=task,
                                     sft_steps=sft_steps, ckpt_every=ckpt_every))
    return path
