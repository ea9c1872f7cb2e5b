"""Override lists of verl's own example scripts, transcribed for ``--verl-config`` tests.

Source: github.com/volcengine/verl. The v0.9.1 tag is not in the stored mirror, so the
scripts are read at the newest stored commits (named per fixture); every key below is
checked against verl 0.9.1's ``_generated_ppo_trainer.yaml`` by the loader itself (a key
it lacks would be an error). Shell variables are substituted by hand from the same
script (the line that sets them is named); keys that do not reach one optimizer step of
the policy (paths, model, rollout engine, memory, logging, reward manager) are left out.

Each fixture: ``(source file @ commit, [(line, "key=value"), ...])``.
"""

MAIN = "b178a3cd56f58b2d502255daba591e92833930a7"  # verl main, 2026-01-29 (0.8.0.dev)
DAPO = "e2e729f438668f6fcacfd95e1b2912037552f8f7"  # last stored commit with recipe/dapo/ in the verl repo

GRPO_QWEN2_7B = (f"examples/grpo_trainer/run_qwen2-7b.sh @ {MAIN}", [
    (5, "algorithm.adv_estimator=grpo"),
    (8, "data.train_batch_size=1024"),
    (16, "actor_rollout_ref.actor.ppo_mini_batch_size=256"),
    (17, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=40"),
    (18, "actor_rollout_ref.actor.use_kl_loss=True"),
    (19, "actor_rollout_ref.actor.kl_loss_coef=0.001"),
    (20, "actor_rollout_ref.actor.kl_loss_type=low_var_kl"),
    (21, "actor_rollout_ref.actor.entropy_coeff=0"),
    (29, "actor_rollout_ref.rollout.n=5"),
    (32, "algorithm.use_kl_in_reward=False"),
    (37, "trainer.n_gpus_per_node=8"),
    (38, "trainer.nnodes=1"),
])

GRPO_DEEPSEEK_SEQ_BALANCE = (f"examples/grpo_trainer/run_deepseek7b_llm_seq_balance.sh @ {MAIN}", [
    (4, "algorithm.adv_estimator=grpo"),
    (7, "data.train_batch_size=1024"),
    (15, "actor_rollout_ref.actor.ppo_mini_batch_size=256"),
    (16, "actor_rollout_ref.actor.use_dynamic_bsz=True"),
    (17, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24000"),
    (18, "actor_rollout_ref.actor.use_kl_loss=True"),
    (19, "actor_rollout_ref.actor.kl_loss_coef=0.001"),
    (20, "actor_rollout_ref.actor.kl_loss_type=low_var_kl"),
    (21, "actor_rollout_ref.actor.entropy_coeff=0"),
    (28, "actor_rollout_ref.rollout.n=5"),
    (30, "algorithm.use_kl_in_reward=False"),
    (35, "trainer.n_gpus_per_node=8"),
    (36, "trainer.nnodes=1"),
])

# Shell variables: lines 44-77 and 98-99 of the script; NNODES comes from SLURM (line 31): 1 here.
GSPO_3B_MATH = (f"examples/gspo_trainer/test_gspo_3b_math.sh @ {MAIN}", [
    (120, "algorithm.adv_estimator=grpo"),
    (121, "actor_rollout_ref.actor.policy_loss.loss_mode=gspo"),
    (129, "data.train_batch_size=512"),
    (132, "actor_rollout_ref.rollout.n=16"),
    (133, "algorithm.use_kl_in_reward=false"),
    (134, "algorithm.kl_ctrl.kl_coef=0.0"),
    (135, "actor_rollout_ref.actor.use_kl_loss=false"),
    (136, "actor_rollout_ref.actor.kl_loss_coef=0.0"),
    (137, "actor_rollout_ref.actor.clip_ratio_low=0.0003"),
    (138, "actor_rollout_ref.actor.clip_ratio_high=0.0004"),
    (140, "actor_rollout_ref.actor.use_dynamic_bsz=true"),
    (153, "actor_rollout_ref.actor.ppo_mini_batch_size=128"),
    (154, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"),
    (157, "actor_rollout_ref.actor.entropy_coeff=0"),
    (159, "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"),
    (160, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1"),
    (185, "trainer.n_gpus_per_node=8"),
    (186, "trainer.nnodes=1"),
])

# Shell variables: lines 7-31, 37 (NNODES defaults to 16) and 52-53 of the script. It runs
# recipe.dapo.main_dapo, whose config is verl's ppo_trainer plus the recipe's own keys; the
# keys below are all verl 0.9.1's. Its reward keys (reward_model.overlong_buffer.*, lines
# 119-121: DAPO's overlong shaping) belong to the reward function, an input of a loss check.
DAPO_QWEN25_32B = (f"recipe/dapo/run_dapo_qwen2.5_32b.sh @ {DAPO}", [
    (69, "data.gen_batch_size=1536"),
    (70, "data.train_batch_size=512"),
    (71, "actor_rollout_ref.rollout.n=16"),
    (72, "algorithm.adv_estimator=grpo"),
    (73, "algorithm.use_kl_in_reward=False"),
    (74, "algorithm.kl_ctrl.kl_coef=0.0"),
    (75, "actor_rollout_ref.actor.use_kl_loss=False"),
    (76, "actor_rollout_ref.actor.kl_loss_coef=0.0"),
    (77, "actor_rollout_ref.actor.clip_ratio_low=0.2"),
    (78, "actor_rollout_ref.actor.clip_ratio_high=0.28"),
    (79, "actor_rollout_ref.actor.clip_ratio_c=10.0"),
    (80, "algorithm.filter_groups.enable=True"),
    (81, "algorithm.filter_groups.max_num_gen_batches=10"),
    (82, "algorithm.filter_groups.metric=acc"),
    (84, "actor_rollout_ref.actor.use_dynamic_bsz=True"),
    (95, "actor_rollout_ref.actor.ppo_mini_batch_size=32"),
    (98, "actor_rollout_ref.actor.entropy_coeff=0"),
    (100, "actor_rollout_ref.actor.loss_agg_mode=token-mean"),
    (101, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=8"),
    (125, "trainer.n_gpus_per_node=8"),
    (126, "trainer.nnodes=16"),
])


def overrides(fixture) -> list[str]:
    return [item for _, item in fixture[1]]
