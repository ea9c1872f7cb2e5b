"""A tiny causal language model for tests, the exact-credit oracle and the harness.

nanoGPT-shaped (token + position embeddings, pre-norm blocks, tied-free LM head) and
written with explicit math attention, so ``torch.func`` (``vmap``, ``grad``, ``jvp``)
works on CPU: the fused SDPA kernels have no forward-mode AD rule.

``response_logprobs(model, rollout)`` recomputes ``l[i, t]`` for a rollout that
carries its prompts. Every model-facing function also accepts Hugging Face
``AutoModelForCausalLM`` models (optional ``hf`` extra; ``tiny_hf_model`` builds a
random one from a config in code, no download) and a ``params`` mapping, evaluated with
``torch.func.functional_call`` so that ``torch.func`` transforms see the parameters as
inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch
from torch import Tensor, nn

from exchange.errors import InvalidArgument
from exchange.core.distribution import DISTRIBUTION
from exchange.core.rollout import Rollout

__all__ = [
    "TinyLMConfig",
    "TinyLM",
    "HF_ARCHS",
    "tiny_hf_model",
    "model_logits",
    "output_head",
    "sequence_logits",
    "prefix_logits",
    "response_logprobs",
    "response_entropy",
]

HF_ARCHS = ("llama", "qwen2")


@dataclass(frozen=True)
class TinyLMConfig:
    vocab_size: int = 8
    """Number of token ids (0 .. vocab_size-1)."""
    n_positions: int = 64
    """Longest prompt + response the model can read."""
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    seed: int = 0
    """Initialisation seed (the model is deterministic given its config)."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_positions", "d_model", "n_heads", "n_layers"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"TinyLMConfig.{name}={getattr(self, name)} must be >= 1.")
        if self.d_model % self.n_heads:
            raise InvalidArgument(
                f"TinyLMConfig.d_model={self.d_model} is not divisible by n_heads={self.n_heads}."
            )


class _Block(nn.Module):
    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model)
        )

    def forward(self, x: Tensor, causal: Tensor) -> Tensor:
        b, s, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, s, h, d // h).transpose(1, 2) for z in (q, k, v))  # (B, nh, S, hs)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)  # (B, nh, S, S)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)  # math attention
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """``forward(ids: LongTensor[B, S]) -> logits: Tensor[B, S, V]`` (causal)."""

    def __init__(self, cfg: TinyLMConfig = TinyLMConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(cfg.seed)
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.n_positions, cfg.d_model)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)  # output embedding rows
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() >= 2:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02 * math.sqrt(32 / cfg.d_model))
                else:
                    p.zero_()  # biases; LayerNorm weights are reset to 1 below
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.fill_(1.0)
                    m.bias.zero_()

    def forward(self, ids: Tensor) -> Tensor:
        b, s = ids.shape
        if s > self.cfg.n_positions:
            raise InvalidArgument(
                f"sequence length {s} exceeds TinyLMConfig.n_positions={self.cfg.n_positions}; "
                "raise n_positions."
            )
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.cfg.vocab_size):
            raise InvalidArgument(
                f"token ids span [{int(ids.min())}, {int(ids.max())}] outside the vocabulary "
                f"0..{self.cfg.vocab_size - 1}; raise TinyLMConfig.vocab_size."
            )
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        x = self.tok(ids) + self.pos(torch.arange(s))[None]
        for block in self.blocks:
            x = block(x, causal)
        return self.head(self.ln_f(x))


