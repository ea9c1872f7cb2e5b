"""Shared fixtures: tiny float64 models and model-sampled rollouts with a shared prefix."""

import pytest

from exchange.paramspace import sample_rollout
from tests.paramspace.helpers import rollout_for, tiny_lm


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


@pytest.fixture(scope="module")
def rollout(lm):
    return rollout_for(lm)


def _hf(arch):
    pytest.importorskip("transformers")
    from exchange.models import tiny_hf_model

    return tiny_hf_model(arch, vocab_size=32, hidden_size=16, n_layers=1, seed=0)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def hf_lm(request):
    return _hf(request.param)


@pytest.fixture(scope="module")
def hf_rollout(hf_lm):
    return sample_rollout(hf_lm, [[1, 2, 3], [4]], G=3, response_prefix=[7, 8], min_new_tokens=1, max_new_tokens=5, seed=0)
