"""Common rollouts on the TRL engine (issue 42, exchange.lab.llm_replay): the baseline's
``generate`` records its completions per optimizer step, every other arm's ``generate``
returns them instead of sampling; a file of another run or length is refused by name."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from exchange.errors import InvalidArgument

PROMPT = 5


def _models(seed_a=0, seed_b=1):
    from exchange.lab.llm import build_model

    return build_model("llama-tiny", seed_a, max_positions=64), build_model("llama-tiny", seed_b, max_positions=64)


def _generate(model, prompts, n=4, limit=None):
    from transformers import GenerationConfig

    gc = GenerationConfig(max_new_tokens=limit or n, do_sample=True, pad_token_id=0)
    return model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=gc)


def _prompts(seed=0, rows=8):
    return torch.randint(2, 18, (rows, PROMPT), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def _recorded(tmp_path_factory):
    pytest.importorskip("transformers")  # the module-wide recording; each test also asks llm_stack_ready
    from exchange.lab.llm_replay import ReplayIdentity, record_completions

    tmp = tmp_path_factory.mktemp("replay")
    base, other = _models()
    base.train()
    step = [0]
    record_completions(base, tmp / "base", ReplayIdentity("exp", 0), lambda: step[0])
    torch.manual_seed(0)
    outs, after = [], []
    for k in (0, 2):  # two generations, at optimizer steps 0 and 2
        step[0] = k
        outs.append(_generate(base, _prompts(k)))
        after.append(torch.get_rng_state())
    return tmp / "base", outs, after, other


@pytest.fixture
def recorded(llm_stack_ready, _recorded, tmp_path):
    """The baseline's recording (a copy per test) and a fresh replaying model (the
    module's, its instance ``generate`` wrapper removed after the test)."""
    import shutil

    source, outs, after, other = _recorded
    shutil.copytree(source, tmp_path / "base")
    yield tmp_path / "base", outs, after, other
    other.__dict__.pop("generate", None)


def test_the_replaying_arm_gets_the_baselines_completions_token_for_token(recorded):
    from exchange.lab.llm_replay import ReplayIdentity, completions_path, replay_completions

    source, outs, after, other = recorded
    assert [p.name for p in sorted((source / "completions").iterdir())] == ["step00000.pt", "step00002.pt"]
    other.train()
    step = [0]
    replay_completions(other, source, ReplayIdentity("exp", 0), lambda: step[0])
    torch.manual_seed(123)  # another random state: the replay sets the baseline's after sampling
    for k, out, rng in zip((0, 2), outs, after):
        step[0] = k
        got = _generate(other, _prompts(k))
        assert torch.equal(got, out)  # prompt + completion ids, padding included
        assert torch.equal(torch.get_rng_state(), rng)  # TRL's group shuffle then draws the same permutation
    assert not torch.equal(outs[0][:, PROMPT:], outs[1][:, PROMPT:])  # the control: two generations differ
    # the other policy samples something else on its own, so the equality above is the replay's
    own = torch.load(completions_path(source, 0), weights_only=False)
    assert set(own) == {"experiment", "seed", "step", "prompt_ids", "completion_ids", "rng"}  # no log-probs stored
    other.eval()  # generation outside training (the text mode's evaluation) is the model's own
    torch.manual_seed(5)
    free = _generate(other, _prompts(0), n=6)
    assert free.shape[1] == PROMPT + 6


def test_the_replaying_policys_log_probs_are_its_own(recorded):
    """The loss's forward pass on the replayed tokens is the replaying model's: log-probs
    differ from the baseline's weights' on the same tokens (nothing of the baseline's
    log-probs is stored or read), and its gradient flows to its own parameters."""
    from exchange.lab.llm_replay import ReplayIdentity, replay_completions

    from exchange.lab.llm import build_model

    source, outs, _, other = recorded
    base = build_model("llama-tiny", 0, max_positions=64)
    other.train()
    replay_completions(other, source, ReplayIdentity("exp", 0), lambda: 0)
    ids = _generate(other, _prompts(0))
    lp_other = torch.log_softmax(other(input_ids=ids).logits[:, PROMPT - 1:-1].double(), -1)
    lp_base = torch.log_softmax(base(input_ids=ids).logits[:, PROMPT - 1:-1].double(), -1).detach()
    tok = ids[:, PROMPT:, None]
    mine, theirs = lp_other.gather(-1, tok).squeeze(-1), lp_base.gather(-1, tok).squeeze(-1)
    assert (mine - theirs).abs().max() > 1e-3
    mine.sum().backward()
    assert all(p.grad is not None for p in other.parameters() if p.requires_grad)


