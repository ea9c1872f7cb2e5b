"""``exchange.inspect``: exact, no fuzzing; agrees with the fuzzing checker."""

import json
import re
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings

import exchange
from exchange import Rollout, check, shared_residual, token_coefficients
from exchange.checker import strategies as xst
from exchange.checker.cases import build
from exchange.core.events import SharedResidual, event_residuals_of, events, shared_residual_parts
from exchange.checker.batch_analysis import inspect
from exchange.checker.inspection import CANCEL_TOL
from exchange.checker.probes import run_probes
from exchange.core.coefficients import Engine
from exchange.core.batch_io import load_batch, save_batch
from exchange.objectives import get

# The spread of parallel columns as (E)'s residual computes it, sqrt(1 - cos^2): round-off
# of ~sqrt(eps) (tests/checker/test_properties.py, the batched spread against the plain one).
SQRT_EPS_SPREAD = 1e-7

RTOL_CANCEL = 1e-8


def test_public_name():
    import importlib.util

    assert exchange.inspect is inspect
    assert inspect.__module__ == "exchange.checker.batch_analysis"
    assert importlib.util.find_spec("exchange.checker.inspect") is None  # no module shadowing the stdlib's


def test_the_inspection_carries_the_one_shared_residual():
    r = _real_batch(n=16, g=4, t=32, shared=5)
    fn = get("grpo").bind()
    found = inspect(fn, r)
    kappa = token_coefficients(fn, r.logprobs, r)
    assert found.shared == shared_residual_parts(kappa, r)  # the parts, from the one definition
    assert found.shared_residual == found.shared.value == shared_residual(kappa, r)
    assert found.n_shared == found.shared.events == 4 * 5
    assert found.shared.abs_K == pytest.approx(float(found.shared_K.abs().sum()), rel=1e-12)
    assert found.shared.mass == pytest.approx(float(found.shared_mass.sum()), rel=1e-12)
    doc = json.loads(found.to_json())
    assert doc["shared_residual_parts"] == {"abs_K": found.shared.abs_K, "mass": found.shared.mass, "events": 20}
    owner = events(r).group[found.shared_ids]
    for g in found.groups:  # a group's residuals are the same definitions over its shared events
        sel = owner == r.group_index[g.rows[0]]
        assert int(sel.sum()) == g.shared_events == 5
        assert g.shared_residual == pytest.approx(SharedResidual.of(found.shared_K[sel], found.shared_mass[sel]).value,
                                                  rel=1e-12, abs=1e-15)
        # own masses: a tied group's coefficients here are exact zeros (0/0 reads 0)
        worst = event_residuals_of(found.shared_K[sel], found.shared_mass[sel]).max()
        assert g.residual == pytest.approx(float(worst), rel=1e-9)
    assert found.max_residual == max(g.residual for g in found.groups)


_MISMATCH = re.compile(r"K_e=(\S+) with sum\|kappa\|=(\S+) ")


@pytest.mark.parametrize("name, regime", [(n, r) for r in ("on_policy", "off_policy") for n in ("grpo", "dr_grpo", "gspo")])
def test_inspector_agrees_with_the_checker(name, regime):
    fn = get(name).bind()
    report = check(fn, properties=["shared_cancellation"], max_examples=25, seed=0, regimes=(regime,))
    result = report.results[("shared_cancellation", regime)]
    if result.holds:
        # the same configurations the checker fuzzes: every one cancels exactly
        @settings(max_examples=25, database=None, derandomize=True)
        @given(xst.cases(off_policy=regime == "off_policy"))
        def cancels(case):
            r = build(case)
            found = inspect(fn, r)
            assert found.max_residual <= RTOL_CANCEL
            assert found.mechanisms == ()

        cancels()
    else:
        cx = result.counterexample
        found = inspect(fn, cx, cx.logprobs)
        assert found.max_residual > RTOL_CANCEL
        # the report's max residual is the largest seen over every probe and example
        # (docs/reading-a-report.md); the counterexample's own (C) residual is the worst of
        # the events the report lists with their K_e and sum|kappa| (its groups are mixed)
        listed = [abs(float(k)) / float(m) for k, m in (_MISMATCH.search(line).groups() for line in result.mismatches)]
        assert found.max_residual == pytest.approx(max(listed), rel=1e-4)  # the lines print 6 digits
        assert found.max_residual <= result.max_residual * (1 + 1e-9)
        assert len(found.top) == min(len(listed), found.n_shared)
        assert found.top and found.top[0].residual > RTOL_CANCEL
        assert found.mechanisms  # a hint is given
        kappa = token_coefficients(fn, cx.logprobs, cx)
        assert found.shared_residual == pytest.approx(shared_residual(kappa, cx), abs=1e-15)


