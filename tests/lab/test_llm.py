"""LLM-scale pieces: the exact-match verifier, the JSONL loader, the tiny in-code model,
and a CPU smoke test of experiments/llm/run_llm.py through TRL."""

import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.lab.llm import LogitsOnly, exact_match_reward, extract_answer, load_math_jsonl, tiny_causal_lm

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "tiny_math.jsonl"


@pytest.mark.parametrize("text, want", [
    ("the answer = 12", "12"), ("3 then 4", "4"), (r"so \boxed{7} and 9", "7"),
    ("1,234 apples", "1234"), ("no digits", None), ("-3/4", "-3/4"),
])
def test_extract_answer(text, want):
    assert extract_answer(text) == want


def test_exact_match_reward_plain_and_conversational():
    comps = ["the answer = 12", "11", [{"role": "assistant", "content": "it is 12.0"}], "nothing"]
    assert exact_match_reward(comps, answer=["12", "12", "12", "12"], prompts=None) == [1.0, 0.0, 1.0, 0.0]
    with pytest.raises(InvalidArgument, match="differ in length"):
        exact_match_reward(["1"], answer=["1", "2"])


def test_load_math_jsonl(tmp_path):
    rows = load_math_jsonl(DATA)
    assert len(rows) == 16 and set(rows[0]) == {"prompt", "answer"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "q"}) + "\n")
    with pytest.raises(InvalidArgument, match="line 1: answer=None"):
        load_math_jsonl(bad)
    with pytest.raises(InvalidArgument, match="is not a file"):
        load_math_jsonl(tmp_path / "missing.jsonl")


def test_tiny_model_round_trip_and_harness_adapter(llm_stack_ready):
    model, tok = tiny_causal_lm(0)
    ids = tok("what is 3 plus 4 ?", return_tensors="pt").input_ids
    assert tok.decode(ids[0]) == "what is 3 plus 4 ?"
    logits = LogitsOnly(model)(ids)
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert torch.allclose(logits, model(input_ids=ids).logits)


def _trl_or_skip():
    if importlib.util.find_spec("trl") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("trl is not installed but CI=true: install trl==1.16.0 (pip install 'exchange[trl]').")
        pytest.skip("trl is not installed (and CI != 'true'): pip install trl==1.16.0 to run the LLM smoke test.")


def test_run_llm_smoke_on_cpu(tmp_path, llm_stack_ready):
    """Both arms of a paired config train 2 steps on a tiny random Llama through TRL."""
    _trl_or_skip()
    spec = importlib.util.spec_from_file_location("run_llm", REPO / "experiments" / "llm" / "run_llm.py")
    run_llm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_llm)
    config = tmp_path / "pair.toml"
    config.write_text(
        'name = "llm_smoke"\nseeds = [0]\n[train]\nepochs = 2\n'
        '[[arms]]\nname = "grpo"\nobjective = "grpo"\nrole = "baseline"\n'
        '[[arms]]\nname = "dr_grpo"\nobjective = "dr_grpo"\nrole = "treatment"\n'
    )
    argv = ["--config", str(config), "--tiny", "--data", str(DATA), "--out", str(tmp_path / "out"),
            "--max-steps", "2", "--num-generations", "4", "--per-device-batch", "4",
            "--max-completion-length", "6", "--lr", "1e-3", "--save-steps", "1"]
    assert run_llm.main(argv) == 0
    for arm in ("grpo", "dr_grpo"):
        d = tmp_path / "out" / "llm_smoke" / arm / "seed0"
        done = json.loads((d / "done.json").read_text())
        assert done["steps"] == 2 and done["objective"] == arm
        rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2] and "charts/reward" in rows[0]