@pytest.mark.parametrize("case, match", [
    ("seed", "holds the completions of experiment 'exp' seed 0, not of experiment 'exp' seed 1"),
    ("experiment", "not of experiment 'exp/pilot' seed 0"),
    ("missing", "step00004.pt is missing: the baseline arm generated nothing at optimizer step 4 "
                "\\(it has 2 generation file\\(s\\), last step00002.pt\\)"),
    ("rows", "holds \\(8, 5\\) prompt ids \\[rows, width\\], this arm generates for \\(4, 5\\)"),
    ("prompts", "the prompts of rows \\[0, 1, 2, 3, 4, 5, 6, 7\\] differ"),
    ("length", "holds completions of 4 tokens, longer than this arm's max_new_tokens=3"),
    ("renamed", "was recorded at optimizer step 0, not 2"),
])
def test_a_replay_file_of_another_run_or_length_is_refused_by_name(recorded, case, match):
    from exchange.lab.llm_replay import ReplayIdentity, completions_path, replay_completions

    source, _, _, other = recorded
    other.train()
    ident = {"seed": ReplayIdentity("exp", 1), "experiment": ReplayIdentity("exp/pilot", 0)}.get(
        case, ReplayIdentity("exp", 0))
    step = {"missing": 4, "renamed": 2}.get(case, 0)
    if case == "renamed":
        completions_path(source, 0).replace(completions_path(source, 2))
    replay_completions(other, source, ident, lambda: step)
    prompts = {"rows": _prompts(0, rows=4), "prompts": _prompts(7)}.get(case, _prompts(step if case != "renamed" else 0))
    with pytest.raises(InvalidArgument, match=match):
        _generate(other, prompts, limit=3 if case == "length" else None)


def test_run_llm_accepts_common_rollouts_only_where_it_can_honour_them(tmp_path, capsys, llm_stack_ready, trl_ready):
    from test_llm import PAIR

    from exchange.lab.llm import tiny_causal_lm

    spec = importlib.util.spec_from_file_location("run_llm", Path(__file__).resolve().parents[2] / "experiments" / "llm"
                                                  / "run_llm.py")
    run_llm = importlib.util.module_from_spec(spec)
    sys.modules["run_llm"] = run_llm
    spec.loader.exec_module(run_llm)
    (tmp_path / "x.toml").write_text(PAIR.replace("[train]", "[train]\ncommon_rollouts = true"))
    data = Path(__file__).parent / "data" / "tiny_math.jsonl"
    model, tok = tiny_causal_lm(0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    argv = ["--experiment", str(tmp_path / "x.toml"), "--model", str(tmp_path / "m"), "--data", str(data),
            "--use_cpu", "true", "--out", str(tmp_path / "out")]
    assert run_llm.main(argv) == 2
    assert "common_rollouts=true with data= (text mode)" in capsys.readouterr().err


@pytest.mark.slow  # ~1-2 min: three arms through TRL, 2 steps each
def test_run_llm_arms_train_on_the_baselines_completions(tmp_path, llm_stack_ready, trl_ready):
    """The issue-42 dose designs set ``common_rollouts = true``; through TRL every arm of the
    seed now trains on the baseline's completions: the per-step rollout hashes (prompts,
    tokens, mask, rewards, groups of every micro-batch) are the baseline's, an arm with the
    baseline's own objective reproduces the baseline's run number for number (the arms
    differ only through the objective), and the surgical arm cancels on the same data."""
    from test_llm import PAIR, _load_run_llm, _rows

    from exchange.core import metric_keys as mk
    from exchange.lab.experiment_decision import decide_experiment

    run_llm = _load_run_llm()
    toml = PAIR.replace("[train]", "[train]\ncommon_rollouts = true").replace(
        'name = "grpo+group_constant_norm"\nobjective = "grpo+group_constant_norm"\nrole = "treatment"',
        'name = "grpo_again"\nobjective = "grpo"\nrole = "treatment"\n[[arms]]\nname = "grpo+surgical"\n'
        'objective = "grpo+surgical"\nrole = "surgical"')
    (tmp_path / "common.toml").write_text(toml)
    out = tmp_path / "out"
    assert run_llm.main(["--experiment", str(tmp_path / "common.toml"), "--model_config", "llama-tiny", "--use_cpu",
                         "true", "--out", str(out), "--max_steps", "2", "--bf16", "false"]) == 0
    exp = out / "llm_pair"
    base = exp / "grpo" / "seed0"
    assert sorted(p.name for p in (base / "completions").iterdir()) == ["step00000.pt", "step00001.pt"]
    rows = {arm: _rows(exp / arm / "seed0") for arm in ("grpo", "grpo_again", "grpo+surgical")}
    hashes = {arm: [r[mk.ROLLOUT_HASH] for r in rr] for arm, rr in rows.items()}
    assert len(hashes["grpo"]) == 2 and len(set(hashes["grpo"])) == 2  # two rollouts, two hashes
    assert hashes["grpo_again"] == hashes["grpo"] == hashes["grpo+surgical"]
    assert not (exp / "grpo_again" / "seed0" / "completions").exists()  # only the baseline records
    for key in (mk.LOSS, mk.REWARD, mk.SHARED_RESIDUAL, mk.KL_ALL, mk.DRIFT_STYLE):
        assert [r.get(key) for r in rows["grpo_again"]] == [r.get(key) for r in rows["grpo"]], key
    assert max(r[mk.SHARED_RESIDUAL] for r in rows["grpo"]) > 1e-3  # the mechanism, on the common data
    assert max(r[mk.SHARED_RESIDUAL] for r in rows["grpo+surgical"]) < 1e-9
    assert rows["grpo+surgical"][1][mk.KL_ALL] != rows["grpo"][1][mk.KL_ALL]  # its own update
    assert decide_experiment(exp).common_rollouts == {"treatment": True, "surgical": True}
