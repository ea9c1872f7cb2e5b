"""Device-correctness: every tensor the package creates follows its inputs' device.

On a GPU a tensor made without ``device=`` lands on the CPU and the first operation that
mixes it with the CUDA batch raises (``index_add(): ... expected to be in the same
device``). A CPU run cannot see that, so the ``guard`` arm runs the same code on CPU
inputs under ``with torch.device("meta"):``: every factory call without an explicit
device then lands on ``meta`` and mixing it with the CPU inputs raises just as CUDA would
(stricter: a 0-dim tensor on the wrong device also raises, which CUDA forgives). The
``cuda`` arm (marker ``cuda``) runs the same tests on a real GPU and skips elsewhere.

Covered: issue 42's dose arms (both families) and the lab grammar's masks; every catalog objective, every restoring transformation on every objective it
applies to (with the regulariser and ``mask_truncated``), TRL's per-token factors on every
factored family and TRL's normalize_then_sum advantages, the surgical transform on every
family, precomputed advantages, the
events and shared residual the TRL callback logs, TRL's micro-batch rollout and group
shuffle, and every verl ``exchange_*`` policy loss (full, partial and 1-row micro-batches).
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch

from exchange.checker.cases import Case, GroupConfig, build
from exchange.core.rollout import Rollout
from exchange.objectives import TRANSFORMS, VARIANTS, get, names, supports

CASE = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (1, 4), (1, 2, 3)), (1.0, 0.0, 0.5, 0.25)),
        GroupConfig(((1, 1), (1, 0, 2, 1), (1, 1, 2)), (0.0, 1.0, 1.0)),
    ),
    off_policy=True,
    seed=3,
)


@pytest.fixture(params=["guard", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request):
    """``(target device, context)``: where the inputs live and what catches strays."""
    if request.param == "cuda":  # skipped without CUDA by the marker (tests/conftest.py)
        return torch.device("cuda"), contextlib.nullcontext
    return torch.device("cpu"), lambda: torch.device("meta")


def _on(rollout: Rollout, dev: torch.device) -> Rollout:
    """``rollout`` with every tensor on ``dev`` (validated again there)."""
    fields = {f.name: getattr(rollout, f.name) for f in dataclasses.fields(rollout) if f.init}
    return Rollout(**{k: None if v is None else v.to(dev) for k, v in fields.items()})


def _rollout(dev, context, **extra) -> Rollout:
    r = build(CASE).to(torch.float64)
    truncated = r.lengths >= int(r.lengths.max())
    ref = r.old_logprobs - 0.1 * r.mask.to(torch.float64)
    r = r.replace(ref_logprobs=ref, truncated=truncated, **extra)
    with context():  # validation itself creates tensors (right-padding check, groups)
        return _on(r, dev)


def _specs() -> list[str]:
    out = list(names()) + list(VARIANTS)
    for base in names():
        for t in TRANSFORMS:
            if supports(get(base), t) and f"{base}+{t}" not in out:
                out.append(f"{base}+{t}")
    return out


def _loss_and_grad(fn, logprobs):
    lp = logprobs.detach().clone().requires_grad_(True)
    loss = fn(lp)
    (grad,) = torch.autograd.grad(loss, lp, allow_unused=True)
    return loss, grad


@pytest.mark.parametrize("spec", _specs())
def test_objective_and_transforms_follow_the_device(spec, device):
    dev, context = device
    obj = get(spec)
    params = {"beta": 0.04} if "beta" in obj.defaults else {}
    if "mask_truncated" in obj.defaults:
        params["mask_truncated"] = True
    r = _rollout(dev, context)
    fn = obj.bind(**params)
    reg = obj.bind_regularizer(**params)
    with context():
        loss, grad = _loss_and_grad(lambda lp: fn(lp, r) + (0 if reg is None else reg(lp, r)), r.logprobs)
    assert loss.device == dev and (grad is None or grad.device == dev)
    assert torch.isfinite(loss.detach()).all()


_SAMPLER_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@pytest.mark.parametrize("spec", [s for s in names() if get(s).factors is not None])
def test_trls_token_factors_follow_the_device(spec, device):
    """TRL's per-token factors (high-entropy mask, off-policy mask against the sampler's
    log-probs, one of them NaN, every vLLM IS mode, delta where the family has it) on the
    inputs' device, truncated rows dropped first."""
    dev, context = device
    r0 = build(CASE).to(torch.float64)
    sampling = r0.sampling_logprobs.clone()
    sampling[0, 1] = float("nan")  # a token vLLM could not score
    r = _rollout(dev, context, sampling_logprobs=sampling)
    obj = get(spec)
    for mode in _SAMPLER_MODES:
        params = {"top_entropy_quantile": 0.5, "off_policy_mask": 0.0, "off_policy_mask_sampler": True,
                  "sampler_is": mode, "sampler_is_min": 0.5, "mask_truncated": True}
        if "delta" in obj.defaults:
            params["delta"] = 1.3
        fn = obj.bind(**params)
        with context():
            loss, grad = _loss_and_grad(lambda lp: fn(lp, r), r.logprobs)
        assert loss.device == dev and grad is not None and grad.device == dev
        assert torch.isfinite(grad).all(), mode


