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
  train it too;
- the synthetic tasks of the CPU harness as text for a HF model: ``task_tokenizer()``
  (one word per task token id, so token ids *are* task ids), ``task_reward(task)`` (the
  task's verifier as a TRL reward), ``constrain_to_grammar(model, task)`` (the task
  grammar inside the model's forward) and ``build_model(name, seed)`` (Llama/Qwen2 of
  ``MODEL_CONFIGS``, 25M-150M parameters or tiny, built in code).

transformers, tokenizers and datasets are imported inside the functions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from exchange.core import metric_keys as mk
from exchange.errors import InvalidArgument
from exchange.lab.tasks import EOS, PAD, STYLE, VOCAB_SIZE, GrammarLM, verify

__all__ = ["load_math_jsonl", "extract_answer", "exact_match_reward", "tiny_causal_lm", "LogitsOnly",
           "TINY_WORDS", "TASK_WORDS", "task_tokenizer", "render", "check_task_tokenizer", "task_reward",
           "constrain_to_grammar", "grammar_fused_head", "MODEL_CONFIGS", "build_model", "text_accuracy"]

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
    model interface). ``ids`` move to the model's device and the logits come back to
    the device of ``ids`` (the harness's tensors live on the CPU)."""

    def __init__(self, hf_model: nn.Module) -> None:
        super().__init__()
        self.hf = hf_model

    def forward(self, ids: Tensor) -> Tensor:
        device = next(self.hf.parameters()).device
        return self.hf(input_ids=ids.to(device)).logits.float().to(ids.device)


def text_accuracy(model, tokenizer, rows: list[dict[str, str]], max_new_tokens: int, batch: int = 32) -> dict[str, float]:
    """``{"eval/accuracy": ...}``: greedy decoding of each row's ``prompt`` scored by
    :func:`exact_match_reward` against its ``answer`` (text mode's held-out evaluation)."""
    import torch

    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = next(model.parameters()).device
    right: list[float] = []
    with torch.no_grad():
        for k in range(0, len(rows), batch):
            chunk = rows[k: k + batch]
            enc = tokenizer([r["prompt"] for r in chunk], return_tensors="pt", padding=True, padding_side="left",
                            add_special_tokens=False).to(device)
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
            texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            right += exact_match_reward(texts, answer=[r["answer"] for r in chunk])
    return {mk.EVAL_ACCURACY: sum(right) / max(1, len(right))}


# ------------------------------------------------ the synthetic tasks as text
TASK_WORDS = ("<pad>", "<eos>", "Q", "=", "A", ":", ".", "~", "+", "-", "*", *map(str, range(7)), "S")
"""One word per token id of ``exchange.lab.tasks`` (``TASK_WORDS[i]`` is id ``i``): a
prompt ``Q 3 + 4 =`` is the task's ``[Q, 3, +, 4, =]`` and the task tokenizer's ids are
the task's ids, so the verifier, the grammar, the roles and the probes read a HF
model's tokens unchanged."""


def task_tokenizer():
    """A whitespace word-level ``PreTrainedTokenizerFast`` over ``TASK_WORDS`` (built in
    code; left padding, ``<pad>``/``<eos>`` are the task's PAD and EOS)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if len(TASK_WORDS) != VOCAB_SIZE or TASK_WORDS[PAD:PAD + 1] != ("<pad>",) or TASK_WORDS[EOS:EOS + 1] != ("<eos>",):
        raise RuntimeError(
            f"exchange.lab.llm.TASK_WORDS (len={len(TASK_WORDS)}, at PAD {TASK_WORDS[PAD:PAD + 1]}, "
            f"at EOS {TASK_WORDS[EOS:EOS + 1]}) "
            f"no longer matches exchange.lab.tasks (VOCAB_SIZE={VOCAB_SIZE}, PAD={PAD}, EOS={EOS}): give TASK_WORDS "
            "one word per task id, '<pad>' at PAD and '<eos>' at EOS"
        )
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(TASK_WORDS)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    tokenizer.padding_side = "left"
    return tokenizer


def render(ids) -> str:
    """Task token ids -> the text the task tokenizer encodes back to them."""
    return " ".join(TASK_WORDS[int(i)] for i in ids)


def check_task_tokenizer(tokenizer, where: str) -> None:
    """Refuse a tokenizer whose ids are not the task's (a local model trained on text)."""
    probe = "Q 3 + 4 = A : S . ~ <eos>"
    want = [TASK_WORDS.index(w) for w in probe.split()]
    got = tokenizer(probe, add_special_tokens=False).input_ids
    if got != want:
        raise InvalidArgument(
            f"model={where!r}: its tokenizer encodes {probe!r} as {got}, not the synthetic task's ids {want}. The "
            "synthetic tasks need the task tokenizer (exchange.lab.llm.task_tokenizer): pass a model saved with it "
            "(e.g. a warm start under OUT/<experiment>/_sft/), or --model_config NAME, or --data JSONL for text."
        )


def task_reward(task, style_bonus: float = 0.0):
    """The task's exact verifier (:func:`exchange.lab.tasks.verify`) as a TRL reward
    function: ``reward(prompts, completions, completion_ids, ...) -> [float]``.
    ``style_bonus``: added for completions that contain S (the pilot's sensitivity runs,
    as the CPU harness's ``[train] style_bonus``)."""
    import torch

    index = {w: i for i, w in enumerate(TASK_WORDS)}

    def synthetic_task_reward(prompts, completions, completion_ids, **_: Any) -> list[float]:
        p = torch.tensor([[index[w] for w in _text(q).split()] for q in prompts])
        width = max(1, max(len(c) for c in completion_ids))
        resp = torch.full((len(completion_ids), width), PAD, dtype=torch.long)
        for i, c in enumerate(completion_ids):
            resp[i, : len(c)] = torch.as_tensor(list(c), dtype=torch.long)
        mask = torch.arange(width)[None] < torch.tensor([len(c) for c in completion_ids])[:, None]
        rewards = verify(task, p, resp, mask)
        if style_bonus:
            rewards = rewards + style_bonus * torch.tensor([float(STYLE in list(c)) for c in completion_ids],
                                                           dtype=rewards.dtype)
        return rewards.tolist()

    return synthetic_task_reward


def _continues_a_cache(ids, kwargs: dict) -> str | None:
    """Why a forward call of a causal LM sees only the tail of its sequence (a KV-cached
    decoding step), or None. Judged from what the call carries, not from one argument
    name: transformers renamed ``past_key_values`` to ``cache`` in 5.24, and a guard
    keyed on the old name let cached steps through unmasked. Any of: ``use_cache=True``
    (the next step would read a cache); any argument holding a filled cache (an object
    with ``get_seq_length() > 0``); a ``cache_position`` that does not start at 0; or
    ``position_ids`` reaching past the ``ids`` given (positions count the whole prefix)."""
    if kwargs.get("use_cache"):
        return "use_cache=True"
    for name, value in kwargs.items():
        seq_len = getattr(value, "get_seq_length", None)
        if callable(seq_len) and seq_len() > 0:
            return f"a filled KV cache in {name}="
    cache_position = kwargs.get("cache_position")
    if cache_position is not None and cache_position.numel() and int(cache_position.min()) > 0:
        return "cache_position > 0"
    positions = kwargs.get("position_ids")
    if positions is not None and positions.numel() and int(positions[..., -1].max()) >= ids.shape[-1]:
        return "position_ids past the input_ids given"
    return None


def constrain_to_grammar(hf_model: nn.Module, task) -> nn.Module:
    """Put the task grammar (:class:`exchange.lab.tasks.GrammarLM`'s caps) inside a HF
    causal LM's forward, as the CPU harness puts it around TinyLM: sampling (TRL's
    ``generate``), TRL's training log-probs and every evaluation then see the same
    capped policy. A forward hook masks ``output.logits`` from the whole ``input_ids``,
    so generation must run without a KV cache (``use_cache=False``; set here on the
    model and by exchange.lab.llm_run in TRL's ``generation_kwargs``): a call that asks
    for a cache or continues one (:func:`_continues_a_cache`) is refused, since its
    ``input_ids`` are one token and the caps could not be counted."""
    if getattr(hf_model, "_exchange_grammar", None) is not None:
        return hf_model
    grammar = GrammarLM(nn.Identity(), task)

    def hook(module, args, kwargs, output):
        if getattr(output, "logits", None) is None:  # TRL's fused head: grammar_fused_head masks inside
            return output
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise InvalidArgument("the grammar-constrained model needs input_ids (inputs_embeds are not supported).")
        why = _continues_a_cache(ids, kwargs)
        if why is not None:
            raise InvalidArgument(
                f"a grammar-constrained model was called with {why}: in KV-cached decoding each step sees one new "
                "token, and the grammar needs the whole prefix. Generate with use_cache=False (GRPOConfig "
                "generation_kwargs).")
        output.logits = grammar.mask_logits(ids, output.logits)
        return output

    object.__setattr__(hf_model, "_exchange_grammar_lm", grammar)  # not a submodule: no state-dict entry
    hf_model._exchange_grammar = hf_model.register_forward_hook(hook, with_kwargs=True)
    hf_model.generation_config.use_cache = False
    hf_model.config.use_cache = False
    return hf_model


def grammar_fused_head(hf_model: nn.Module, temperature: float) -> nn.Module:
    """Make TRL's fused LM head (``model(..., labels=, fused_lm_head=True)``, which TRL
    1.16's GRPOTrainer installs and calls for every training and reference log-prob)
    honour the grammar of :func:`constrain_to_grammar`: that head projects hidden states
    itself and never returns logits, so here the fused call computes the full logits
    (cheap for the task's 19-token vocabulary), masks them, and returns TRL's
    ``FusedCausalLMOutput`` (``log_probs``, ``entropy`` at ``temperature``). Call after
    the trainer is built; other calls go to the forward TRL left."""
    import functools

    import torch
    from trl.trainer.utils import FusedCausalLMOutput

    from exchange.libraries.trl.contact import replace_forward

    grammar = getattr(hf_model, "_exchange_grammar_lm", None)
    if grammar is None:
        return hf_model
    inner = hf_model.forward

    @functools.wraps(type(hf_model).forward)
    def forward(self, *args, fused_lm_head=False, labels=None, shift_labels=None, num_items_in_batch=None, **kwargs):
        if not fused_lm_head:
            return inner(*args, labels=labels, shift_labels=shift_labels, num_items_in_batch=num_items_in_batch,
                         **kwargs)
        ids = kwargs.get("input_ids", args[0] if args else None)
        kwargs["use_cache"] = False
        logits = grammar.mask_logits(ids, inner(*args, **kwargs).logits)
        if shift_labels is None:
            logits, labels = logits[:, :-1], labels[:, 1:]
        else:
            labels = shift_labels
        logp = torch.log_softmax(logits.float() / temperature, -1)
        mask = labels != -100
        lp = logp.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1).masked_fill(~mask, 0.0)
        ent = -(logp.exp() * logp).sum(-1).masked_fill(~mask, 0.0)
        n = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return FusedCausalLMOutput(loss=-lp.sum() / n, log_probs=lp, entropy=ent, label_mask=mask)

    replace_forward(hf_model, forward)
    return hf_model