def tiny_hf_model(
    arch: str = "llama",
    *,
    vocab_size: int = 32,
    hidden_size: int = 16,
    n_layers: int = 1,
    n_heads: int = 2,
    n_positions: int = 64,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> nn.Module:
    """A randomly initialised Hugging Face causal LM built from a config in code.

    ``arch`` is one of ``HF_ARCHS`` (LlamaConfig / Qwen2Config). Eager attention, untied
    output embeddings (so the head rows are parameters of their own), eval mode.
    Needs the optional ``hf`` extra (``pip install transformers``); nothing is downloaded.
    """
    try:
        import transformers
    except ImportError as err:  # optional extra
        raise InvalidArgument(
            f"tiny_hf_model(arch={arch!r}) needs transformers; install the hf extra "
            f"(pip install '{DISTRIBUTION}[hf]', from a clone pip install -e '.[hf]', or pip install transformers)."
        ) from err
    classes = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    }
    if arch not in classes:
        raise InvalidArgument(f"arch={arch!r} is not one of {HF_ARCHS}.")
    config_cls, model_cls = classes[arch]
    config = config_cls(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        max_position_embeddings=n_positions,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    return model.to(dtype).eval()


def _is_hf(model: nn.Module) -> bool:
    return hasattr(model, "config") and hasattr(model, "get_output_embeddings")


def model_logits(model: nn.Module, ids: Tensor, params: Mapping[str, Tensor] | None = None) -> Tensor:
    """``logits: Tensor[B, S, V]`` of a causal LM on ``ids: LongTensor[B, S]``.

    Works for :class:`TinyLM` (returns a tensor) and Hugging Face causal LMs (returns an
    output object; called with ``use_cache=False``). With ``params`` (a subset of
    ``model.named_parameters()`` names), the model is evaluated at those parameter values
    through ``torch.func.functional_call``; missing names keep the module's own values.
    """
    args, kwargs = ((), {"input_ids": ids, "use_cache": False}) if _is_hf(model) else ((ids,), {})
    if params is None:
        out = model(*args, **kwargs)
    else:
        out = torch.func.functional_call(model, dict(params), args, kwargs)
    return out if isinstance(out, Tensor) else out.logits


def output_head(model: nn.Module) -> nn.Linear:
    """The output-embedding layer (``logits = head(h)``); its weight rows are per token."""
    head = model.get_output_embeddings() if _is_hf(model) else getattr(model, "head", None)
    if not isinstance(head, nn.Linear):
        raise InvalidArgument(
            f"model={type(model).__name__} has no nn.Linear output head (found "
            f"{type(head).__name__}); use TinyLM or a Hugging Face causal LM."
        )
    return head


def sequence_logits(
    model: nn.Module, rollout: Rollout, params: Mapping[str, Tensor] | None = None
) -> tuple[Tensor, Tensor]:
    """Logits predicting each response token: ``([N, T, V], ids [N, P+T])``.

    The prompt (left-padded) and the response (right-padded) are joined. Left padding
    is read as ordinary tokens, which is the same for every occurrence of one
    (prompt, prefix) pair, so identical events still get identical log-probs. Response
    padding must hold valid token ids (it is read, but only after every real token).
    ``params``: see :func:`model_logits`.
    """
    if rollout.prompt_tokens is None:
        raise InvalidArgument(
            "Rollout.prompt_tokens is None: a model needs the prompts to recompute log-probs. "
            "Build the rollout with prompt_tokens and prompt_mask."
        )
    p = rollout.prompt_tokens.shape[1]
    if p == 0:
        raise InvalidArgument(
            "Rollout.prompt_tokens has P=0 columns: the first response token needs a context. "
            "Give every prompt at least one token (a BOS id)."
        )
    ids = torch.cat([rollout.prompt_tokens, rollout.tokens.clamp(min=0)], dim=1)  # [N, P+T]
    logits = model_logits(model, ids, params)  # [N, P+T, V]
    return logits[:, p - 1 : -1], ids  # position p-1 predicts response token 0


def prefix_logits(
    model: nn.Module,
    rollout: Rollout,
    rows: Tensor,
    t_end: int,
    params: Mapping[str, Tensor] | None = None,
) -> Tensor:
    """Logits predicting response tokens ``0 .. t_end-1`` of ``rows``: ``[R, t_end, V]``.

    A causal model reads only the first ``P + t_end - 1`` tokens for them, so the batch is
    cut there: equal to ``sequence_logits(...)[0][rows, :t_end]`` at a fraction of the cost
    when ``t_end`` is small (a shared prefix).
    """
    if rollout.prompt_tokens is None or rollout.prompt_tokens.shape[1] == 0:
        return sequence_logits(model, rollout, params)[0][rows, :t_end]  # raises the precise error
    if not 1 <= t_end <= rollout.tokens.shape[1]:
        raise InvalidArgument(f"t_end={t_end} is outside 1..T={rollout.tokens.shape[1]}.")
    p = rollout.prompt_tokens.shape[1]
    ids = torch.cat([rollout.prompt_tokens[rows], rollout.tokens[rows, : t_end - 1].clamp(min=0)], dim=1)
    return model_logits(model, ids, params)[:, p - 1 :]  # [R, t_end, V]


def response_logprobs(
    model: nn.Module, rollout: Rollout, params: Mapping[str, Tensor] | None = None
) -> Tensor:
    """``l[i, t] = log pi_theta(o_i[t] | x_i, o_i[<t])``: ``Tensor[N, T]``, 0 on padding."""
    logits, _ = sequence_logits(model, rollout, params)
    logp = torch.log_softmax(logits, dim=-1)  # [N, T, V]
    picked = logp.gather(-1, rollout.tokens.clamp(min=0)[..., None]).squeeze(-1)  # [N, T]
    return torch.where(rollout.mask, picked, torch.zeros((), dtype=picked.dtype))


def response_entropy(
    model: nn.Module, rollout: Rollout, params: Mapping[str, Tensor] | None = None
) -> Tensor:
    """``H[i, t] = -sum_y pi(y | x_i, o_i[<t]) log pi(y | ...)``: ``Tensor[N, T]``, 0 on padding."""
    logits, _ = sequence_logits(model, rollout, params)
    logp = torch.log_softmax(logits, dim=-1)  # [N, T, V]
    ent = -(logp.exp() * logp).sum(-1)
    return torch.where(rollout.mask, ent, torch.zeros((), dtype=ent.dtype))