def test_trls_normalize_then_sum_follows_the_device(device):
    pytest.importorskip("trl")
    from exchange.libraries.trl.trainer import normalize_then_sum

    dev, context = device
    per_func = torch.tensor([[1.0, 2.0], [0.0, float("nan")], [float("nan")] * 2, [3.0, 1.0]], device=dev)
    with context():
        adv = normalize_then_sum(per_func, torch.tensor([1.0, 0.5], device=dev), 2)
    assert adv.device == dev and torch.isfinite(adv).all() and float(adv[2]) == 0.0


@pytest.mark.parametrize("spec", names())
def test_surgical_transform_follows_the_device(spec, device):
    """``<spec>+surgical`` (the pathway arm the harnesses train): the event bookkeeping of
    its correction runs on the inputs' device."""
    from exchange.objectives import resolve

    dev, context = device
    r = _rollout(dev, context)
    fn = resolve(f"{spec}+surgical")
    with context():
        loss, grad = _loss_and_grad(lambda lp: fn(lp, r), r.logprobs)
    assert loss.device == dev and grad is not None and grad.device == dev
    assert torch.isfinite(grad).all()


@pytest.mark.parametrize("spec", [s for s in _specs() if get(s).factors is not None or s in ("clip_cov", "kl_cov")])
def test_precomputed_advantages_follow_the_device(spec, device):
    dev, context = device
    r0 = build(CASE).to(torch.float64)
    r = _rollout(dev, context, advantages=torch.linspace(-1.0, 1.0, r0.n, dtype=torch.float64))
    fn = get(spec).bind()
    with context():
        loss, _ = _loss_and_grad(lambda lp: fn(lp, r), r.logprobs)
    assert loss.device == dev


def test_group_helpers_events_and_shared_residual_follow_the_device(device):
    from exchange.core.coefficients import token_coefficients
    from exchange.core.events import events, shared_residual_parts
    from exchange.objectives import resolve

    dev, context = device
    r = _rollout(dev, context)
    x = r.rewards
    with context():
        for out in (r.group_sum(x), r.group_mean(x), r.group_std(x), r.group_max(x), r.group_min(x)):
            assert out.device == dev
        assert r.select([0, 1]).tokens.device == dev
        ev = events(r)
        assert ev.ids.device == dev
        kappa = token_coefficients(resolve("grpo"), r.logprobs, r)
        assert kappa.device == dev
        parts = shared_residual_parts(kappa, r)
        assert parts.events > 0


def test_checkers_round_off_judgements_follow_the_device(device):
    # what the (C)/(N) judgements still build: tied groups and the reference rewards
    # (the float64 twin and its comparison replace the old noise floors)
    from exchange.checker.properties.residuals import reference_rewards, tied_groups

    dev, context = device
    r = _rollout(dev, context)
    rewards = torch.stack([r.rewards, torch.zeros_like(r.rewards)])  # the second ties every group
    with context():
        tied = tied_groups(rewards, r)
        assert tied.device == dev and bool(tied[1].all()) and not bool(tied[0].any())
        assert reference_rewards(rewards, r).device == dev