def test_inspector_reads_each_probe_batch_as_the_checker_does():
    # the probes' batches, where the worst event and the mass-weighted mean can differ
    # (grpo's clip keeps one sign on a shared event: 1.0 against 0.11): inspect reports
    # the checker's number, (C)'s residual, never the aggregate
    seen = 0
    for name in ("grpo", "gspo"):
        fn = get(name).bind()
        for p in run_probes(Engine(fn), "off_policy"):
            ev = p.evaluations.get("shared_cancellation")
            if ev is None:
                continue
            found = inspect(fn, ev.rollout)
            assert found.max_residual == pytest.approx(ev.residual, rel=1e-9, abs=1e-12), (name, p.probe.name)
            assert found.cancels == (ev.residual <= CANCEL_TOL)
            seen += abs(found.max_residual - found.shared_residual) > 0.5
    assert seen  # at least one batch tells the two numbers apart


def test_tied_rewards_rounding_off_are_not_a_break():
    # 0.1 and 0.7 are not binary fractions: float64 group means leave advantages of ~1e-14,
    # one sign per tied group, so every shared event's own mass is round-off (shared
    # residual 1.0); against the mass at mixed rewards (the checker's M_e) they cancel
    tokens = torch.tensor([[5, 6, 1, 0], [5, 6, 2, 3], [5, 6, 7, 7]] * 2)
    r = Rollout(tokens=tokens, mask=tokens > 0, rewards=torch.tensor([0.1] * 3 + [0.7] * 3, dtype=torch.float64),
                group=torch.tensor([0, 0, 0, 1, 1, 1]), old_logprobs=torch.full((6, 4), -1.0, dtype=torch.float64))
    fn = get("grpo").bind()
    assert token_coefficients(fn, r.old_logprobs, r)[:, 0].abs().max() > 0  # the round-off this test is about
    found = inspect(fn, r)
    assert found.shared_residual == pytest.approx(1.0)
    assert found.max_residual < 1e-10 and found.cancels and found.mechanisms == ()
    assert all(g.residual < 1e-10 for g in found.groups) and found.top == ()
    assert check(fn, properties=["shared_cancellation"], max_examples=5, seed=0, regimes=("on_policy",)).holds
    # beside a mixed group that breaks (C) (1/L_i), the tied group still cancels, and the
    # mixed group is judged on its own mass, never on a reward vector it does not have
    mixed = r.with_fields({"rewards": torch.tensor([0.1] * 3 + [1.0, 0.0, 0.0], dtype=torch.float64)})
    found = inspect(fn, mixed)
    kappa = token_coefficients(fn, mixed.old_logprobs, mixed)
    K, mass = kappa[3:, :2].sum(0), kappa[3:, :2].abs().sum(0)  # group 1's shared events: its first two columns
    assert found.max_residual == pytest.approx(float((K.abs() / mass).max()), rel=1e-9) and found.max_residual > 0.1
    assert [g.residual < 1e-10 for g in found.groups] == [True, False]


def test_weight_vectors_and_hints():
    # GRPO on-policy: one common vector alpha_i = A_i / L_i per group, not zero-sum (M3)
    r = Rollout(
        tokens=torch.tensor([[5, 6, 1, 0], [5, 6, 2, 3], [5, 6, 7, 7]]),
        mask=torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool),
        rewards=torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64),
        group=torch.tensor([0, 0, 0]),
        old_logprobs=torch.full((3, 4), -1.0, dtype=torch.float64),
    )
    found = inspect(get("grpo").bind(), r)
    assert found.n_shared == 2 and len(found.groups) == 1
    g = found.groups[0]
    # one common vector: the spread is (E)'s residual (properties.residuals.direction_spread),
    # sqrt(1 - cos^2) of parallel columns, ~sqrt(eps) (2.1e-8 here; 1e-16 before inspect
    # read the checker's definition)
    assert g.shared_events == 2 and g.spread < SQRT_EPS_SPREAD and g.zero_sum > 1e-3
    assert g.weights[0] > 0  # positive on the best reward
    assert "M3" in found.mechanisms
    assert [e.position for e in found.top] and found.top[0].prefix_tail[-1] == found.top[0].token
    # Dr. GRPO (no 1/L_i) cancels
    assert inspect(get("dr_grpo").bind(), r).cancels
    json.loads(found.to_json())
    assert "shared residual" in str(found)


