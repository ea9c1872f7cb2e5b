"""Issue 42's non-private probe (S also a sampled filler token) and its dose arms (a
fraction of the shared residual kept), each checked where it could go wrong."""

import math

import pytest
import torch

from exchange.core.coefficients import token_coefficients
from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.lab.config import parse_experiment
from exchange.lab.dose import dosed
from exchange.lab.generation import sample_group_rollout
from exchange.lab.tasks import (
    EOS,
    FILLER,
    ROLE_FILLER,
    ROLE_STYLE,
    STYLE,
    VOCAB_SIZE,
    GrammarLM,
    get_task,
    token_roles,
)
from exchange.objectives import resolve
from exchange.objectives.surgical import shared_correction


def _task(**kw):
    return get_task("arithmetic", 3, 0.5, long_wrong=kw.get("long_wrong", False), template_in_prompt=True,
                    forced_style=True, probe_as_filler=kw.get("probe", True))


def _uniform(task):
    class Uniform(torch.nn.Module):
        def forward(self, ids):
            return torch.zeros(ids.shape + (VOCAB_SIZE,))

    return GrammarLM(Uniform(), task)


def test_s_is_a_sampled_filler_after_the_answer_and_forced_at_its_head_slot():
    task = _task()
    lm = _uniform(task)
    r = sample_group_rollout(lm, task, task.sample_prompts(64, torch.Generator().manual_seed(0)), 4,
                             task.max_response_len, 1.0, torch.Generator().manual_seed(1))
    assert bool((r.tokens[:, 0] == STYLE).all())  # the probe slot: forced, zero-credit by construction
    late = (r.tokens[:, 1:] == STYLE) & r.mask[:, 1:]
    assert int(late.sum()) > 20  # S is sampled elsewhere: its output row gets non-residual gradient
    roles = token_roles(r.tokens)
    assert bool((roles[:, 0] == ROLE_STYLE).all()) and bool((roles[:, 1:][late] == ROLE_FILLER).all())
    for row, m in zip(r.tokens.tolist(), r.mask.tolist()):  # the filler cap counts S after its head slot
        body = [v for v, k in zip(row[1:], m[1:]) if k]
        assert sum(v in FILLER + (STYLE,) for v in body) <= task.max_filler, row
    # the private design for contrast: S never appears after its slot
    old = _task(probe=False)
    r0 = sample_group_rollout(_uniform(old), old, old.sample_prompts(64, torch.Generator().manual_seed(0)), 4,
                              old.max_response_len, 1.0, torch.Generator().manual_seed(1))
    assert not bool(((r0.tokens[:, 1:] == STYLE) & r0.mask[:, 1:]).any())


def test_probe_as_filler_needs_a_forced_slot_and_filler():
    with pytest.raises(InvalidArgument, match="probe_as_filler=true needs task.forced_style=true"):
        get_task("arithmetic", 3, 0.5, template_in_prompt=True, probe_as_filler=True)
    with pytest.raises(InvalidArgument, match="max_filler > 0"):
        get_task("arithmetic", 0, 0.5, template_in_prompt=True, forced_style=True, probe_as_filler=True)


def test_warm_start_data_use_s_as_filler_and_the_probes_do_not():
    task = _task()
    prompts = task.sample_prompts(200, torch.Generator().manual_seed(0))
    ref = task.reference(prompts, torch.Generator().manual_seed(1), n_filler=torch.full((200,), 3))
    assert bool((ref[:, 2:] == STYLE).any())
    plain = task.reference(prompts, torch.Generator().manual_seed(1), n_filler=torch.full((200,), 3),
                           plain_filler=True)
    assert not bool((plain[:, 1:] == STYLE).any())


def _shared_rollout():
    """Two groups of 3; every response opens with S (a shared event), lengths differ."""
    t = torch.tensor([[STYLE, 11, 12, EOS, 0], [STYLE, 11, 13, 6, EOS], [STYLE, 12, 12, 6, EOS],
                      [STYLE, 13, 11, EOS, 0], [STYLE, 13, 12, 7, EOS], [STYLE, 14, 12, EOS, 0]])
    mask = t != 0
    mask[:, 0] = True
    n = t.shape[0]
    lp = torch.log(torch.full(t.shape, 0.3, dtype=torch.float64))
    return Rollout(tokens=t, mask=mask, rewards=torch.tensor([1.0, 0, 0, 1, 0, 1], dtype=torch.float64),
                   group=torch.tensor([0, 0, 0, 1, 1, 1]), old_logprobs=lp, logprobs=lp,
                   prompt_tokens=torch.full((n, 3), 2), prompt_mask=torch.ones(n, 3, dtype=torch.bool))