def test_trl_callback_analysis_follows_the_device(device):
    pytest.importorskip("trl")
    from exchange.libraries.trl.callback import (
        batch_sums,
        metrics_from_sums,
        rollout_of,
    )
    from exchange.libraries.trl.objective import group_shuffle

    dev, context = device
    r = _rollout(dev, context)
    inputs = {
        "completion_ids": r.tokens, "completion_mask": r.mask.long(), "exchange_rewards": r.rewards,
        "exchange_group": r.group, "old_per_token_logps": r.old_logprobs, "exchange_row": torch.arange(r.n, device=dev),
        "ref_per_token_logps": None, "prompt_ids": None, "prompt_mask": None,
    }
    with context():
        micro = rollout_of(inputs, torch.float64)
        assert micro.tokens.device == dev
        kappa = torch.where(r.mask, r.logprobs, torch.zeros((), dtype=torch.float64, device=dev))
        metrics = metrics_from_sums(batch_sums(kappa, micro))
        assert metrics
        # groups are consecutive rows in TRL's layout: 2 groups of 2 rows
        shuffled = group_shuffle({"x": torch.arange(4, device=dev), "y": None}, 2)
        assert shuffled["x"].device == dev


@pytest.mark.parametrize("rows", ["full", "partial", "one"])
def test_verl_policy_losses_follow_the_device(rows, device):
    pytest.importorskip("verl")
    from exchange.libraries.verl.loss import advantages
    from exchange.libraries.verl.register import policy_loss
    from exchange.objectives import resolve

    dev, context = device
    r = build(CASE).to(torch.float64)
    adv = advantages(r, "grpo", None)
    pick = {"full": list(range(r.n)), "partial": [0, 2, 5], "one": [4]}[rows]
    old, lp, adv, mask = (x[pick].to(dev) for x in (r.old_logprobs, r.logprobs, adv, r.mask))
    for name in names():
        if name in ("entropy_8020", "hapo"):  # read token entropies, which verl does not pass
            continue
        fn = policy_loss(resolve(name), f"exchange_{name}", objective=name)
        with context():
            loss, _ = _loss_and_grad(lambda x, fn=fn: fn(old, x, adv, mask, "token-mean", None)[0], lp)
        assert loss.device == dev and torch.isfinite(loss.detach())


@pytest.mark.parametrize("spec", ["grpo", "dapo", "gspo"])
def test_dose_arms_follow_the_device(spec, device):
    """Issue 42's dose arms, trained inside the lab's CPU trainer and TRL run: the whole
    residual's (``exchange.lab.dose.dosed``) and, for a factored objective, the coupling
    residual's (``coupling_surgical(keep=f)``); their corrections run on the inputs' device."""
    from exchange.lab.dose import COUPLING, dose_arm

    dev, context = device
    r = _rollout(dev, context)
    families = [None] + ([COUPLING] if get(spec).factors is not None else [])
    for family in families:
        fn = dose_arm(spec, {}, 0.1, family)
        with context():
            loss, grad = _loss_and_grad(lambda lp: fn(lp, r), r.logprobs)
        assert loss.device == dev and grad is not None and grad.device == dev, family
        assert torch.isfinite(grad).all(), family


def test_the_exact_filler_grammar_follows_the_device(device):
    """The lab's grammar caps (``GrammarLM.mask_logits``, inside the model's forward during
    generation and training) with issue 42's exact filler and S as a filler: every mask
    is built on the ids' device. Blind spot of the guard arm: ``torch.isin`` accepts its
    test elements on the meta device, so the token lists' ``device=`` is checked only by
    the cuda arm (a planted ``torch.zeros`` without ``device=`` fails here)."""
    from exchange.lab.tasks import VOCAB_SIZE, GrammarLM, get_task

    dev, context = device
    task = get_task("arithmetic", 2, 0.5, template_in_prompt=True, forced_style=True, probe_as_filler=True,
                    fixed_answer=True, exact_filler=True)
    gen = torch.Generator().manual_seed(0)
    prompts = task.sample_prompts(3, gen)
    ids = torch.cat([prompts, task.reference(prompts, gen)], dim=1).to(dev)  # [B, P + response]
    logits = torch.zeros((*ids.shape, VOCAB_SIZE), dtype=torch.float64, device=dev)
    grammar = GrammarLM(torch.nn.Identity(), task)
    with context():
        out = grammar.mask_logits(ids, logits)
    assert out.device == dev and out.shape == logits.shape and bool((out < 0).any())
