"""TRL's private contact points, all of them, in this one module (trl==1.16.0).

TRL has no public hook for what exchange's integration needs (each row's reward and
group, the log-probs of the loss's own forward pass, whole-group micro-batches, TRL's
own advantage and loss code on given tokens, TRL's fused LM head), so it touches private
``GRPOTrainer`` methods and attributes. Every such touch is a function here; the rest of
the package (``trainer.py``, ``callback.py``, ``loss.py``, the lab) calls these functions
and never names a private TRL attribute nor patches a method itself.
``tests/libraries/trl/test_contact.py`` enforces it: an ``ast`` walk of every module of
the package fails on a private TRL name (or ``types.MethodType``) used outside this file,
and the lists below are checked against the installed TRL.

A TRL upgrade that renames a contact, or changes its parameters, makes
:func:`require_contacts` raise at construction of ``ExchangeGRPOTrainer`` /
``ExchangeCallback`` naming each broken contact, instead of failing somewhere inside a
training step.
"""

from __future__ import annotations

import inspect
from collections import defaultdict, deque
from collections.abc import Callable
from types import SimpleNamespace

import torch

from exchange.libraries.trl.memo import ScoreMemo, arithmetic, exact
from exchange.libraries.trl.model_hooks import force_first_token  # noqa: F401 (re-exported)
from exchange.libraries.versions import LibraryError

__all__ = [
    "ATTRIBUTES",
    "METHODS",
    "MODULE_FUNCTIONS",
    "applied_entropy_coef",
    "broken_contacts",
    "force_first_token",
    "group_batching",
    "hook_loss",
    "hook_scoring",
    "log_metric",
    "micro_step",
    "pad_token_id",
    "replace_forward",
    "require_contacts",
    "score",
    "score_config",
    "shell",
    "shell_loss",
]

# Private methods, with the leading parameters the integration relies on.
METHODS: dict[str, tuple[str, ...]] = {
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_compute_loss": ("self", "model", "inputs"),
    "_generate": ("self", "prompts"),
    "_generate_and_score_completions": ("self", "inputs"),
    "_get_per_token_logps_and_entropies": ("self", "model", "input_ids", "attention_mask", "logits_to_keep"),
    "_prepare_inputs": ("self", "generation_batch"),
}
# Private attributes GRPOTrainer sets (read or replaced on the trainer or the shell).
ATTRIBUTES: tuple[str, ...] = (
    "_buffered_inputs", "_step", "_metrics", "_tokenizer", "_logs", "_pending_extra_logs", "_pending_metrics",
    "_entropy_bonus_enabled", "_last_world_entropy",
)
# Functions of trl.trainer.grpo_trainer the whole-group split reuses.
MODULE_FUNCTIONS: tuple[str, ...] = ("split_pixel_values_by_grid", "split_tensor_dict", "unsplit_pixel_values_by_grid")


def broken_contacts() -> list[str]:
    """One line per contact point the installed TRL no longer has as listed (empty: all fine)."""
    from trl import GRPOTrainer
    from trl.trainer import grpo_trainer

    out = []
    for name, params in METHODS.items():
        method = getattr(GRPOTrainer, name, None)
        if method is None:
            out.append(f"GRPOTrainer.{name} is gone")
            continue
        got = tuple(inspect.signature(method).parameters)[: len(params)]
        if got != params:
            out.append(f"GRPOTrainer.{name} takes {got}, not {params}")
    source = inspect.getsource(GRPOTrainer)
    out += [f"GRPOTrainer no longer sets self.{name}" for name in ATTRIBUTES if f"self.{name}" not in source]
    out += [f"trl.trainer.grpo_trainer.{name} is gone" for name in MODULE_FUNCTIONS if not hasattr(grpo_trainer, name)]
    return out


def require_contacts() -> None:
    """Raise :class:`LibraryError` naming every broken contact point."""
    broken = broken_contacts()
    if broken:
        raise LibraryError(
            "the installed trl does not have the private GRPOTrainer methods exchange's integration uses "
            f"(pinned trl==1.16.0): {'; '.join(broken)}. Install trl==1.16.0."
        )