# ------------------------------------------- models built in code (no downloads)
MODEL_CONFIGS: dict[str, tuple[str, dict[str, int]]] = {
    # name: (architecture, shape). Parameter counts are for the task vocabulary (19 ids).
    "llama-tiny": ("llama", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)),
    "qwen2-tiny": ("qwen2", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)),
    "llama-25m": ("llama", dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8)),
    "qwen2-25m": ("qwen2", dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8)),
    "llama-150m": ("llama", dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                                 num_attention_heads=16)),
    "qwen2-150m": ("qwen2", dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                                 num_attention_heads=16)),
}


def build_model(name: str, seed: int, vocab_size: int | None = None, max_positions: int = 64):
    """A randomly initialised (seeded) ``LlamaForCausalLM``/``Qwen2ForCausalLM`` of
    ``MODEL_CONFIGS[name]`` over the task vocabulary, built in code."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if name not in MODEL_CONFIGS:
        raise InvalidArgument(f"model_config={name!r} is not a built-in model; choose one of: {', '.join(MODEL_CONFIGS)}.")
    arch, shape = MODEL_CONFIGS[name]
    cls_cfg, cls = (LlamaConfig, LlamaForCausalLM) if arch == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    cfg = cls_cfg(vocab_size=vocab_size or VOCAB_SIZE, num_key_value_heads=shape["num_attention_heads"],
                  max_position_embeddings=max_positions, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None,
                  tie_word_embeddings=False, use_cache=False, **shape)
    torch.manual_seed(seed)
    model = cls(cfg)
    model.generation_config.pad_token_id = PAD
    model.generation_config.eos_token_id = EOS
    model.generation_config.bos_token_id = None
    return model
