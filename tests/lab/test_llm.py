"""LLM-scale pieces: the exact-match verifier, the JSONL loader, the tiny in-code model,
and a CPU smoke test of experiments/llm/run_llm.py through TRL."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from exchange.core.metric_keys import SHARED_EVENTS, SHARED_RESIDUAL
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


# ------------------------------------------------ the synthetic tasks through TRL
def test_task_tokenizer_reward_and_grammar_inside_the_model(llm_stack_ready, trl_ready):
    """Token ids are task ids; the task verifier is the reward; the grammar caps act in
    the model's forward, in TRL's fused log-prob head, and refuse a KV-cached step."""
    from trl.trainer.utils import add_fused_lm_head

    from exchange.lab.llm import build_model, constrain_to_grammar, grammar_fused_head, render, task_reward, task_tokenizer
    from exchange.lab.tasks import EOS, FILLER, STYLE, TEMPLATE, get_task

    task = get_task("arithmetic")
    tok = task_tokenizer()
    prompt = [2, 14, 8, 15, 3]  # Q 3 + 4 =
    assert render(prompt) == "Q 3 + 4 =" and tok(render(prompt), add_special_tokens=False).input_ids == prompt
    reward = task_reward(task)  # 3 + 4 = 10 in base 7: digits (1, 0) = ids (12, 11)
    got = reward(prompts=["Q 3 + 4 =", "Q 3 + 4 ="], completions=["", ""],
                 completion_ids=[[*TEMPLATE, STYLE, 12, 11, FILLER[0], EOS], [*TEMPLATE, 12, 12, EOS]])
    assert got == [1.0, 0.0]

    model = constrain_to_grammar(build_model("llama-tiny", 0), task)
    ids = torch.tensor([prompt + [*TEMPLATE, STYLE, 12, FILLER[0]]])
    last = model(input_ids=ids).logits[0, -1]
    assert last[TEMPLATE[0]] <= -1e3 and last[STYLE] <= -1e3 and last[12] <= -1e3  # caps and "after a filler"
    assert last[EOS] > -1e3 and last[FILLER[1]] > -1e3
    add_fused_lm_head(model, temperature=0.7)  # what GRPOTrainer does; it bypasses the logits
    grammar_fused_head(model, 0.7)
    labels = ids.clone()
    labels[:, :5] = -100
    fused = model(input_ids=ids, labels=labels, fused_lm_head=True)
    want = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float() / 0.7, -1)
    want = want.gather(-1, ids[:, 1:, None]).squeeze(-1)[:, 4:]
    assert torch.allclose(fused.log_probs[:, 4:], want, atol=1e-5)
    with pytest.raises(InvalidArgument, match="use_cache=False"):
        model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=3, use_cache=True, do_sample=False)


def _grammar_violations(model, seqs: torch.Tensor, prompt_len: int) -> int:
    """How many generated tokens of ``seqs [B, P + t]`` the grammar blocks at their own
    position, recounted from the whole prefix (what an unmasked cached step would miss)."""
    from exchange.lab.tasks import EOS, VOCAB_SIZE

    grammar = model._exchange_grammar_lm
    zeros = torch.zeros((*seqs.shape, VOCAB_SIZE))
    blocked = grammar.mask_logits(seqs, zeros) < -1e3  # [B, S, V]: blocked after each prefix
    nxt = seqs[:, prompt_len:]
    live = (nxt == EOS).long().cumsum(1) - (nxt == EOS).long() == 0  # up to and with the first EOS, then padding
    return int((blocked[:, prompt_len - 1:-1].gather(-1, nxt[..., None]).squeeze(-1) & live).sum())


def test_grammar_holds_in_generation_and_refuses_a_kv_cache(llm_stack_ready):
    """On the pinned transformers, sampling obeys the grammar at every generated token;
    with the KV cache on, the call is refused or (were it allowed) still obeys it. The
    untrained model samples near-uniformly over the 19 task ids, so an unmasked cached
    step breaks a cap in almost every one of 32 responses of 12 tokens (transformers 5.24
    renamed ``past_key_values`` to ``cache``: a guard keyed on the old name let such
    steps through, and this test failed)."""
    from exchange.lab.llm import build_model, constrain_to_grammar
    from exchange.lab.tasks import get_task

    task = get_task("arithmetic")
    model = constrain_to_grammar(build_model("llama-tiny", 0), task)
    prompt = torch.tensor([[2, 14, 8, 15, 3]] * 32)
    kw = dict(max_new_tokens=12, do_sample=True, temperature=2.0, top_k=0, pad_token_id=0)
    torch.manual_seed(0)
    free = model.generate(input_ids=prompt, use_cache=False, **kw)
    assert free.shape[1] > prompt.shape[1] and _grammar_violations(model, free, 5) == 0
    torch.manual_seed(0)
    try:
        cached = model.generate(input_ids=prompt, use_cache=True, **kw)
    except InvalidArgument as e:
        assert "use_cache=False" in str(e)
    else:
        assert _grammar_violations(model, cached, 5) == 0, "a KV-cached step was sampled without the grammar"
    # A cached step whose cache arrives under a name the guard has never seen is still
    # refused: its positions run past the one token it is given.
    with pytest.raises(InvalidArgument, match="position_ids past"):
        model(input_ids=prompt[:1, -1:], position_ids=torch.tensor([[5]]), some_future_cache_name=None)


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread, as the CPU harness trains: tiny models on a shared CPU run
    several times slower with a thread pool than without."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("name", ["arithmetic", "pattern", "countdown"])
def test_held_out_prompts_are_never_trained_on(name):
    from exchange.lab.llm_run import held_out_split
    from exchange.lab.tasks import get_task

    task = get_task(name)
    eval_prompts = task.sample_prompts(64, torch.Generator().manual_seed(20_000))
    held, train = held_out_split(task, eval_prompts, seed=0, n_train=512)
    held_set = {tuple(r) for r in held.tolist()}
    assert len(held_set) == len(held) > 0 and train.shape == (512, task.prompt_len)
    assert not held_set & {tuple(r) for r in train.tolist()}
    if name == "arithmetic":  # 49 prompts: a quarter is held out
        assert len(held) == 12


def _load_run_llm():
    spec = importlib.util.spec_from_file_location("run_llm", REPO / "experiments" / "llm" / "run_llm.py")
    run_llm = importlib.util.module_from_spec(spec)
    sys.modules["run_llm"] = run_llm  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(run_llm)
    return run_llm


PAIR = """name = "llm_pair"
seeds = [0]
mechanism = "M3 per-sequence normalisation"
[task]
name = "arithmetic"
max_filler = 2
[sft]
steps = 30
batch = 32
lr = 0.01
[train]
steps = 50
prompts_per_step = 2
group_size = 4
epochs = 1
minibatches = 1
max_response_len = 8
eval_every = 2
eval_prompts = 8
probe_prompts = 2
[[arms]]
name = "grpo"
objective = "grpo"
role = "baseline"
[[arms]]
name = "grpo+group_constant_norm"
objective = "grpo+group_constant_norm"
role = "treatment"
"""


def _rows(d):
    return [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
def test_run_llm_both_arms_through_trl_parser_and_report(tmp_path, llm_stack_ready, trl_ready):
    """Both arms of a paired TOML through TrlParser (a YAML recipe with script and
    GRPOConfig keys, CLI overrides), on a tiny Llama built in code and warm-started by
    SFT; ``exchange experiment report`` then reads the directory."""
    from exchange.cli import main as cli

    run_llm = _load_run_llm()
    (tmp_path / "pair.toml").write_text(PAIR)
    (tmp_path / "recipe.yaml").write_text(
        f"experiment: {tmp_path / 'pair.toml'}\nmodel_config: llama-tiny\nuse_cpu: true\n"
        "learning_rate: 0.003\nmax_grad_norm: 0.5\nmax_steps: 7\n")
    out = tmp_path / "out"
    assert run_llm.main(["--config", str(tmp_path / "recipe.yaml"), "--out", str(out), "--max_steps", "2"]) == 0
    exp = out / "llm_pair"
    meta = json.loads((exp / "experiment.json").read_text())
    assert meta["train"]["steps"] == 2 and meta["engine"] == "trl"  # CLI beats YAML beats the TOML's 50
    assert meta["grpo_config"]["max_grad_norm"] == 0.5 and meta["grpo_config"]["learning_rate"] == 0.003
    assert meta["grpo_config"]["num_generations"] == 4  # from the TOML's group_size
    assert len(list((exp / "_sft").iterdir())) == 1  # one warm start per seed, shared by both arms
    inits = []
    for arm in ("grpo", "grpo+group_constant_norm"):
        d = exp / arm / "seed0"
        assert json.loads((d / "done.json").read_text())["steps"] == 2
        rows = _rows(d)
        assert [r["step"] for r in rows] == [0, 1]
        assert {"charts/reward", "tax/shared_residual", "kl/all_contexts", "drift/style_logp"} <= set(rows[-1])
        assert "eval/accuracy" in rows[1] and "cert/filler_flat" in rows[1]  # eval every 2 steps and after the last
        assert json.loads((d / "config.json").read_text())["grpo_config"]["max_grad_norm"] == 0.5
        inits.append(json.loads((d / "init.json").read_text()))
    assert inits[0] == inits[1]  # the same warm-started weights, evaluated on the same held-out set
    # the instruments measure TRL's real batches: GRPO's 1/L_i leaves shared mass uncancelled, the
    # group-constant normalisation cancels it (Theorem T1), on the same first rollout
    base = [r["tax/shared_residual"] for r in _rows(exp / "grpo" / "seed0") if r["tax/shared_residual"] is not None]
    treat = [r["tax/shared_residual"] for r in _rows(exp / "grpo+group_constant_norm" / "seed0")
             if r["tax/shared_residual"] is not None]
    assert base and max(base) > 1e-3 and treat and max(treat) < 1e-9
    for arm in ("grpo", "grpo+group_constant_norm"):  # one key per quantity: the integration's keys are the
        for r in _rows(exp / arm / "seed0"):          # harness's (exchange.core.metric_keys), never renamed
            assert SHARED_EVENTS in r and SHARED_RESIDUAL in r
            assert not [k for k in r if "integration" in k or k.startswith("trl/tax/") or k.startswith("exchange/")]
    assert cli(["experiment", "report", str(exp)]) == 0
    summary = json.loads((exp / "summary.json").read_text())
    assert {r["prediction"] for r in summary["rows"]} == {"P1", "P2", "P3", "P4"}
    assert "dose" in summary and summary["kl"]["baseline"] is not None  # control-context KL measured through TRL


@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
def test_run_llm_resumes_from_trl_checkpoint_without_duplicate_steps(tmp_path, llm_stack_ready, trl_ready):
    """2 steps, a torn extra row (a kill between logging and checkpointing), then
    max_steps 4: the run resumes from checkpoint-2 and logs steps 0..3 exactly once."""
    run_llm = _load_run_llm()
    (tmp_path / "pair.toml").write_text(PAIR)
    argv = ["--experiment", str(tmp_path / "pair.toml"), "--model_config", "qwen2-tiny", "--use_cpu", "true",
            "--out", str(tmp_path / "out"), "--arms", "grpo", "--eval_steps", "4", "--save_steps", "2"]
    assert run_llm.main(argv + ["--max_steps", "2"]) == 0
    d = tmp_path / "out" / "llm_pair" / "grpo" / "seed0"
    assert [r["step"] for r in _rows(d)] == [0, 1] and (d / "checkpoint-2").is_dir()
    with open(d / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"step": 2, "charts/reward": 0.5}) + "\n")
    assert run_llm.main(argv + ["--max_steps", "4"]) == 0
    rows = _rows(d)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[2].get("charts/reward") != 0.5 or "tax/shared_residual" in rows[2]  # recomputed, not the torn row
    assert json.loads((d / "done.json").read_text())["steps"] == 4
    assert [e["from_step"] for e in json.loads((d / "env.json").read_text())] == [0, 2]
    assert run_llm.main(argv + ["--max_steps", "4"]) == 0  # finished: nothing to do
    assert [r["step"] for r in _rows(d)] == [0, 1, 2, 3]


@pytest.mark.parametrize("extra, match", [
    (["--model", "/nowhere"], "exactly one of model=PATH"),
    (["--logging_steps", "5"], "logging_steps=5"),
    (["--max_completion_length", "3"], "max_completion_length=3"),
    (["--use_vllm", "true"], "use_vllm=True"),
    (["--model_config", "gpt-9"], "model_config='gpt-9' is not a built-in model"),
])
def test_run_llm_errors_name_the_field(tmp_path, capsys, extra, match, llm_stack_ready, trl_ready):
    run_llm = _load_run_llm()
    (tmp_path / "pair.toml").write_text(PAIR)
    argv = ["--experiment", str(tmp_path / "pair.toml"), "--model_config", "llama-tiny", "--use_cpu", "true",
            "--out", str(tmp_path / "out"), *extra]
    assert run_llm.main(argv) == 2
    assert match in capsys.readouterr().err


def test_run_llm_needs_an_experiment(capsys, llm_stack_ready, trl_ready):
    assert _load_run_llm().main(["--model_config", "llama-tiny"]) == 2
    assert "pass --experiment" in capsys.readouterr().err


def _save(model, tokenizer, path):
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
def test_run_llm_local_model_folder_and_text_mode(tmp_path, capsys, llm_stack_ready, trl_ready):
    """``--model PATH``: a folder with the task tokenizer trains on the synthetic task; one
    with another tokenizer is refused with the fix; with ``--data`` (text mode) it trains
    on the JSONL with the exact-match reward and evaluates the held-out rows."""
    from exchange.lab.llm import build_model, task_tokenizer

    run_llm = _load_run_llm()
    (tmp_path / "pair.toml").write_text(PAIR)
    base = ["--experiment", str(tmp_path / "pair.toml"), "--use_cpu", "true", "--arms", "grpo", "--max_steps", "1"]
    local = _save(build_model("llama-tiny", 0), task_tokenizer(), tmp_path / "local")
    assert run_llm.main(base + ["--model", local, "--out", str(tmp_path / "a")]) == 0
    rows = _rows(tmp_path / "a" / "llm_pair" / "grpo" / "seed0")
    assert [r["step"] for r in rows] == [0] and "eval/accuracy" in rows[0]

    text_model = _save(*tiny_causal_lm(0), tmp_path / "text")
    assert run_llm.main(base + ["--model", text_model, "--out", str(tmp_path / "b")]) == 2
    assert "not the synthetic task's ids" in capsys.readouterr().err
    assert run_llm.main(base + ["--model", text_model, "--data", str(DATA), "--out", str(tmp_path / "c")]) == 0
    d = tmp_path / "c" / "llm_pair" / "grpo" / "seed0"
    assert [r["step"] for r in _rows(d)] == [0] and "eval/accuracy" in _rows(d)[0]
    assert "eval/accuracy" in json.loads((d / "init.json").read_text())


def test_committed_recipes_parse(monkeypatch, llm_stack_ready, trl_ready):
    """Every YAML under experiments/llm/recipes/ parses through TrlParser with its TOML
    (run from the repository root, as documented; bf16 is for GPUs, so it is overridden)."""
    run_llm = _load_run_llm()
    monkeypatch.chdir(REPO)
    recipes = sorted((REPO / "experiments" / "llm" / "recipes").glob("*.yaml"))
    assert recipes
    for recipe in recipes:
        script, args, cfg = run_llm.parse(["--config", str(recipe), "--bf16", "false", "--use_cpu", "true"])
        assert cfg is not None and (script.model_config or script.model), recipe
        assert args.per_device_train_batch_size % args.num_generations == 0, recipe
        assert args.logging_steps == 1 and args.max_steps >= 1, recipe


def test_the_m1_recipe_maps_the_reuse_and_binds_the_coupling_surgical_arm(monkeypatch, llm_stack_ready, trl_ready):
    """Issue 42's M1 recipe: reuse 4x2 becomes 8 TRL steps per rollout of 32 prompts x G=4
    (exchange.lab.grpo_fields read back), SGD without clipping in float32, 6-token
    completions; and TRL binds the design's pathway arm 'gspo+coupling_surgical' with
    GSPO's own parameters (before the fix its settings looked up 'gspo+coupling_surgical'
    as a restoring transform and every run of the arm failed at construction)."""
    from trl import GRPOConfig

    from exchange.lab.grpo_fields import train_as_run
    from exchange.libraries.trl.settings import config_params, objective_defaults, refused_settings
    from exchange.objectives import get

    run_llm = _load_run_llm()
    monkeypatch.chdir(REPO)
    recipe = REPO / "experiments" / "llm" / "recipes" / "gspo_equal_length_nonprivate_llama25m.yaml"
    _, args, cfg = run_llm.parse(["--config", str(recipe), "--use_cpu", "true"])
    ran = train_as_run(cfg.train, args)
    assert (ran.epochs, ran.minibatches, ran.prompts_per_step, ran.group_size) == (4, 2, 32, 4)
    assert args.max_steps == cfg.train.steps * ran.epochs * ran.minibatches == 480  # the TOML's 60 rollouts
    assert ran.optimizer == "sgd" and args.max_grad_norm == 0.0 and not args.bf16
    assert args.max_completion_length == cfg.task.build().max_response_len == 6  # exact filler: one length
    assert args.save_steps % (args.steps_per_generation * args.num_iterations) == 0  # between rollouts

    config = GRPOConfig(output_dir="unused", use_cpu=True, bf16=False, report_to="none")
    arm = next(a for a in cfg.arms if a.role == "surgical")
    assert arm.objective == "gspo+coupling_surgical"
    assert objective_defaults(arm.objective) == dict(get("gspo").defaults)
    assert refused_settings(config, arm.objective, arm.params, False) == []
    assert config_params(config, arm.objective, arm.params, False) == arm.params


def test_the_kl_instrument_reads_float32_logits_under_bf16_autocast(llm_stack_ready, trl_ready):
    """The KL instrument's "before" pass runs inside TRL's bf16 autocast and its "after"
    pass outside: both must read float32 logits (bf16 would differ by ~1e-2 here)."""
    from types import SimpleNamespace

    import torch

    from exchange.lab.llm import build_model
    from exchange.lab.llm_run import _trainer_class

    model = build_model("llama-tiny", 0, max_positions=64)
    shell = SimpleNamespace(accelerator=SimpleNamespace(unwrap_model=lambda m: m), model=model)
    gen = torch.Generator().manual_seed(0)
    inputs = {"prompt_ids": torch.randint(3, 8, (2, 4), generator=gen), "prompt_mask": torch.ones(2, 4, dtype=torch.long),
              "completion_ids": torch.randint(3, 8, (2, 5), generator=gen),
              "completion_mask": torch.ones(2, 5, dtype=torch.long)}
    context_logp = _trainer_class()._exchange_context_logp
    plain = context_logp(shell, inputs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = context_logp(shell, inputs)
        bf16 = torch.log_softmax(model(input_ids=torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)).logits
                                 .double(), -1)[:, 3:-1]
    torch.testing.assert_close(inside, plain, rtol=0, atol=1e-6)
    assert float((bf16 - plain).abs().max()) > 1e-4  # what the instrument read before issue 32


def test_model_on_the_command_line_replaces_the_recipes_model_config(tmp_path, llm_stack_ready, trl_ready):
    """The committed recipes name model_config: llama-25m; --model PATH must still work."""
    run_llm = _load_run_llm()
    recipe = REPO / "experiments" / "llm" / "recipes" / "grpo_norm_llama25m.yaml"
    script, _, _ = run_llm.parse(["--config", str(recipe), "--model", str(tmp_path), "--use_cpu", "true",
                                  "--bf16", "false"])
    assert script.model == str(tmp_path) and script.model_config is None
    script, _, _ = run_llm.parse(["--config", str(recipe), "--use_cpu", "true", "--bf16", "false"])
    assert script.model is None and script.model_config == "llama-25m"


@pytest.mark.slow
def test_surgical_arm_runs_through_trl_and_cancels(tmp_path, llm_stack_ready, trl_ready):
    """Issue 31 on the LLM path: the pathway arm ('grpo+surgical') trains through TRL at
    CPU scale with the harness's instruments, and its shared residual is round-off; the
    CPU-only options are refused with the field named."""
    run_llm = _load_run_llm()
    three = PAIR.replace('role = "treatment"', 'role = "treatment"\n[[arms]]\nname = "grpo+surgical"\n'
                                                'objective = "grpo+surgical"\nrole = "surgical"')
    (tmp_path / "three.toml").write_text(three)
    out = tmp_path / "out"
    assert run_llm.main(["--experiment", str(tmp_path / "three.toml"), "--model_config", "llama-tiny", "--use_cpu",
                         "true", "--out", str(out), "--max_steps", "2"]) == 0
    rows = _rows(out / "llm_pair" / "grpo+surgical" / "seed0")
    res = [r["tax/shared_residual"] for r in rows if r["tax/shared_residual"] is not None]
    assert res and max(res) < 1e-9 and all(r["kl/control_contexts"] is not None for r in rows)


THREE = PAIR.replace('role = "treatment"', 'role = "treatment"\n[[arms]]\nname = "grpo+surgical"\n'
                                           'objective = "grpo+surgical"\nrole = "surgical"')


@pytest.mark.slow
def test_kl_step_attribution_and_pilot_run_unchanged_through_trl(tmp_path, llm_stack_ready, trl_ready):
    """Issue 31 on the LLM path at CPU scale: the pilot (exchange.lab.experiment.pilot_runs
    and freeze_runs), the attribution instrument and the KL-normalised step, the harness's
    own code, run through TRL on a tiny Llama built from a config. Two optimizer steps per
    rollout (num_iterations 2), 2 rollouts, pilot seeds 100-101, then the test seed. In
    float32 (``--bf16 false``): under bf16 accelerate's autocast-wrapped forward rounds the
    probes and the KL (the path integral then missed the change by up to 2x)."""
    from exchange.cli import main as cli
    from exchange.lab.klstep import KL_TOLERANCE
    from exchange.lab.predictions import read_run

    run_llm = _load_run_llm()
    toml = THREE.replace("[train]", "[train]\nkl_target = 0.001").replace("epochs = 1", "epochs = 2").replace(
        "seeds = [0]", "seeds = [0]\npilot_seeds = [100, 101]")
    (tmp_path / "p.toml").write_text(toml)
    out = tmp_path / "out"
    assert run_llm.main(["--experiment", str(tmp_path / "p.toml"), "--model_config", "llama-tiny", "--use_cpu",
                         "true", "--out", str(out), "--max_steps", "4", "--bf16", "false"]) == 0
    exp = out / "llm_pair"
    pilot = json.loads((exp / "pilot.json").read_text())
    assert set(pilot["pilots"]) == {"P1", "P2", "P3"} and pilot["sensitivity"] is not None
    assert pilot["zero_spread"] is not None  # the refusal rule reads it
    for arm in ("grpo", "grpo+surgical", "grpo+group_constant_norm", "grpo+style_bonus"):
        assert (exp / "pilot" / arm / "seed100" / "done.json").exists()
    for seed in (100, 101):
        run = read_run(exp / "pilot" / "grpo" / f"seed{seed}")
        # the loss TRL stepped on is the objective's: p.grad = -s sum kappa grad l to round-off
        assert run.series("attr/grad_match").max() < 1e-5
        # training starts where init.json was measured
        assert run.rows[0]["attr/drift/style_logp/start"] == pytest.approx(run.init["drift/style_logp"], abs=1e-9)
        # the path integral reproduces the probe's actual change (the attribution's first validation):
        # measured: log p(S) within 0.4%, the entropy within 2.5% (the trapezoid rule over the rescale's
        # long step back; 1e-5 without the KL step; the CPU harness's test: 0.01% and 3%)
        for probe, rel in (("drift/style_logp", 0.02), ("entropy/fixed_weak_credit", 0.05)):
            path = run.series(f"attr/{probe}/path").sum()
            change = run.final(probe) - run.init[probe]
            assert abs(path - change) <= rel * abs(change) + 1e-6, (probe, path, change)
        assert len(run.series("attr/drift/style_logp/shared")) == 2  # one sum per rollout
    for arm in ("grpo", "grpo+surgical", "grpo+group_constant_norm"):
        run = read_run(exp / arm / "seed0")
        kls = run.series("kl/rollout_control")
        # every rollout's change rescaled to the target (klstep.KL_TOLERANCE; measured 0.03%); a rollout
        # whose groups all have zero reward spread does not move (KL 0, left as it is)
        assert len(kls) == 2 and all(abs(k / 0.001 - 1) < KL_TOLERANCE for k in kls if k > 0), kls
        assert any(k > 0 for k in kls)
        assert len(run.series("kl/control_contexts")) == 2  # the trust-region KL is the rollout's
    assert cli(["experiment", "report", str(exp)]) == 0
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["pilot"]["seeds"] == [100, 101] and set(summary["kl_matched"]) == {"surgical", "treatment"}


@pytest.mark.parametrize("edit, extra, match", [
    (("[train]", "[train]\nkl_target = 0.001\nepochs = 2"), ["--save_steps", "3"],
     "save_steps=3 is not a multiple of the 2 optimizer steps"),
])
def test_rollout_options_the_trl_engine_cannot_honour_are_refused(tmp_path, capsys, edit, extra, match,
                                                                 llm_stack_ready, trl_ready):
    run_llm = _load_run_llm()
    (tmp_path / "x.toml").write_text(PAIR.replace("epochs = 1\n", "").replace(*edit))
    argv = ["--experiment", str(tmp_path / "x.toml"), "--model_config", "llama-tiny", "--use_cpu", "true",
            "--out", str(tmp_path / "out"), *extra]
    assert run_llm.main(argv) == 2
    assert match in capsys.readouterr().err


def test_generation_time_forcing_writes_the_first_token_and_keeps_the_policys_log_prob(llm_stack_ready):
    """Issue 42: under TRL the forced S comes from a wrapped ``generate`` (a logits processor
    at the first generated position, libraries/trl/contact.force_first_token); the forward
    the loss uses is untouched, so log p(S) there is the policy's own, not 0."""
    from exchange.lab.llm import build_model
    from exchange.lab.tasks import STYLE
    from exchange.libraries.trl.contact import force_first_token

    torch.manual_seed(0)
    model = build_model("llama-tiny", 0, max_positions=64)
    prompts = torch.randint(2, 18, (8, 5))
    force_first_token(model, STYLE)
    out = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                         max_new_tokens=3, pad_token_id=0)
    assert bool((out[:, 5] == STYLE).all())
    assert not bool((out[:, 6] == STYLE).all())  # only the first position is forced
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=out).logits.double(), -1)[:, 4, STYLE]
    assert bool((logp < -0.1).all())  # the policy's own log p(S), which the loss sees
    plain = build_model("llama-tiny", 0, max_positions=64)
    free = plain.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                          max_new_tokens=1, pad_token_id=0)
    assert not bool((free[:, 5] == STYLE).all())  # the control: unforced sampling does not emit S everywhere