# ------------------------------------------------------------- a live trainer
def hook_scoring(trainer, on_rewards: Callable, on_output: Callable) -> None:
    """Wrap, on ``trainer`` (the instance, not the class), the reward scoring and the
    generation output: ``on_rewards(rewards_per_func [B, n_funcs] gathered,
    completion_ids_list)`` sees each scoring, ``on_output(output) -> output`` each
    generation batch ``_generate_and_score_completions`` returns."""
    calc, gen = trainer._calculate_rewards, trainer._generate_and_score_completions

    def _calculate_rewards(inputs, prompts, completions, completion_ids_list):
        out = calc(inputs, prompts, completions, completion_ids_list)
        on_rewards(out, completion_ids_list)
        return out

    def _generate_and_score_completions(inputs):
        return on_output(gen(inputs))

    trainer._calculate_rewards = _calculate_rewards
    trainer._generate_and_score_completions = _generate_and_score_completions


def hook_loss(trainer, on_loss: Callable) -> None:
    """Wrap ``trainer``'s loss (instance attribute): TRL's ``_compute_loss`` runs as
    always (its forward pass, its metrics), and ``on_loss(model, inputs, loss, logps,
    entropies, entropy_coef) -> loss`` receives its loss, the log-probs ``[B, T]`` /
    entropies of that forward pass (``None`` when TRL skipped it) and the entropy
    coefficient TRL applied (:func:`applied_entropy_coef`, read before TRL's adaptive
    controller moves it), and returns the loss to train with."""
    logps_fn, compute = trainer._get_per_token_logps_and_entropies, trainer._compute_loss
    active: list[list] = []

    def _get_per_token_logps_and_entropies(*a, **k):
        out = logps_fn(*a, **k)
        if active:
            active[-1].append(out)
        return out

    def _compute_loss(model, inputs):
        entropy_coef = applied_entropy_coef(trainer)
        active.append([])
        try:
            loss = compute(model, inputs)
        finally:
            captured = active.pop()
        logps, entropies = (captured[-1][0], captured[-1][1]) if captured else (None, None)
        return on_loss(model, inputs, loss, logps, entropies, entropy_coef)

    trainer._get_per_token_logps_and_entropies = _get_per_token_logps_and_entropies
    trainer._compute_loss = _compute_loss


def group_batching(trainer, shuffle: Callable[[dict], dict]) -> None:
    """Replace ``trainer``'s ``_prepare_inputs`` (instance attribute) by TRL's own, with
    ``shuffle(generation_batch) -> generation_batch`` in place of TRL's row shuffle
    (``shuffle_sequence_dict``): the split into ``steps_per_generation`` micro-batches,
    their buffering and the regeneration every ``steps_per_generation * num_iterations``
    steps are TRL 1.16's lines."""
    from trl.trainer import grpo_trainer as G

    original = trainer._prepare_inputs

    def _prepare_inputs(generation_batch):
        if not trainer.model.training:
            return original(generation_batch)
        generate_every = trainer.args.steps_per_generation * trainer.num_iterations
        if trainer._step % generate_every == 0 or trainer._buffered_inputs is None:
            batch = trainer._generate_and_score_completions(generation_batch)
            batch = G.split_pixel_values_by_grid(batch)
            batch = shuffle(batch)
            batches = G.split_tensor_dict(batch, trainer.args.steps_per_generation)
            trainer._buffered_inputs = [G.unsplit_pixel_values_by_grid(b) for b in batches]
        return trainer._buffered_inputs[trainer._step % trainer.args.steps_per_generation]

    trainer._prepare_inputs = _prepare_inputs


def log_metric(trainer, mode: str, key: str, value: float) -> None:
    """Append ``value`` to TRL's metrics of ``mode`` (logged and averaged by TRL's ``log``)."""
    trainer._metrics[mode][key].append(value)


def micro_step(trainer) -> int:
    """TRL's count of micro-batches so far (``GRPOTrainer._step``): it decides when the
    trainer generates anew (every ``steps_per_generation`` of them)."""
    return int(trainer._step)


