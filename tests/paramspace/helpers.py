"""Helpers shared by the paramspace tests (a uniquely named module, not ``conftest``,
so that ``import`` never picks another folder's conftest)."""

import torch

from exchange.models import TinyLM, TinyLMConfig
from exchange.paramspace import sample_rollout

PROMPTS = [[1, 2], [3]]
PREFIX = [5, 6]  # a forced answer template: its events are shared by every response


def tiny_lm(seed: int = 1) -> TinyLM:
    torch.set_num_threads(1)
    return TinyLM(TinyLMConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1, seed=seed)).double()


def rollout_for(model, seed: int = 0, G: int = 4, prompts=PROMPTS, **kw):
    kw.setdefault("response_prefix", PREFIX)
    return sample_rollout(model, prompts, G=G, min_new_tokens=1, max_new_tokens=6, seed=seed, **kw)
