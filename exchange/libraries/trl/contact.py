"""TRL's private contact points: every private ``GRPOTrainer`` method, attribute and
module function that exchange's TRL integration (``trainer.py``, ``callback.py``,
``loss.py``) touches, in one list, checked against the installed TRL (trl==1.16.0).

TRL has no public hook for what the integration needs (each row's reward and group, the
log-probs of the loss's own forward pass, whole-group micro-batches, TRL's own
advantage code on given tokens), so it overrides or wraps private methods. A TRL upgrade
that renames one, or changes its parameters, makes :func:`require_contacts` raise at
construction of ``ExchangeGRPOTrainer`` / ``ExchangeCallback`` naming each broken
contact, instead of failing somewhere inside a training step.
``tests/libraries/trl/test_contact.py`` checks the list against the installed TRL and
against the integration's source (an ``ast`` walk: a private ``GRPOTrainer`` name used
there but missing here fails the test).
"""

from __future__ import annotations

import inspect

from exchange.libraries.versions import LibraryError

__all__ = ["ATTRIBUTES", "METHODS", "MODULE_FUNCTIONS", "broken_contacts", "require_contacts"]

# Private methods, with the leading parameters the integration relies on.
METHODS: dict[str, tuple[str, ...]] = {
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_compute_loss": ("self", "model", "inputs"),
    "_generate": ("self", "prompts"),
    "_generate_and_score_completions": ("self", "inputs"),
    "_get_per_token_logps_and_entropies": ("self", "model", "input_ids", "attention_mask", "logits_to_keep"),
    "_prepare_inputs": ("self", "generation_batch"),
}
# Private attributes GRPOTrainer sets (read or replaced on the trainer shell).
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