def applied_entropy_coef(trainer) -> float:
    """The entropy coefficient TRL's ``_compute_loss`` applies to the next micro-batch
    (0 when its bonus is off; the adaptive controller's gate read before TRL moves it)."""
    if not trainer._entropy_bonus_enabled:
        return 0.0
    if trainer.use_adaptive_entropy and trainer._last_world_entropy > trainer.args.entropy_target:
        return 0.0
    return float(trainer.entropy_coef)


def pad_token_id(trainer):
    """The pad id TRL's truncation test compares the last completion id with."""
    return trainer._tokenizer.pad_token_id


# ----------------------------------------------- a shell: TRL's code without a model
class _Accelerator:
    """One CPU process: every collective is the identity."""

    num_processes = 1
    process_index = 0
    is_main_process = True
    sync_gradients = True
    device = torch.device("cpu")

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x


def shell(config, num_generations: int, eos_id: int, pad_id: int):
    """A ``GRPOTrainer`` without a model (built with ``__new__``): the attributes
    ``__init__`` sets from ``config``, one CPU process, no entropy bonus. ``use_vllm`` and
    the importance-sampling settings are the config's (no vLLM engine: :func:`score`
    hands TRL the sampler's log-probs)."""
    from trl import GRPOTrainer

    t = GRPOTrainer.__new__(GRPOTrainer)
    a = config
    t.args = a
    t.state = SimpleNamespace(global_step=0)
    t.accelerator = _Accelerator()
    t.model = SimpleNamespace(training=True, is_gradient_checkpointing=False)
    t._tokenizer = SimpleNamespace(pad_token_id=pad_id)
    t.eos_token_ids = [eos_id]
    t.pad_to_multiple_of = a.pad_to_multiple_of
    t.environment_factories = None
    t.environments = None
    t.tools = None
    t.use_vllm = bool(a.use_vllm)
    t.vllm_importance_sampling_correction = a.vllm_importance_sampling_correction
    t.vllm_importance_sampling_mode = a.vllm_importance_sampling_mode
    t.vllm_importance_sampling_clip_min = a.vllm_importance_sampling_clip_min
    t.vllm_importance_sampling_clip_max = a.vllm_importance_sampling_clip_max
    t.num_generations = num_generations
    t.num_generations_eval = num_generations
    t.num_iterations = a.num_iterations
    t.max_completion_length = a.max_completion_length
    t.loss_type = a.loss_type
    t.multi_objective_aggregation = a.multi_objective_aggregation
    t.scale_rewards = a.scale_rewards
    t.importance_sampling_level = a.importance_sampling_level
    t.off_policy_mask_threshold = a.off_policy_mask_threshold
    t.mask_truncated_completions = a.mask_truncated_completions
    t.top_entropy_quantile = a.top_entropy_quantile
    t.beta = a.beta
    t.epsilon_low = a.epsilon
    t.epsilon_high = a.epsilon_high if a.epsilon_high is not None else a.epsilon
    t.entropy_coef = 0.0
    t.use_adaptive_entropy = False
    t._entropy_bonus_enabled = False
    t.aux_loss_enabled = False
    t.router_aux_loss_coef = 0.0
    t.current_gradient_accumulation_steps = 1
    t.reward_funcs = [None]
    t.reward_func_names = ["exchange"]
    t.reward_weights = torch.ones(1, dtype=torch.float32)
    t.log_multimodal = False
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t._logs = {
        "images": deque(),
        "prompt": deque(),
        "completion": deque(),
        "rewards": defaultdict(deque),
        "advantages": deque(),
        "extra": defaultdict(deque),
    }
    t._pending_extra_logs = defaultdict(list)
    t._pending_metrics = defaultdict(list)
    return t


def score(t, completion_ids: list[list[int]], rewards: torch.Tensor, old_logprobs: torch.Tensor | None = None,
          sampling_logprobs: list[list[float]] | None = None) -> dict:
    """TRL's ``_generate_and_score_completions`` on the shell ``t`` with generation and
    reward scoring replaced: ``completion_ids`` (unpadded) and ``rewards [n, 1]``; with
    vLLM (``t.use_vllm``), ``sampling_logprobs`` (unpadded, as vLLM reports them) and
    the behaviour log-probs ``old_logprobs [n, >= max length]`` that TRL's importance
    sampling ratio compares them with.

    Memoised (:class:`~exchange.libraries.trl.memo.ScoreMemo`): the key holds everything
    the shell's scoring reads (the config by identity, the group size, the EOS and pad ids,
    the completions, rewards, behaviour and sampler log-probs) and the arithmetic it runs
    in, so the same inputs give TRL's same output, computed once (the checker scores one
    rollout many times)."""
    key = _score_key(t.args, t.num_generations, tuple(t.eos_token_ids), pad_token_id(t), completion_ids, rewards,
                     old_logprobs, sampling_logprobs, arithmetic())
    return _memoised(key, t.args, lambda: t, completion_ids, rewards, old_logprobs, sampling_logprobs)


