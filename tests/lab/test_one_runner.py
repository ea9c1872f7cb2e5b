"""Issue 42, "one runner": the CPU trainer and the TRL run share one interface.

- every metric key is defined once, in ``exchange.core.metric_keys`` (no other module
  spells one);
- the ``[train]`` <-> ``GRPOConfig`` mapping is declared once (``exchange.lab.grpo_fields``)
  and both directions come from it;
- one fingerprint (``RunConfig.fingerprint``), the TRL run's taken on the run as TRL trains it;
- one pilot -> freeze -> test orchestration (``exchange.lab.experiment.pilot_then_test``).

Fast: no model is trained, nothing is downloaded.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from _tiny import tiny_config

import exchange.core.metric_keys as mk
from exchange.errors import InvalidArgument
from exchange.lab import experiment as experiment_mod
from exchange.lab.config import TrainConfig, load_experiment
from exchange.lab.grpo_fields import FIELDS, FIXED, grpo_defaults, train_as_run

REPO = Path(__file__).resolve().parents[2]
KEY = re.compile(r"^(%s)/\S+$" % "|".join(mk.NAMESPACES))
PREFIX = re.compile(r"^(%s)/" % "|".join(mk.NAMESPACES))


def _sources():
    for root in ("exchange", "experiments"):
        for path in sorted((REPO / root).rglob("*.py")):
            if path != REPO / "exchange" / "core" / "metric_keys.py":
                yield path


# ------------------------------------------------------------------ metric keys
def spelled_keys(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every string constant that is a whole metric key
    (``<namespace>/...``, no space: a docstring mentioning one is prose) and of every
    f-string that builds one."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            if isinstance(head, ast.Constant) and isinstance(head.value, str) and PREFIX.match(head.value):
                out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and KEY.match(node.value):
            out.append((node.lineno, node.value))
    return sorted(set(out))


def test_no_metric_key_is_spelled_outside_metric_keys():
    found = {}
    for path in _sources():
        hits = spelled_keys(path.read_text())
        if hits:
            found[str(path.relative_to(REPO))] = hits
    assert not found, f"metric keys spelled outside exchange.core.metric_keys (import them from there): {found}"


def test_the_key_scan_catches_a_planted_literal():
    planted = ('row["charts/reward"] = 1.0\nx = f"attr/{name}/path"\n'
               'def f():\n    """Logs ``charts/reward`` per step."""\n')
    assert [t for _, t in spelled_keys(planted)] == ["charts/reward", "f'attr/{name}/path'"]  # by line


def test_metric_keys_are_one_per_quantity_and_namespaced():
    values = [getattr(mk, n) for n in mk.__all__ if isinstance(getattr(mk, n), str)]
    assert len(values) == len(set(values))
    assert all(KEY.match(v) or v == mk.TRL_PREFIX for v in values)
    assert mk.attr_shared("P2") == "attr/P2/shared" and mk.cert_style("credit") == "cert/style_credit"
    # the strings the committed run files hold (experiments/results/*/summary.json reads them back)
    assert (mk.DRIFT_STYLE, mk.ENTROPY_FIXED_WEAK_CREDIT, mk.STYLE_RESIDUAL, mk.KL_SCALE) == (
        "drift/style_logp", "entropy/fixed_weak_credit", "tax/style_residual", "kl/scale")
    summary = json.loads((REPO / "experiments/results/grpo_norm__probe_dose_sgd/summary.json").read_text())
    assert {mk.STYLE_RESIDUAL, mk.STYLE_K_SIGNED} <= set(summary["dose"]["baseline"])


# ---------------------------------------------------------- the GRPOConfig mapping
def _grpo_args(tc: TrainConfig, **over):
    """A stand-in for a parsed GRPOConfig: its fields from the mapping (generation_batch_size
    as GRPOConfig derives it on one process)."""
    d = {**grpo_defaults(tc), **over}
    return SimpleNamespace(**d, generation_batch_size=d["per_device_train_batch_size"] * d["steps_per_generation"])


def test_both_directions_come_from_one_table():
    from exchange.lab.llm_run import experiment_defaults

    cfg = load_experiment(REPO / "experiments" / "configs" / "grpo_group_constant_norm.toml")
    got = experiment_defaults(cfg)
    assert got == grpo_defaults(cfg.train) and set(got) == {f.grpo for f in FIELDS} | set(FIXED)
    assert got["num_generations"] == cfg.train.group_size and got["max_steps"] == cfg.train.steps
    for opt in ("sgd", "adam"):
        tc = dataclasses.replace(cfg.train, optimizer=opt)
        assert train_as_run(tc, _grpo_args(tc)) == tc  # the round trip leaves every [train] field as it was
    moved = train_as_run(tc, _grpo_args(tc, learning_rate=0.5, num_generations=2))
    assert (moved.lr, moved.group_size) == (0.5, 2) and moved.prompts_per_step == tc.prompts_per_step * 2


def _pairs_train_and_grpo_fields(source: str) -> list[str]:
    """Places where code outside the table writes the mapping again: a GRPOConfig field
    set from a ``[train]`` attribute (``{"max_steps": tc.steps}``, ``max_steps=tc.steps``)
    or a ``[train]`` field set from a GRPOConfig attribute (``steps=args.max_steps``)."""
    grpo, train = {f.grpo for f in FIELDS} | set(FIXED), {f.train for f in FIELDS}

    def reads(value, names):
        return any(isinstance(a, ast.Attribute) and a.attr in names for a in ast.walk(value))

    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            out += [k.value for k, v in zip(node.keys, node.values)
                    if isinstance(k, ast.Constant) and k.value in grpo and reads(v, train)]
        elif isinstance(node, ast.keyword) and node.arg in grpo and reads(node.value, train):
            out.append(f"{node.arg}=" + ast.unparse(node.value))
        elif isinstance(node, ast.keyword) and node.arg in train and reads(node.value, grpo):
            out.append(f"{node.arg}=" + ast.unparse(node.value))
    return sorted(out)


def test_the_mapping_is_declared_once():
    found = {}
    for path in _sources():  # the lab's runners: exchange/lab and experiments/
        if path.name != "grpo_fields.py" and (path.parent.name == "lab" or "experiments" in path.parts):
            hits = _pairs_train_and_grpo_fields(path.read_text())
            if hits:
                found[str(path.relative_to(REPO))] = hits
    assert not found, f"[train] <-> GRPOConfig written outside exchange/lab/grpo_fields.py: {found}"
    # the scan finds the two copies this table replaced (issue 42: llm_run wrote each direction apart)
    planted = ('def defaults(tc):\n    return {"max_steps": tc.steps, "num_generations": tc.group_size}\n'
               'tc = dataclasses.replace(cfg.train, steps=args.max_steps, lr=args.learning_rate)\n')
    assert _pairs_train_and_grpo_fields(planted) == ["lr=args.learning_rate", "max_steps", "num_generations",
                                                     "steps=args.max_steps"]


# ------------------------------------------------------------------ one fingerprint
def test_one_fingerprint_for_both_engines(tmp_path):
    from exchange.lab.llm_run import run_fingerprint

    run = load_experiment(tiny_config(tmp_path)).runs()[0]
    args = _grpo_args(run.train)
    fp = run_fingerprint(run, args, model=None, model_config="llama-tiny", data=None)
    # the TRL run hashes the run as TRL trains it, through the CPU trainer's own method
    as_run = dataclasses.replace(run, train=train_as_run(run.train, args))
    assert as_run == run and fp == run.fingerprint(extendable=True, model=None, model_config="llama-tiny", data=None)
    assert run.fingerprint() != fp and run.fingerprint() == run.fingerprint(extendable=False)
    # a larger max_steps extends the TRL run; any other GRPOConfig value of [train] is another run
    assert run_fingerprint(run, _grpo_args(run.train, max_steps=99), model=None, model_config="llama-tiny",
                           data=None) == fp
    assert run_fingerprint(run, _grpo_args(run.train, learning_rate=0.123), model=None, model_config="llama-tiny",
                           data=None) != fp
    assert run_fingerprint(run, args, model=None, model_config="qwen2-tiny", data=None) != fp


# ------------------------------------------------------------- one orchestration
def test_the_trl_run_orchestrates_through_pilot_then_test():
    """llm_run names none of the pilot's steps itself: it calls the CPU harness's orchestration."""
    tree = ast.parse((REPO / "exchange" / "lab" / "llm_run.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "pilot_then_test" in names
    assert not names & {"pilot_runs", "freeze_runs", "check_pilot", "run_pilot"}


@pytest.fixture
def piloted(tmp_path, monkeypatch):
    text = tiny_config(tmp_path, seeds=(0, 1)).read_text().replace("seeds = [0, 1]", "seeds = [0, 1]\npilot_seeds = [7, 8]")
    path = tmp_path / "piloted.toml"
    path.write_text(text)
    cfg = load_experiment(path)
    assert cfg.pilot_seeds == (7, 8)
    frozen = {"refused": False}

    def fake_freeze(cfg, runs, out_root):
        return SimpleNamespace(to_json=lambda: json.dumps({"frozen": [r.experiment for r in runs]}))

    monkeypatch.setattr(experiment_mod, "freeze_runs", fake_freeze)
    monkeypatch.setattr(experiment_mod, "load_pilot",
                        lambda p: SimpleNamespace(refused=frozen["refused"], zero_spread=0.9))
    return cfg, frozen


def test_pilot_then_test_orders_the_phases(tmp_path, piloted):
    cfg, _ = piloted
    calls = []
    assert experiment_mod.pilot_then_test(cfg, tmp_path / "out", lambda runs: calls.append(runs) or True, cfg.runs())
    assert [{r.experiment for r in c} for c in calls] == [{"tiny/pilot"}, {"tiny"}]
    assert {r.seed for r in calls[0]} == {7, 8} and {r.seed for r in calls[1]} == {0, 1}
    assert json.loads((tmp_path / "out" / "tiny" / "pilot.json").read_text())["frozen"][0] == "tiny/pilot"
    calls.clear()  # a frozen pilot is never recomputed
    experiment_mod.pilot_then_test(cfg, tmp_path / "out", lambda runs: calls.append(runs) or True, cfg.runs())
    assert [{r.experiment for r in c} for c in calls] == [{"tiny"}]


def test_an_unfinished_pilot_freezes_nothing_and_a_refused_one_tests_nothing(tmp_path, piloted):
    cfg, frozen = piloted
    calls = []
    assert not experiment_mod.pilot_then_test(cfg, tmp_path / "out", lambda runs: calls.append(runs) and False,
                                              cfg.runs())
    assert len(calls) == 1 and not (tmp_path / "out" / "tiny" / "pilot.json").exists()
    frozen["refused"] = True
    calls.clear()
    with pytest.raises(InvalidArgument, match="refused the design"):
        experiment_mod.pilot_then_test(cfg, tmp_path / "out", lambda runs: calls.append(runs) or True, cfg.runs())
    assert [{r.experiment for r in c} for c in calls] == [{"tiny/pilot"}]  # the test seeds never trained


# ------------------------------------------------- the committed results, unchanged
PUBLISHED = ("grpo_norm__probe_dose_adam", "grpo_norm__probe_dose_sgd", "gspo_equal_length_reuse",
             "gspo_equal_length_reuse__reuse4", "gspo_equal_length_reuse__reuse8",
             "dapo_sign_free_clip__epslow_cd_e4_l01_kl0", "dapo_sign_free_clip__epslow_cd_e4_l01_kl0__sgd",
             "gspo_equal_length_nonprivate__e4x2__e2x2", "gspo_equal_length_nonprivate__e4x2")


def _copy_run_files(src: Path, dest: Path) -> None:
    """A copy of the run files the report reads (no checkpoints, no rollouts, no old summary)."""
    import shutil

    for f in list(src.rglob("*.json")) + list(src.rglob("*.jsonl")):
        if f.name != "summary.json":
            (dest / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest / f.relative_to(src))


@pytest.mark.slow  # ~30-90 s: three 12-seed designs read and reported
def test_the_published_designs_regenerate_byte_identical(tmp_path):
    """The committed issue-42 results (experiments/results/<name>/summary.json, summary.md)
    and their generated sections of docs/experiments.md and docs/claims.md come out byte
    for byte from the run directories with today's code (the run files are not committed:
    runs/<name>, 155 MB, on the machine that ran them)."""
    import importlib.util
    import shutil

    from exchange.lab.experiment_report import report_experiment

    runs = REPO / "runs"
    if not all((runs / n / "experiment.json").exists() for n in PUBLISHED):
        pytest.skip(f"the published designs' run directories are not on this machine ({runs}/{PUBLISHED[0]}, ...)")
    results = []
    for name in PUBLISHED:
        _copy_run_files(runs / name, tmp_path / name)
        results.append(report_experiment(tmp_path / name))
        for f in ("summary.json", "summary.md"):
            assert (tmp_path / name / f).read_bytes() == (REPO / "experiments" / "results" / name / f).read_bytes(), f
    spec = importlib.util.spec_from_file_location("publish", REPO / "experiments" / "publish.py")
    publish = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(publish)
    docs = tmp_path / "docs"
    docs.mkdir()
    for page in ("experiments.md", "claims.md"):
        shutil.copyfile(REPO / "docs" / page, docs / page)
    publish.write_sections(results, docs)
    for page in ("experiments.md", "claims.md"):
        assert (docs / page).read_bytes() == (REPO / "docs" / page).read_bytes(), page


EARLIER = ("grpo_norm", "grpo_norm__link", "grpo_norm__link_forced", "gspo_min_replace", "dapo_sign_free_clip")
"""The designs of issue 31's two rounds, in the order of docs/experiments.md's first generated section."""


@pytest.mark.slow  # ~30-60 s: five 12-seed designs read and reported
def test_the_earlier_designs_regenerate_byte_identical(tmp_path):
    """The first generated sections of docs/experiments.md and docs/claims.md (issue 31's
    designs, re-run with today's code in issue 42) and their committed results come out
    byte for byte from the run directories with today's report code, as
    ``exchange experiment report <dirs> --img-dir docs/img --markdown docs/experiments.md
    --claims docs/claims.md`` writes them."""
    import shutil

    from exchange.lab.experiment_report import report_experiments

    runs = REPO / "runs"
    if not all((runs / n / "experiment.json").exists() for n in EARLIER):
        pytest.skip(f"the earlier designs' run directories are not on this machine ({runs}/{EARLIER[0]}, ...)")
    for name in EARLIER:
        _copy_run_files(runs / name, tmp_path / name)
    docs = tmp_path / "docs"
    docs.mkdir()
    for page in ("experiments.md", "claims.md"):
        shutil.copyfile(REPO / "docs" / page, docs / page)
    report_experiments([tmp_path / n for n in EARLIER], img_dir=docs / "img", markdown=docs / "experiments.md",
                       claims=docs / "claims.md")
    for name in EARLIER:
        for f in ("summary.json", "summary.md"):
            assert (tmp_path / name / f).read_bytes() == (REPO / "experiments" / "results" / name / f).read_bytes(), f
    for page in ("experiments.md", "claims.md"):
        assert (docs / page).read_bytes() == (REPO / "docs" / page).read_bytes(), page
