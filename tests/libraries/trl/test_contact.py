"""TRL's private contact points live in one module (exchange.libraries.trl.contact): its
lists are true of the installed TRL, it lists every private name it uses, and no other
module of the package (nor experiments/) names a private TRL attribute, overrides a
private TRL method or patches a method with ``types.MethodType``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("trl_ready")

ROOT = Path(__file__).resolve().parents[3]
CONTACT = ROOT / "exchange/libraries/trl/contact.py"


def _trl_private_names() -> set[str]:
    """Private names of TRL's GRPOTrainer (methods, and attributes it or transformers'
    Trainer sets on ``self``)."""
    import inspect
    import re

    from transformers import Trainer
    from trl import GRPOTrainer

    names = {n for n in dir(GRPOTrainer) if n.startswith("_") and not n.startswith("__")}
    for cls in (GRPOTrainer, Trainer):
        names |= set(re.findall(r"self\.(_[a-z]\w*)\s*=", inspect.getsource(cls)))
    return names - OWN_NAMES


# exchange's own private names that coincide with one of transformers' Trainer (never
# used on a trainer: exchange/libraries/wheel.py's and exchange/theory/cache.py's _name)
OWN_NAMES = {"_name"}


def private_contacts(source: str, trl_private: set[str]) -> list[str]:
    """``"line: what"`` for each private TRL contact in ``source``: a private TRL name as
    an attribute, a private TRL method defined in a class (an override), ``MethodType``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in trl_private:
            out.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ClassDef):
            out += [f"{f.lineno}: def {f.name}" for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name in trl_private]
        if (isinstance(node, ast.Attribute) and node.attr == "MethodType") or (
                isinstance(node, ast.alias) and node.name.endswith("MethodType")):
            out.append(f"{getattr(node, 'lineno', '?')}: MethodType")
    return out


def test_every_listed_contact_exists_in_the_installed_trl():
    from exchange.libraries.trl.contact import broken_contacts

    assert broken_contacts() == []


def test_the_contact_module_lists_every_private_name_it_uses():
    from exchange.libraries.trl.contact import ATTRIBUTES, METHODS

    used = {line.split(".", 1)[1] for line in private_contacts(CONTACT.read_text(), _trl_private_names())
            if ": ." in line}
    assert used <= set(METHODS) | set(ATTRIBUTES), sorted(used - set(METHODS) - set(ATTRIBUTES))
    assert {"_compute_loss", "_prepare_inputs", "_metrics", "_step"} <= used  # the walk sees them


def test_no_module_outside_contact_touches_a_private_trl_name():
    trl_private = _trl_private_names()
    files = [p for p in sorted((ROOT / "exchange").rglob("*.py")) + sorted((ROOT / "experiments").rglob("*.py"))
             if p != CONTACT]
    assert len(files) > 100  # the walk sees the package
    found = [f"{p.relative_to(ROOT)}:{hit}" for p in files for hit in private_contacts(p.read_text(), trl_private)]
    assert found == [], found


def test_the_scan_finds_each_kind_of_contact():
    """The scan can fail: the three contacts the TRL integration used to make itself."""
    source = (
        "import types\n"
        "class T(GRPOTrainer):\n"
        "    def _prepare_inputs(self, batch):\n"
        "        return self._buffered_inputs\n"
        "def patch(trainer, model, f):\n"
        "    trainer._metrics['train']['x'].append(1.0)\n"
        "    model.forward = types.MethodType(f, model)\n"
    )
    hits = private_contacts(source, _trl_private_names())
    assert hits == ["3: def _prepare_inputs", "4: ._buffered_inputs", "6: ._metrics", "7: MethodType"] or sorted(
        hits) == sorted(["3: def _prepare_inputs", "4: ._buffered_inputs", "6: ._metrics", "7: MethodType"]), hits