def score_config(config, num_generations: int, eos_id: int, pad_id: int, completion_ids: list[list[int]],
                 rewards: torch.Tensor, old_logprobs: torch.Tensor | None = None,
                 sampling_logprobs: list[list[float]] | None = None, arith: tuple | None = None) -> dict:
    """:func:`score` on ``shell(config, num_generations, eos_id, pad_id)``, the shell built
    only when the memo misses (the same key: a hit needs no shell). ``arith`` is
    :func:`~exchange.libraries.trl.memo.arithmetic` where the caller has it already (one
    rollout's group sizes are scored in one arithmetic)."""
    key = _score_key(config, num_generations, (eos_id,), pad_id, completion_ids, rewards, old_logprobs,
                     sampling_logprobs, arithmetic() if arith is None else arith)
    return _memoised(key, config, lambda: shell(config, num_generations, eos_id, pad_id), completion_ids, rewards,
                     old_logprobs, sampling_logprobs)


def _score_key(config, num_generations, eos_ids, pad_id, completion_ids, rewards, old_logprobs, sampling_logprobs,
               arith) -> tuple:
    return (id(config), num_generations, eos_ids, pad_id, tuple(map(tuple, completion_ids)), exact(rewards),
            exact(old_logprobs), None if sampling_logprobs is None else tuple(map(tuple, sampling_logprobs)), arith)


def _memoised(key, config, make_shell, completion_ids, rewards, old_logprobs, sampling_logprobs) -> dict:
    found = _SCORES.get(key, config)
    if found is None:
        found = _SCORES.put(key, config, _score(make_shell(), completion_ids, rewards, old_logprobs, sampling_logprobs))
    return dict(found)  # a new dict: a caller may add keys; the tensors are only read


_SCORES = ScoreMemo(4096)


def _score(t, completion_ids, rewards, old_logprobs, sampling_logprobs) -> dict:
    t.beta = 0.0  # scoring would run the reference model; the advantages do not depend on it

    def generate(prompts):
        prompt_ids = [[0]] * len(prompts)
        texts = [""] * len(prompts)
        return prompt_ids, completion_ids, None, texts, sampling_logprobs, {}, None, None

    def old_logps(model, input_ids, attention_mask, logits_to_keep, *a, **k):
        # TRL computes old log-probs here (steps_per_generation > 1, or vLLM's importance
        # sampling, which reads them); the loss is handed the caller's own
        if old_logprobs is None:
            return torch.zeros(input_ids.shape[0], logits_to_keep), None, None
        return old_logprobs[:, :logits_to_keep], None, None

    t._generate = generate
    t._calculate_rewards = lambda inputs, prompts, completions, ids: rewards
    t._get_per_token_logps_and_entropies = old_logps
    names, t.reward_func_names = t.reward_func_names, _ScoredNames(t.reward_func_names)
    try:
        return t._generate_and_score_completions([{"prompt": ""} for _ in range(len(completion_ids))])
    except _Final as final:
        return _scored_at(final)
    finally:
        t.reward_func_names = names


# The scoring outputs the loss shell reads (``exchange.libraries.trl.loss``), with TRL's
# output keys: the completion mask (after mask_truncated_completions), the advantages,
# and with vLLM the importance-sampling ratio and the sampler's log-probs.
SCORED_KEYS = {"completion_mask": "completion_mask", "advantages": "advantages",
               "importance_sampling_ratio": "vllm_importance_sampling_ratio",
               "sampling_per_token_logps": "sampling_per_token_logps"}


class _Final(Exception):
    """TRL's code reached its metric bookkeeping: what the shell reads is final."""