def _real_batch(n=128, g=8, t=4096, shared=64):
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 32000, (n, t), generator=gen)
    tokens[:, :shared] = tokens[::g, :shared].repeat_interleave(g, 0)
    lengths = torch.randint(t // 2, t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None] < lengths[:, None]
    old = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3
    old[:, :shared] = old[::g, :shared].repeat_interleave(g, 0)
    cur = (old + 0.1 * torch.randn(n, t, generator=gen, dtype=torch.float64)).clamp(max=0)
    cur[:, :shared] = cur[::g, :shared].repeat_interleave(g, 0)
    z = torch.zeros((), dtype=torch.float64)
    return Rollout(tokens=torch.where(mask, tokens, 0), mask=mask,
                   rewards=torch.randint(0, 2, (n,), generator=gen).double(), group=torch.arange(n) // g,
                   old_logprobs=torch.where(mask, old, z), logprobs=torch.where(mask, cur, z))


def test_real_size_batch():
    r = _real_batch()
    found = inspect(get("cispo").bind(), r)
    assert found.n_responses == 128 and found.n_groups == 16 and found.n_shared == 16 * 64
    assert found.shared_residual < 1e-12 and found.cancels
    found = inspect(get("grpo").bind(), r)
    assert found.shared_residual > 1e-3 and {"M2", "M3"} & set(found.mechanisms)
    assert all(g.shared_events == 64 for g in found.groups)


@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_batch_round_trip_and_cli(tmp_path, suffix):
    pytest.importorskip("safetensors") if suffix == ".safetensors" else None
    r = _real_batch(n=8, g=4, t=16, shared=3)
    path = save_batch(r, tmp_path / f"batch{suffix}")
    back = load_batch(path)
    for name in ("tokens", "mask", "rewards", "group", "old_logprobs", "logprobs"):
        assert torch.equal(getattr(back, name), getattr(r, name))
    out = subprocess.run([sys.executable, "-m", "exchange", "inspect", str(path), "grpo", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert doc["n_shared"] == 2 * 3 and doc["shared_residual"] > 0
    out = subprocess.run([sys.executable, "-m", "exchange", "inspect", str(path), "cispo"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "shared events cancel" in out.stdout, out.stderr


@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
def test_bad_batch_file(tmp_path):
    torch.save({"tokens": torch.zeros(2, 2)}, tmp_path / "b.pt")
    out = subprocess.run([sys.executable, "-m", "exchange", "inspect", str(tmp_path / "b.pt"), "grpo"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "missing field" in out.stderr


def test_a_multi_turn_group_counts_its_shared_events_not_its_prefix_columns():
    """A mask with holes (tool tokens, issue 41): the planted batch's group 0 has a common
    prefix of 5 columns, two of them tool output, which are no events: 3 shared events
    (core's definition, ``events(rollout).shared``), and its weight vector reads those 3."""
    from tests.core.multi_turn import multi_turn_batch

    r = multi_turn_batch()
    found = inspect(get("dr_grpo").bind(), r)
    owner = events(r).group[found.shared_ids]
    assert [g.shared_events for g in found.groups] == [3, 2]
    assert [g.shared_events for g in found.groups] == [int((owner == k).sum()) for k in range(2)]
    assert sum(g.shared_events for g in found.groups) == found.n_shared == found.shared.events
    for g in found.groups:
        sel = owner == r.group_index[g.rows[0]]
        assert g.shared_residual == SharedResidual.of(found.shared_K[sel], found.shared_mass[sel]).value
        assert g.spread < SQRT_EPS_SPREAD  # dr_grpo: one common vector over the policy's columns (1.5e-8)
