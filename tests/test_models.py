"""exchange.models: TinyLM, the HF adapter and log-prob recomputation."""

import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.models import (
    TinyLM,
    TinyLMConfig,
    model_logits,
    output_head,
    prefix_logits,
    response_entropy,
    response_logprobs,
    sequence_logits,
    tiny_hf_model,
)
from exchange.core.rollout import Rollout


def _rollout(prompt=((1, 2), (0, 3)), tokens=((4, 5, 6), (4, 7, 0)), lengths=(3, 2)):
    tokens = torch.tensor(tokens)
    mask = torch.arange(tokens.shape[1])[None] < torch.tensor(lengths)[:, None]
    prompt_tokens = torch.tensor(prompt)
    return Rollout(
        tokens=tokens, mask=mask, rewards=torch.tensor([1.0, 0.0]), group=torch.tensor([0, 0]),
        old_logprobs=torch.zeros(tokens.shape, dtype=torch.float64),
        prompt_tokens=prompt_tokens, prompt_mask=torch.tensor([[True, True], [False, True]]),
    )


def test_tinylm_is_causal_and_deterministic():
    a, b = TinyLM(TinyLMConfig(seed=3)), TinyLM(TinyLMConfig(seed=3))
    ids = torch.tensor([[1, 2, 3, 4], [1, 2, 7, 0]])
    la, lb = a(ids), b(ids)
    assert la.shape == (2, 4, 8) and torch.equal(la, lb)
    assert torch.allclose(la[0, :2], la[1, :2], atol=1e-6)  # same prefix, same logits
    assert not torch.allclose(la[0, 2:], la[1, 2:])


def test_response_logprobs_match_a_manual_softmax():
    model = TinyLM(TinyLMConfig(seed=1)).double()
    r = _rollout()
    with torch.no_grad():
        lp = response_logprobs(model, r)
        ids = torch.cat([r.prompt_tokens, r.tokens], 1)
        logp = torch.log_softmax(model(ids), -1)
    for i, L in enumerate(r.lengths.tolist()):
        for t in range(L):
            assert lp[i, t] == pytest.approx(float(logp[i, 1 + t, r.tokens[i, t]]), abs=1e-14)
    assert lp[1, 2] == 0  # padding
    ent = response_entropy(model, r).detach()
    assert (ent[r.mask] > 0).all() and ent[1, 2] == 0


def test_params_override_uses_functional_call():
    model = TinyLM(TinyLMConfig(seed=1)).double()
    r = _rollout()
    zero_head = {"head.weight": torch.zeros_like(model.head.weight)}
    uniform = response_logprobs(model, r, params=zero_head)
    assert torch.allclose(uniform[r.mask], torch.full((5,), -torch.log(torch.tensor(8.0)), dtype=torch.float64))
    assert model.head.weight.abs().sum() > 0  # the module itself is untouched
    assert torch.equal(model_logits(model, torch.tensor([[1, 2]]), params={}), model(torch.tensor([[1, 2]])))


def test_errors():
    model = TinyLM(TinyLMConfig())
    with pytest.raises(InvalidArgument, match="n_positions"):
        model(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(InvalidArgument, match="vocab_size"):
        model(torch.tensor([[9]]))
    with pytest.raises(InvalidArgument, match="d_model=30"):
        TinyLMConfig(d_model=30, n_heads=4)
    with pytest.raises(InvalidArgument, match="prompt_tokens is None"):
        response_logprobs(model, _rollout().replace(prompt_tokens=None, prompt_mask=None))
    empty = _rollout().replace(prompt_tokens=torch.zeros(2, 0, dtype=torch.long), prompt_mask=torch.zeros(2, 0, dtype=torch.bool))
    with pytest.raises(InvalidArgument, match="P=0"):
        sequence_logits(model, empty)
    assert output_head(model) is model.head
    with pytest.raises(InvalidArgument, match="no nn.Linear output head"):
        output_head(torch.nn.Sequential())


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_tiny_hf_model(arch):
    pytest.importorskip("transformers")
    model = tiny_hf_model(arch, vocab_size=32, hidden_size=16, seed=0)
    again = tiny_hf_model(arch, vocab_size=32, hidden_size=16, seed=0)
    r = _rollout()
    lp = response_logprobs(model, r)
    assert lp.dtype == torch.float64 and (lp[r.mask] < 0).all()
    assert torch.equal(lp, response_logprobs(again, r))  # seeded, no download
    assert output_head(model) is model.get_output_embeddings()
    assert model.config._attn_implementation == "eager"


def test_tiny_hf_model_bad_arch():
    pytest.importorskip("transformers")
    with pytest.raises(InvalidArgument, match="arch='gpt9'"):
        tiny_hf_model("gpt9")


@pytest.mark.parametrize("t_end", [1, 2, 3])
def test_prefix_logits_equal_the_full_pass(t_end):
    """Causality: cutting the batch after response position t_end - 1 changes nothing."""
    model = TinyLM(TinyLMConfig(seed=2)).double()
    r = _rollout()
    full = sequence_logits(model, r)[0]
    rows = torch.tensor([1])
    cut = prefix_logits(model, r, rows, t_end)
    assert cut.shape == (1, t_end, 8)
    assert torch.allclose(cut, full[rows, :t_end], rtol=0, atol=1e-13)
    with pytest.raises(InvalidArgument, match="t_end=4"):
        prefix_logits(model, r, rows, 4)