def test_a_missing_contact_is_named(monkeypatch):
    from exchange.libraries.trl import contact
    from exchange.libraries.versions import LibraryError

    monkeypatch.setitem(contact.METHODS, "_no_such_method", ("self",))
    monkeypatch.setattr(contact, "ATTRIBUTES", contact.ATTRIBUTES + ("_no_such_attribute",))
    with pytest.raises(LibraryError, match="GRPOTrainer._no_such_method is gone; GRPOTrainer no longer sets "
                                           "self._no_such_attribute"):
        contact.require_contacts()


def test_scoring_is_memoised_per_inputs_and_arithmetic(monkeypatch):
    """``score`` runs TRL's ``_generate_and_score_completions`` once per inputs and
    arithmetic: the same completions and rewards again are a hit with TRL's same output;
    other rewards, another config, the float64 twin's dtype rewriting (its own
    arithmetic) or each directed run of the float64 floor run TRL again."""
    import torch

    from exchange.checker.twin import float64_twin
    from exchange.libraries.trl import contact
    from exchange.libraries.trl.memo import ScoreMemo
    from exchange.libraries.trl.options import grpo_config

    monkeypatch.setattr(contact, "_SCORES", ScoreMemo(16))
    runs = []
    original = contact._score
    monkeypatch.setattr(contact, "_score", lambda *a: runs.append(1) or original(*a))
    _, config = grpo_config("trl:grpo", "grpo", None)
    _, other = grpo_config("trl:grpo", "grpo", None)
    ids, rewards = [[1, 2, 9], [1, 3], [2, 9]], torch.tensor([[1.0], [0.0], [0.5]], dtype=torch.float64)

    def scored(cfg=config, r=rewards):
        return contact.score(contact.shell(cfg, 3, 9, -1), ids, r)

    first = scored()
    again = scored()
    assert len(runs) == 1 and again is not first and again.keys() == first.keys()
    assert torch.equal(again["advantages"], first["advantages"])
    scored(r=rewards.flip(0))
    scored(cfg=other)
    assert len(runs) == 3
    float64_twin(lambda lp, rollout: scored())(None, None)  # the twin's arithmetic: its own entry
    assert len(runs) == 4
    # the float64 floor's directed twins keep the twin's dtypes but round every result up or
    # down by one or two roundings: each is its own arithmetic. Integer rewards are exact, so
    # the directed runs leave the key's rewards as they are (they once read the twin's entry)
    from exchange.checker.rounding import DIRECTIONS, ROUNDINGS_STEP, directed_twin

    exact_rewards = torch.tensor([[1.0], [0.0], [2.0]], dtype=torch.float64)
    float64_twin(lambda lp, rollout: scored(r=exact_rewards))(None, None)
    assert len(runs) == 5
    for step in ROUNDINGS_STEP:
        for direction in DIRECTIONS:
            directed_twin(lambda lp, rollout: scored(r=exact_rewards), direction * step)(None, None)
    assert len(runs) == 5 + len(DIRECTIONS) * len(ROUNDINGS_STEP)
    float64_twin(lambda lp, rollout: scored(r=exact_rewards))(None, None)  # the twin still reads its own
    assert len(runs) == 5 + len(DIRECTIONS) * len(ROUNDINGS_STEP)


# The shell's early exits (contact.shell_loss, contact._score): TRL's metric bookkeeping
# after its outputs are final is skipped. Each setting reaches a different branch of
# _compute_loss or of the scoring (KL, sequence level, clip-higher, cispo, sapo, luspo,
# vespo, entropy mask, truncation, vLLM's correction, off-policy mask, micro-batches).
EARLY_EXIT_SETTINGS = [
    ("grpo", {"beta": 0.04}), ("grpo", {"importance_sampling_level": "sequence"}),
    ("dapo", {"epsilon_high": 0.28, "mask_truncated_completions": True}), ("bnpo", {"top_entropy_quantile": 0.5}),
    ("dr_grpo", {"scale_rewards": "none", "gradient_accumulation_steps": 2}), ("cispo", {"epsilon_high": 5.0}),
    ("sapo", {}), ("luspo", {"importance_sampling_level": "sequence"}), ("vespo", {"use_vllm": True}),
    ("bnpo", {"use_vllm": True, "vllm_importance_sampling_mode": "sequence_mask", "off_policy_mask_threshold": 0.1}),
    ("grpo", {"scale_rewards": "batch", "steps_per_generation": 2, "gradient_accumulation_steps": 1}),
]


