"""LLM-scale pieces of the harness: data, verifier, tiny in-code models, adapters.

The same paired arms as the CPU experiments run on a Hugging Face causal LM through
TRL (``experiments/llm/run_llm.py``). This module holds what that script and its CPU
smoke test share, so the tests cover the code that trains:

- ``load_math_jsonl(path)``: a verifiable math set, one ``{"prompt", "answer"}`` per line;
- ``extract_answer`` / ``exact_match_reward``: the exact-match verifier, in TRL's
  reward-function signature (dataset columns arrive as keyword lists);
- ``tiny_causal_lm()``: a random Llama-shaped model and a word-level tokenizer built in
  code (no downloads), for CI smoke tests and the harness-vs-TRL benchmark;
- ``LogitsOnly``: wraps a HF model so the CPU harness (``forward(ids) -> logits``) can
  train it too.

transformers, tokenizers and datasets are imported inside the functions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from exchange.errors import InvalidArgument

__all__ = ["load_math_jsonl", "extract_answer", "exact_match_reward", "tiny_causal_lm", "LogitsOnly",
           "TINY_WORDS"]

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def load_math_jsonl(path: str | Path) -> list[dict[str, str]]:
    """Rows ``{"prompt": str, "answer": str}`` from a JSONL file (other keys are kept)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidArgument(f"data={str(path)!r} is not a file; pass a local JSONL with prompt and answer fields.")
    rows = []
    for k, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InvalidArgument(f"data={str(path)!r} line {k} is not JSON ({err.msg}); one object per line.") from None
        for key in ("prompt", "answer"):
            if not isinstance(row.get(key), str) or not row[key]:
                raise InvalidArgument(
                    f"data={str(path)!r} line {k}: {key}={row.get(key)!r}; every line needs non-empty "
                    "string fields prompt and answer."
                )
        rows.append(row)
    if not rows:
        raise InvalidArgument(f"data={str(path)!r} has no rows.")
    return rows


def extract_answer(text: str) -> str | None:
    """The final answer of a completion: the last ``\\boxed{...}``, else the last number."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].strip().replace(" ", "")
    numbers = _NUMBER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else None


def _normalise(ans: str) -> str:
    ans = ans.strip().replace(" ", "").replace(",", "")
    if re.fullmatch(r"-?\d+\.0+", ans):
        ans = ans.split(".")[0]
    return ans


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return " ".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


def exact_match_reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """1.0 when the extracted final answer equals the reference exactly (after
    whitespace/comma normalisation), else 0.0. TRL signature: ``reward(completions=...,
    answer=[...], prompts=..., ...)``; the ``answer`` column comes from the dataset."""
    if len(completions) != len(answer):
        raise InvalidArgument(f"completions={len(completions)} and answer={len(answer)} differ in length.")
    out = []
    for comp, ref in zip(completions, answer):
        got = extract_answer(_text(comp))
        out.append(float(got is not None and _normalise(got) == _normalise(str(ref))))
    return out


TINY_WORDS = ("<pad>", "<eos>", "<unk>", "what", "is", "plus", "?", "the", "answer", "=", *map(str, range(20)))


def tiny_causal_lm(seed: int = 0, hidden: int = 32, layers: int = 2):
    """``(model, tokenizer)``: a random ``LlamaForCausalLM`` and a whitespace word-level
    ``PreTrainedTokenizerFast`` over ``TINY_WORDS``, built in code (no downloads)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(TINY_WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<unk>")
    tokenizer.padding_side = "left"
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=64, pad_token_id=vocab["<pad>"], eos_token_id=vocab["<eos>"],
                      bos_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = vocab["<pad>"]
    model.generation_config.eos_token_id = vocab["<eos>"]
    return model, tokenizer


class LogitsOnly(nn.Module):
    """``forward(ids [B, S]) -> logits [B, S, V]`` for a HF causal LM (the harness's
    model interface)."""

    def __init__(self, hf_model: nn.Module) -> None:
        super().__init__()
        self.hf = hf_model

    def forward(self, ids: Tensor) -> Tensor:
        return self.hf(input_ids=ids).logits
