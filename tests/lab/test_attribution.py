"""The attribution instrument against the real path, on a small run with fixed data.

Two arms (GRPO and GRPO+surgical) train from one warm start on the same rollouts in
the same order, so the only difference between them is the shared-event residual.
(1) The whole steps' first-order sum reproduces the probe's actual change (the path
integral); (2) the shared part sent through a shadow Adam predicts the measured
baseline-minus-surgical difference. A wrong sign or a plain linearisation fails (2).
"""

from __future__ import annotations

import copy

import pytest
import torch

from exchange.core.coefficients import token_coefficients
from exchange.core.events import events
from exchange.errors import InvalidArgument
from exchange.lab.attribution import AdamTangent, ProbeAttribution
from exchange.lab.drift import make_probes, probe_scalars
from exchange.lab.generation import sample_group_rollout
from exchange.lab.instruments import zero_credit_gradient
from exchange.lab.sft import sft_warm_start
from exchange.lab.tasks import VOCAB_SIZE, GrammarLM, get_task
from exchange.models import TinyLM, TinyLMConfig, response_logprobs
from exchange.objectives import resolve

STEPS = 8


@pytest.fixture(scope="module")
def setting():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    task = get_task("countdown", max_filler=3, style_p=0.5)
    model = GrammarLM(TinyLM(TinyLMConfig(VOCAB_SIZE, 32, 16, 2, 1, seed=0)), task)
    gen = torch.Generator().manual_seed(1)
    sft_warm_start(model, task, 150, 32, 1e-2, gen)
    rollouts = [sample_group_rollout(model, task, task.sample_prompts(4, gen), 8, 9, 1.0, gen) for _ in range(STEPS)]
    probes = make_probes(task, 8, gen)
    return model, rollouts, probes


def _train(model, rollouts, probes, spec, lr=1e-3, attribute=True, mode="shadow"):
    model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = resolve(spec)
    att = ProbeAttribution(model, opt, probe_scalars(probes), mode=mode) if attribute else None
    params = list(model.parameters())
    for r in rollouts:
        ev = events(r)
        shared = ev.shared[ev.ids.clamp(min=0)] & r.mask
        lp = response_logprobs(model, r).double()
        kappa = token_coefficients(loss_fn, lp.detach(), r)
        g_shared = zero_credit_gradient(params, lp, kappa, shared)
        opt.zero_grad()
        loss_fn(lp, r).backward()
        if att is not None:
            before = att.before_step()
            opt.step()
            att.after_step(before, [-g for g in g_shared])
        else:
            opt.step()
    return model, att


def test_path_and_shared_part_match_the_real_runs(setting):
    model, rollouts, probes = setting
    f = probe_scalars(probes)
    base, att = _train(model, rollouts, probes, "grpo")
    cut, _ = _train(model, rollouts, probes, "grpo+surgical", attribute=False)
    got = att.take()
    with torch.no_grad():
        for name, fn in f.items():
            actual = float(fn(base) - fn(model))
            # (1) the path integral reproduces the probe's change (trapezoid rule; measured 0.01% and 3%)
            assert got[f"attr/{name}/path"] == pytest.approx(actual, rel=0.05, abs=1e-6)
            # (2) the shared part predicts baseline - surgical on the same data order
            measured = float(fn(base) - fn(cut))
            assert abs(measured) > 1e-5, "the residual must move the probe for the test to mean anything"
            assert got[f"attr/{name}/shared"] == pytest.approx(measured, rel=0.25)


def test_adam_derivative_is_not_a_valid_attribution(setting):
    """Why the instrument uses the shadow optimiser: Adam's update is close to sign(g) on
    coordinates the shared part dominates, so its derivative there is ~0 and the
    linearised ('tangent') prediction misses the removal, here with the wrong sign."""
    model, rollouts, probes = setting
    f = probe_scalars(probes)["drift/style_logp"]
    base, att = _train(model, rollouts, probes, "grpo", lr=3e-3, mode="tangent")
    cut, _ = _train(model, rollouts, probes, "grpo+surgical", lr=3e-3, attribute=False)
    with torch.no_grad():
        measured = float(f(base) - f(cut))
    assert att.take()["attr/drift/style_logp/shared"] * measured < 0


def test_tangent_is_the_derivative_of_adam():
    """Finite difference of one real Adam recursion against the tangent, three steps."""
    torch.manual_seed(0)
    p0 = torch.randn(5, dtype=torch.float64)
    grads = [torch.randn(5, dtype=torch.float64) for _ in range(3)]
    d = [torch.randn(5, dtype=torch.float64) for _ in range(3)]

    def run(h):
        p = torch.nn.Parameter(p0.clone())
        opt = torch.optim.Adam([p], lr=0.1)
        tan = AdamTangent(opt, mode="tangent")
        outs = []
        for g, dd in zip(grads, d):
            before = p.detach().clone()
            p.grad = g + h * dd
            opt.step()
            outs.append((p.detach() - before, tan.step([dd])[0]))
        return outs

    h = 1e-6
    plus, minus, zero = run(h), run(-h), run(0.0)
    for (sp, _), (sm, _), (_, tan) in zip(plus, minus, zero):
        fd = (sp - sm) / (2 * h)
        assert torch.allclose(tan, fd, rtol=1e-4, atol=1e-9)


def test_unsupported_optimizer_is_refused():
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(InvalidArgument, match="Adam"):
        AdamTangent(torch.optim.RMSprop([p]))
    with pytest.raises(InvalidArgument, match="weight_decay"):
        AdamTangent(torch.optim.Adam([p], weight_decay=0.1))


def test_at_sampled_contexts_the_shift_predicts_the_gap_between_the_runs(setting):
    """Issue 42, P3 at sampled contexts: the shared part's cumulative shift through the
    optimiser (AdamTangent.shift), dotted with the gradient of the entropy at the
    weak-credit positions of a rollout, predicts baseline - surgical entropy there, as
    ProbeAttribution.at_contexts logs it per step. A flipped shift has the wrong sign."""
    from exchange.lab.instruments import weak_credit_entropy

    model, rollouts, probes = setting
    base, att = _train(model, rollouts, probes, "grpo")
    cut, _ = _train(model, rollouts, probes, "grpo+surgical", attribute=False)
    for contexts in (rollouts[0], rollouts[-1]):
        f = lambda m: weak_credit_entropy(m, contexts)  # noqa: E731
        with torch.no_grad():
            measured = float(f(base) - f(cut))
        assert abs(measured) > 1e-5, "the residual must move the entropy for the test to mean anything"
        predicted = att.at_contexts(f)
        assert predicted == pytest.approx(measured, rel=0.25)
        att.tangent.shift = [-x for x in att.tangent.shift]  # planted: the shift's sign flipped
        assert att.at_contexts(f) * measured < 0
        att.tangent.shift = [-x for x in att.tangent.shift]
    # the shift survives a checkpoint, and a KL rescale scales only the rollout's share of it
    state = att.tangent.state_dict()
    fresh = AdamTangent(att.tangent.opt)
    fresh.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(fresh.shift, att.tangent.shift))
    start = [x.clone() for x in att.tangent.shift]
    shared_since = att.peek()
    att.tangent.shift = [2 * x for x in start]  # as if this rollout's steps had moved it by `start` again
    params = list(base.parameters())
    att.rescale(0.5, shared_since, [p.detach().clone() for p in params], [p.detach().clone() for p in params])
    assert all(torch.allclose(x, 1.5 * s) for x, s in zip(att.tangent.shift, start))