@pytest.mark.parametrize("loss_type, params", EARLY_EXIT_SETTINGS)
def test_the_shells_early_exits_give_trls_full_outputs(monkeypatch, loss_type, params):
    """The loss and its coefficients with the early exits equal, bit for bit, those of
    TRL's calls run to their end (its metrics and logs included)."""
    import dataclasses

    import torch

    from exchange import token_coefficients
    from exchange.checker.cases import Case, GroupConfig, build
    from exchange.libraries import resolve
    from exchange.libraries.trl import contact
    from exchange.libraries.trl.memo import ScoreMemo

    case = Case(groups=(GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (4,), (2, 2)), (1.0, 0.0, 0.5, 0.25)),
                        GroupConfig(((1, 1), (2, 0, 2, 1), (3,), (1, 4, 4)), (0.0, 1.0, 0.3, 0.9))), off_policy=True)
    rollout = build(case)
    rollout = dataclasses.replace(rollout, truncated=torch.tensor([False, True] + [False] * (rollout.n - 2)))
    if params.get("use_vllm"):
        rollout = dataclasses.replace(rollout, sampling_logprobs=rollout.old_logprobs - 0.01)
    fn = resolve(f"trl:{loss_type}", {k: str(v) for k, v in params.items()})

    def run():
        monkeypatch.setattr(contact, "_SCORES", ScoreMemo(8))
        lp = rollout.logprobs.clone().requires_grad_(True)
        return fn(lp, rollout).detach(), token_coefficients(fn, rollout.logprobs, rollout)

    fast = run()
    ended = []
    original = contact._locals_at
    monkeypatch.setattr(contact, "_locals_at", lambda *a: ended.append(1) or original(*a))
    run()
    assert len(ended) >= 2  # both exits were taken
    monkeypatch.setattr(contact, "_LOSS_ACCELERATOR", contact._Accelerator())  # TRL's calls to their end
    monkeypatch.setattr(contact, "_ScoredNames", list)
    full = run()
    assert torch.equal(fast[0], full[0]) and torch.equal(fast[1], full[1])


def test_trls_outputs_are_final_where_the_shell_ends_its_calls():
    """On TRL's source: in ``_compute_loss`` nothing assigns ``loss`` after ``def
    global_masked_mean`` and ``accelerator.reduce`` is called only there and in the entropy
    bonus (off in the shell); in ``_generate_and_score_completions`` the outputs the shell
    reads are assigned before ``reward_func_names`` is first read."""
    import ast
    import inspect
    import textwrap

    from trl import GRPOTrainer

    from exchange.libraries.trl.contact import SCORED_KEYS

    def tree(function):
        return ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]

    def assigned(node, name):
        return [n.lineno for n in ast.walk(node) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                for leaf in ast.walk(t) if isinstance(leaf, ast.Name) and leaf.id == name]

    loss = tree(GRPOTrainer._compute_loss)
    metrics = next(n for n in loss.body if isinstance(n, ast.FunctionDef) and n.name == "global_masked_mean")
    assert max(assigned(loss, "loss")) < metrics.lineno
    bonus = next(n for n in loss.body if isinstance(n, ast.If) and "_entropy_bonus_enabled" in ast.unparse(n.test))
    inside = {id(n) for part in (metrics, bonus) for n in ast.walk(part)}
    reduces = [n for n in ast.walk(loss) if isinstance(n, ast.Attribute) and n.attr == "reduce"]
    assert reduces and all(id(n) in inside for n in reduces)

    scoring = tree(GRPOTrainer._generate_and_score_completions)
    first_read = min(n.lineno for n in ast.walk(scoring)
                     if isinstance(n, ast.Attribute) and n.attr == "reward_func_names")
    for name in SCORED_KEYS.values():
        assert assigned(scoring, name) and max(assigned(scoring, name)) < first_read, name