@pytest.mark.parametrize("keep", [0.01, 0.1, 0.5])
def test_dose_keeps_exactly_a_fraction_of_the_shared_residual(keep):
    ro = _shared_rollout()
    base = resolve("grpo")
    k1 = token_coefficients(base, ro.logprobs, ro)
    c = shared_correction(k1, ro)
    assert float(c.abs().sum()) > 1e-6  # the design has a residual to dose
    kf = token_coefficients(dosed(base, keep), ro.logprobs, ro)
    k0 = token_coefficients(resolve("grpo+surgical"), ro.logprobs, ro)
    assert torch.allclose(kf, keep * k1 + (1 - keep) * k0, atol=1e-12)  # linear between surgical and baseline
    assert torch.allclose(kf - k1, -(1 - keep) * c, atol=1e-12)
    assert float(dosed(base, keep)(ro.logprobs, ro)) == pytest.approx(float(base(ro.logprobs, ro)))


@pytest.mark.parametrize("keep", [0, 1, -0.1, None, math.nan])
def test_dose_refuses_keep_outside_the_open_interval(keep):
    with pytest.raises(InvalidArgument, match="keep="):
        dosed(resolve("grpo"), keep)


ARMS = {"name": "d", "arms": [{"name": "b", "objective": "grpo", "role": "baseline"},
                              {"name": "s", "objective": "grpo+surgical", "role": "surgical"},
                              {"name": "f1", "objective": "grpo", "role": "dose", "keep": 0.01},
                              {"name": "f2", "objective": "grpo", "role": "dose", "keep": 0.1}]}


def test_config_accepts_dose_arms_and_names_each_mistake():
    cfg = parse_experiment(ARMS)
    assert [a.keep for a in cfg.arms if a.role == "dose"] == [0.01, 0.1]
    bad = {**ARMS, "arms": ARMS["arms"][:1] + ARMS["arms"][2:]}
    with pytest.raises(InvalidArgument, match="surgical"):
        parse_experiment(bad)
    for arm, msg in (({"name": "x", "objective": "dr_grpo", "role": "dose", "keep": 0.1}, "baseline's objective"),
                     ({"name": "x", "objective": "grpo", "role": "dose", "keep": 0.01}, "repeat a keep")):
        with pytest.raises(InvalidArgument, match=msg):
            parse_experiment({**ARMS, "arms": ARMS["arms"] + [arm]})
    with pytest.raises(InvalidArgument, match="keep is for"):
        parse_experiment({**ARMS, "arms": [{**ARMS["arms"][0], "keep": 0.1}] + ARMS["arms"][1:]})


@pytest.mark.parametrize("h, want", [(2.0, -1), (0.5, +1)])
def test_p3_orientation_is_the_sign_of_minus_logp_plus_entropy_per_context(h, want):
    """Issue 42: raising S (K_S > 0) lowers its context's entropy only where
    p(S) > exp(-H). p(S) = 0.3 here, so the old rule (flip when p > 1/2) says +1 for both;
    with H = 2 (p > e^-2) the entropy falls, with H = 0.5 (p < e^-0.5) it rises."""
    from exchange.core.events import events
    from exchange.lab.instruments import shared_coefficients

    ro = _shared_rollout()
    ro = ro.replace(entropy=torch.where(ro.mask, torch.full(ro.tokens.shape, h, dtype=torch.float64), 0.0))
    kappa = token_coefficients(resolve("grpo"), ro.logprobs, ro)
    out = shared_coefficients(kappa, ro, events(ro))
    k_s = out["tax/style_K_signed"]
    assert k_s is not None and abs(k_s) > 1e-9
    got = out["tax/entropy_K_signed"]
    assert got is not None and (1 if got > 0 else -1) == want * (1 if k_s > 0 else -1)
    assert shared_coefficients(kappa, ro.replace(entropy=None), events(ro))["tax/entropy_K_signed"] is None