class _ScoredNames(list):
    """The shell's ``reward_func_names`` while it scores: ``_generate_and_score_completions``
    iterates them first in its metrics and logs (``rewards/<name>/mean``, after
    ``advantages`` and ``completion_mask`` are final; nothing before reads them, the
    rewards come from the replaced ``_calculate_rewards``), so iterating ends the call
    (:func:`_score`): the rest only logs (two ``nanstd``, the reward means, the vLLM
    sampling statistics; about a quarter of scoring's tensor ops)."""

    def __iter__(self):
        raise _Final


def _scored_at(final: _Final) -> dict:
    """:data:`SCORED_KEYS` from the locals of the ``_generate_and_score_completions`` frame
    ``final`` was raised through (a vLLM key only where TRL built it, as TRL's output)."""
    from trl import GRPOTrainer

    found = _locals_at(final, GRPOTrainer._generate_and_score_completions)
    return {key: found[name] for key, name in SCORED_KEYS.items() if found.get(name) is not None}


def _locals_at(final: Exception, function) -> dict:
    """The locals of ``function``'s frame in ``final``'s traceback (the traceback is then
    dropped: its frames hold the batch's tensors)."""
    code, tb = getattr(function, "__wrapped__", function).__code__, final.__traceback__
    try:
        while tb is not None:
            if tb.tb_frame.f_code is code:
                return dict(tb.tb_frame.f_locals)
            tb = tb.tb_next
    finally:
        del tb
        final.__traceback__ = None
    raise AssertionError(f"the shell's early exit was raised outside {function.__qualname__}")  # pragma: no cover


class _LossAccelerator(_Accelerator):
    """The shell's accelerator while ``_compute_loss`` runs: TRL calls ``reduce`` there only
    in ``global_masked_mean`` (its logged means, after ``loss`` is final) and in the adaptive
    entropy controller (off in the shell: :func:`shell` disables the entropy bonus), so
    ``reduce`` ends the call (:func:`shell_loss`)."""

    def reduce(self, x, reduction="sum"):
        raise _Final


_LOSS_ACCELERATOR = _LossAccelerator()


def shell_loss(t, inputs: dict, logprobs, entropy, accumulation: int):
    """TRL's ``_compute_loss`` on the shell ``t`` for one micro-batch ``inputs``, whose
    forward pass returns ``logprobs`` / ``entropy`` ``[n, T]``, with
    ``current_gradient_accumulation_steps = accumulation``.

    TRL's metric bookkeeping after the loss (``kl``, ``entropy``, ``clip_ratio/*``: about
    90 tensor ops of a call's 120 in trl 1.16.0, each one dispatched through the checker's twins) is
    skipped: the call ends at its first ``accelerator.reduce`` (:class:`_LossAccelerator`),
    and the result is TRL's local ``loss`` there, the value ``_compute_loss`` returns (in
    trl 1.16.0 nothing assigns ``loss`` after ``def global_masked_mean``; with the entropy
    bonus on, the adaptive controller also calls ``reduce``, so TRL then runs to its end).
    ``tests/libraries/trl/test_contact.py`` checks both on TRL's source and the value
    against the full call."""
    t.current_gradient_accumulation_steps = accumulation
    t._get_per_token_logps_and_entropies = lambda *a, **kw: (logprobs, entropy, None)
    if t._entropy_bonus_enabled:
        return t._compute_loss(None, inputs)
    accelerator, t.accelerator = t.accelerator, _LOSS_ACCELERATOR
    try:
        return t._compute_loss(None, inputs)
    except _Final as final:
        from trl import GRPOTrainer

        return _locals_at(final, GRPOTrainer._compute_loss)["loss"]
    finally:
        t.accelerator = accelerator


# ------------------------------------------------------------ a model's forward
def replace_forward(hf_model, forward: Callable) -> None:
    """Bind ``forward(self, *args, **kwargs)`` as ``hf_model.forward`` (this instance):
    how a model answers TRL 1.16's fused LM-head call (``model(..., labels=,
    fused_lm_head=True)``), which TRL makes for every training and reference log-prob."""
    import types

    hf_model.forward = types.MethodType(forward, hf_model)
