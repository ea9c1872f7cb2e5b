"""A Hugging Face model's ``generate`` wrapped for TRL's sampling (trl==1.16.0).

No private TRL name and no ``MethodType`` here (those are
:mod:`exchange.libraries.trl.contact`'s, which re-exports :func:`force_first_token`).
"""

from __future__ import annotations

import torch

from exchange.libraries.versions import LibraryError

__all__ = ["force_first_token"]


def force_first_token(hf_model, token_id: int) -> None:
    """Wrap ``hf_model.generate`` (this instance) so that the first generated token of
    every row is ``token_id`` (issue 42: a teacher-forced shared prefix under TRL).

    TRL 1.16 samples with ``unwrapped_model.generate(**inputs, generation_config=...)``
    and builds a ``GenerationConfig`` from ``generation_kwargs``, which takes no logits
    processor; the forcing is therefore a ``logits_processor`` added at the model's own
    ``generate`` call. Only sampling is forced: TRL's loss recomputes the log-probs by a
    forward pass, so it sees the policy's own ``log p(token_id)`` at that position. The
    first generated position is the (left-padded) prompt width, the same for every row.
    vLLM does not call this method (``run_llm`` refuses ``use_vllm`` for the synthetic
    task)."""
    from transformers import LogitsProcessor, LogitsProcessorList

    original = hf_model.generate

    class _ForceFirst(LogitsProcessor):
        def __init__(self, start: int) -> None:
            self.start = start

        def __call__(self, input_ids, scores):
            if input_ids.shape[1] != self.start:
                return scores
            forced = torch.full_like(scores, float("-inf"))
            forced[:, token_id] = 0.0
            return forced

    def generate(*args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise LibraryError("force_first_token: generate was called without input_ids; the forcing needs the "
                               "prompt width.")
        procs = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        procs.append(_ForceFirst(int(ids.shape[1])))
        return original(*args, logits_processor=procs, **kwargs)

    hf_model.generate = generate
    hf_model._exchange_forced_first = int(token_id)