@pytest.mark.slow  # ~1 min: the non-private forced design through TRL, 2 steps
def test_run_llm_forces_s_at_the_head_of_every_completion(tmp_path, llm_stack_ready, trl_ready):
    """Issue 42's design on the TRL path: S forced at generation time and also a filler;
    both arms train and finish."""
    run_llm = _load_run_llm()
    toml = PAIR.replace("max_filler = 2", "max_filler = 2\nstyle_p = 0.0\ntemplate_in_prompt = true\nforced_style = true\n"
                                          "probe_as_filler = true\nlong_wrong = true")
    toml = toml.replace('name = "grpo+group_constant_norm"\nobjective = "grpo+group_constant_norm"\nrole = "treatment"',
                        'name = "grpo+surgical"\nobjective = "grpo+surgical"\nrole = "surgical"')
    (tmp_path / "forced.toml").write_text(toml)
    out = tmp_path / "out"
    assert run_llm.main(["--experiment", str(tmp_path / "forced.toml"), "--model_config", "llama-tiny",
                         "--use_cpu", "true", "--max_steps", "2", "--out", str(out)]) == 0
    for arm in ("grpo", "grpo+surgical"):  # both arms finish (run_llm refused forced_style before issue 42);
        d = out / "llm_pair" / arm / "seed0"  # the forcing itself is checked by the test above
        assert json.loads((d / "done.json").read_text())["steps"] == 2 and len(_rows(d)) == 2
