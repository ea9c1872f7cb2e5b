"""The instrumented RL trainer: one readable loop, every formula imported.

    for step in steps:
        prompts  = task.sample_prompts(...)                 # exchange.lab.tasks
        rollout  = sample_group_rollout(model, ...)         # exchange.lab.generation
                   (or, [train] common_rollouts and not the baseline: the baseline's, replay_rollout)
        for epoch, minibatch in reuse(rollout):             # rollout reuse: ratios leave 1
            logprobs = response_logprobs(model, mb)         # exchange.models
            kappa    = token_coefficients(loss_fn, ...)     # exchange.core.coefficients
            measure(kappa, ...)                             # exchange.lab.instruments
            loss_fn(logprobs, mb).backward(); opt.step()    # exchange.objectives.resolve(spec)
        rescale the rollout's change to [train] kl_target   # exchange.lab.klstep (optional)
        evaluate(model) every eval_every steps              # greedy accuracy + drift probes
        append metrics row; checkpoint every ckpt_every steps

With ``[train] attribute`` each optimiser step also feeds the attribution instrument
(:mod:`exchange.lab.attribution`: ``attr/<probe>/path`` and ``attr/<probe>/shared``).
Metric keys are namespaced (``charts/``, ``tax/``, ``clip/``, ``entropy/``, ``drift/``,
``kl/``, ``attr/``, ``cert/``, ``losses/``, ``eval/``); one JSON row per step in ``metrics.jsonl``. No
wall-clock value enters the metrics, so a resumed run reproduces them exactly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from exchange.core import metric_keys as mk
from exchange.core.coefficients import token_coefficients
from exchange.core.events import events
from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.lab.attribution import ProbeAttribution
from exchange.lab.certificate import style_credit
from exchange.lab.config import RunConfig
from exchange.lab.drift import make_probes, probe_logprobs, probe_scalars
from exchange.lab.generation import greedy_accuracy, sample_group_rollout
from exchange.lab.instruments import (
    clip_fractions,
    coefficient_tax,
    context_kl,
    entropy_by_role,
    prop31_kl,
    reward_length_covariance,
    shared_coefficients,
    update_share,
    weak_credit_entropy,
    zero_credit_gradient,
    zero_credit_mask,
)
from exchange.lab.klstep import control_contexts, normalise_step
from exchange.lab.predictions import ROLLOUT_HASH
from exchange.lab.runlog import (
    MetricsLog,
    RunDir,
    atomic_torch_save,
    atomic_write_text,
    check_steps,
    read_metrics,
    record_environment,
)
from exchange.lab.sft import sft_warm_start
from exchange.lab.tabular import TabularLM
from exchange.lab.tasks import (
    STYLE,
    VOCAB_SIZE,
    GrammarLM,
    Task,
    certify_zero_credit,
    filler_accuracy,
)
from exchange.models import TinyLM, TinyLMConfig, response_logprobs, sequence_logits

__all__ = [
    "certificate",
    "evaluate",
    "fixed_eval_set",
    "initial_metrics",
    "base_shared_gradient",
    "measure_minibatch",
    "replay_rollout",
    "rollout_hash",
    "rollout_path",
    "train_run",
    "warm_started_policy",
]

_STREAMS = ("prompts", "sample", "minibatch")  # independent RNG streams of one run


@dataclass
class _State:
    """Everything a checkpoint holds."""

    model: nn.Module
    opt: torch.optim.Optimizer
    gens: dict[str, torch.Generator]
    eval_prompts: torch.Tensor
    probes: Rollout
    step: int = 0
    wall_s: float = 0.0
    cumulative_kl: float = 0.0
    """Sum over steps of the KL on the control contexts (curves against cumulative KL)."""
    att: ProbeAttribution | None = None


# ----------------------------------------------------------------- set-up
def _tiny_lm(cfg: RunConfig, task: Task) -> nn.Module:
    """The policy: a ``TinyLM`` inside the task grammar (:class:`GrammarLM`), with
    ``n_positions = P + max_response_len + task.max_response_len``: room for a prompt
    followed by a sampled response or a warm-start reference solution. ``n_positions``
    shapes the seeded initialisation, so this formula is part of every recorded result."""
    n_pos = task.prompt_len + cfg.train.max_response_len + task.max_response_len
    m = cfg.model
    if m.kind == "tabular":
        return GrammarLM(TabularLM(VOCAB_SIZE, m.table_size), task)
    return GrammarLM(TinyLM(TinyLMConfig(VOCAB_SIZE, n_pos, m.d_model, m.n_heads, m.n_layers, seed=cfg.seed)), task)


def warm_started_policy(cfg: RunConfig, task: Task, cache_dir: Path | None = None) -> nn.Module:
    """``TinyLM`` (seeded by ``cfg.seed``) after the SFT warm start.

    Both arms of a seed start from the same weights: with ``cache_dir`` the warm start
    is computed once per ``cfg.sft_key()`` and stored atomically.
    """
    model = _tiny_lm(cfg, task)
    path = None if cache_dir is None else Path(cache_dir) / f"sft-{cfg.sft_key()}.pt"
    if path is not None and path.exists():
        model.load_state_dict(torch.load(path, weights_only=True))
        return model
    gen = torch.Generator().manual_seed(10_000 + cfg.seed)
    sft_warm_start(model, task, cfg.sft.steps, cfg.sft.batch, cfg.sft.lr, gen)
    if path is not None:
        atomic_torch_save(model.state_dict(), path)
    return model


def _optimizer(model: nn.Module, cfg: RunConfig) -> torch.optim.Optimizer:
    if cfg.train.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cfg.train.lr)
    return torch.optim.Adam(model.parameters(), lr=cfg.train.lr)


def fixed_eval_set(cfg: RunConfig, task: Task) -> tuple[torch.Tensor, Rollout]:
    """``(eval_prompts [eval_prompts, P], probes)`` of a seed: the same for both arms and at
    every evaluation (drawn from their own generator, seeded ``20_000 + seed``)."""
    fixed = torch.Generator().manual_seed(20_000 + cfg.seed)
    return task.sample_prompts(cfg.train.eval_prompts, fixed), make_probes(task, cfg.train.probe_prompts, fixed)


def _fresh_state(cfg: RunConfig, task: Task, sft_cache: Path | None) -> _State:
    model = warm_started_policy(cfg, task, sft_cache)
    gens = {name: torch.Generator().manual_seed(1_000 * cfg.seed + k) for k, name in enumerate(_STREAMS)}
    eval_prompts, probes = fixed_eval_set(cfg, task)
    st = _State(model=model, opt=_optimizer(model, cfg), gens=gens, eval_prompts=eval_prompts, probes=probes)
    return _with_attribution(st, cfg)


def _with_attribution(st: _State, cfg: RunConfig) -> _State:
    if cfg.train.attribute:
        st.att = ProbeAttribution(st.model, st.opt, probe_scalars(st.probes))
    return st


def _save(path: Path, st: _State) -> None:
    atomic_torch_save({
        "model": st.model.state_dict(),
        "opt": st.opt.state_dict(),
        "gens": {k: g.get_state() for k, g in st.gens.items()},
        "eval_prompts": st.eval_prompts,
        "probes": st.probes.to_dict(),
        "step": st.step,
        "wall_s": st.wall_s,
        "cumulative_kl": st.cumulative_kl,
        "attribution": None if st.att is None else st.att.tangent.state_dict(),
    }, path)


def _load(path: Path, cfg: RunConfig, task: Task) -> _State:
    ck = torch.load(path, weights_only=False)
    model = _tiny_lm(cfg, task)
    model.load_state_dict(ck["model"])
    opt = _optimizer(model, cfg)
    opt.load_state_dict(ck["opt"])
    gens = {}
    for k, state in ck["gens"].items():
        gens[k] = torch.Generator()
        gens[k].set_state(state)
    st = _State(model, opt, gens, ck["eval_prompts"], Rollout.from_dict(ck["probes"]), ck["step"], ck["wall_s"],
                ck.get("cumulative_kl", 0.0))
    st = _with_attribution(st, cfg)
    if st.att is not None and ck.get("attribution") is not None:
        st.att.tangent.load_state_dict(ck["attribution"])
    return st


# ------------------------------------------------------------- one update
def _mean_rows(acc: dict[str, list]) -> dict[str, float | None]:
    out = {}
    for key, values in acc.items():
        vals = [v for v in values if v is not None]
        out[key] = sum(vals) / len(vals) if vals else None
    return out


def _reuse(rollout: Rollout, epochs: int, minibatches: int, gen: torch.Generator):
    """Yield ``(epoch, rows)``: each epoch shuffles the groups and splits them, whole,
    into ``minibatches`` chunks."""
    for epoch in range(epochs):
        order = torch.randperm(rollout.n_groups, generator=gen)
        for chunk in order.chunk(minibatches):
            yield epoch, torch.isin(rollout.group_index, chunk).nonzero().flatten()


def measure_minibatch(loss_fn, logprobs: torch.Tensor, mb: Rollout, ev, zc: torch.Tensor, shared_occ: torch.Tensor,
                      params: list, update_norm: bool) -> tuple[dict[str, Any], list[torch.Tensor] | None, torch.Tensor]:
    """The per-minibatch instruments of one update, before its backward: ``(metrics,
    g_shared, kappa)``. ``logprobs [n, T]`` keep their graph to ``params`` (any device;
    ``mb`` and the masks live on the CPU, ``kappa`` is returned there); ``ev``, ``zc`` and
    ``shared_occ`` are the minibatch's events, zero-credit and shared-occurrence masks
    (groups are whole, so events are the minibatch's own). With ``update_norm``,
    ``g_shared = sum_{shared e} K_e grad l_e`` (one extra backward, graph retained) for
    P1's ``tax/shared_update_share = update_share(g_shared, -grad loss)``; else None.
    The CPU harness and the TRL run (exchange.lab.llm_run) both call this."""
    lp = logprobs.detach().double().cpu()
    kappa = token_coefficients(loss_fn, lp, mb)  # [n, T] float64, on the CPU with mb
    out = {**coefficient_tax(kappa, mb, ev, zc), **clip_fractions(kappa, mb), **shared_coefficients(kappa, mb, ev)}
    k = kappa.to(logprobs)
    g_shared = zero_credit_gradient(params, logprobs, k, shared_occ.to(k.device)) if update_norm else None
    log_ratio = (lp - mb.old_logprobs.double())[mb.mask]
    out[mk.LOG_RATIO_ABSMAX] = float(log_ratio.abs().max()) if log_ratio.numel() else None
    return out, g_shared, kappa


def base_shared_gradient(base_fn, params: list, logprobs: torch.Tensor, mb: Rollout,
                         shared_occ: torch.Tensor) -> list[torch.Tensor]:
    """``sum_{shared e} K^base_e grad l_e``: the shared residual's gradient that a surgical
    arm's base objective ``base_fn`` would add on this minibatch, absent from the arm's own
    step; the arm attributes its negation (issue 42: the surgical end of delta_hat's
    bracket). Devices as :func:`measure_minibatch`. The CPU harness and the TRL run
    (exchange.lab.llm_run) both call this."""
    kb = token_coefficients(base_fn, logprobs.detach().double().cpu(), mb).to(logprobs)
    return zero_credit_gradient(params, logprobs, kb, shared_occ.to(kb.device))


def _update(st: _State, loss_fn, rollout: Rollout, cfg: RunConfig, prop31: bool = False) -> dict[str, Any]:
    """Several minibatch epochs on one rollout, measuring every minibatch (and, with
    ``prop31``, the whole step against Prop. 3.1)."""
    tc = cfg.train
    ev = events(rollout)
    zc = zero_credit_mask(rollout, ev)  # [N, T]
    shared_occ = ev.shared[ev.ids.clamp(min=0)] & rollout.mask
    params = [p for p in st.model.parameters() if p.requires_grad]
    theta_before = {n: p.detach().clone() for n, p in st.model.named_parameters()} if prop31 else None
    with torch.no_grad():
        before = torch.log_softmax(sequence_logits(st.model, rollout)[0].double(), -1)  # [N, T, V]
    acc: dict[str, list] = defaultdict(list)
    theta0 = [p.detach().clone() for p in st.model.parameters()] if tc.kl_target > 0 else None
    shared_since = st.att.peek() if st.att is not None else None
    need_shared = tc.measure_update_norm or st.att is not None
    base_fn = getattr(loss_fn, "surgical_base", None) if cfg.arm.role == "surgical" else None
    for epoch, rows in _reuse(rollout, tc.epochs, tc.minibatches, st.gens["minibatch"]):
        mb = rollout.select(rows)
        ev_mb = dataclasses.replace(ev, ids=ev.ids[rows])  # groups are whole: events stay valid
        logprobs = response_logprobs(st.model, mb).double()  # [n, T], graph to theta
        measured, g_shared, kappa = measure_minibatch(loss_fn, logprobs, mb, ev_mb, zc[rows], shared_occ[rows], params,
                                               need_shared)
        for key, value in measured.items():
            acc[key].append(value)
        if st.att is not None and base_fn is not None:
            # the surgical arm (issue 42's bracket): the residual its base objective would add here,
            # absent from this step; attributing its negation gives minus its effect along this path
            g_base = base_shared_gradient(base_fn, params, logprobs, mb, shared_occ[rows])
        loss = loss_fn(logprobs, mb)
        st.opt.zero_grad(set_to_none=True)
        loss.backward()
        if tc.measure_update_norm:  # -grad(loss) = sum kappa grad l
            acc[mk.SHARED_UPDATE_SHARE].append(
                update_share(g_shared, [-p.grad for p in params], mass=float(kappa.abs().sum())))
        if st.att is not None and base_fn is not None:
            before_step = st.att.before_step()
            st.opt.step()
            st.att.after_step(before_step, [g for g in g_base])
        elif st.att is not None:  # the shared part of the loss gradient is -g_shared
            before_step = st.att.before_step()
            st.opt.step()
            st.att.after_step(before_step, [-g for g in g_shared])
        else:
            st.opt.step()
        acc[mk.LOSS].append(float(loss.detach()))
    control = control_contexts(rollout)
    if theta0 is not None:
        def kl_now() -> float | None:
            with torch.no_grad():
                now = torch.log_softmax(sequence_logits(st.model, rollout)[0].double(), -1)
            return context_kl(before, now, control)

        theta1 = [p.detach().clone() for p in st.model.parameters()]
        scale, _ = normalise_step(st.model, theta0, kl_now, tc.kl_target)
        acc[mk.KL_SCALE].append(scale)
        if st.att is not None:
            st.att.rescale(scale, shared_since, theta0, theta1)
    with torch.no_grad():
        after = torch.log_softmax(sequence_logits(st.model, rollout)[0].double(), -1)
    acc[mk.KL_SHARED].append(context_kl(before, after, shared_occ))
    acc[mk.KL_ALL].append(context_kl(before, after, rollout.mask))
    acc[mk.KL_CONTROL].append(context_kl(before, after, control))
    out = _mean_rows(acc)
    st.cumulative_kl += out[mk.KL_CONTROL] or 0.0
    out[mk.KL_CUMULATIVE] = st.cumulative_kl
    if st.att is not None:
        out.update(st.att.take())
    if theta_before is not None:
        out.update(prop31_kl(st.model, rollout, theta_before))
    return out


def evaluate(model: nn.Module, task: Task, eval_prompts: torch.Tensor, probes: Rollout, max_len: int) -> dict[str, Any]:
    """Greedy accuracy on the fixed eval prompts and the drift probes' log-probs."""
    return {mk.EVAL_ACCURACY: greedy_accuracy(model, task, eval_prompts, max_len), **probe_logprobs(model, probes)}


def initial_metrics(model: nn.Module, task: Task, eval_prompts: torch.Tensor, probes: Rollout,
                    max_len: int) -> dict[str, Any]:
    """``init.json``: the warm-started policy's evaluation and zero-credit certificate
    (the reference point of P2's changes and P4's accuracy curve)."""
    return {"step": -1, mk.SAMPLES: 0, **evaluate(model, task, eval_prompts, probes, max_len),
            **certificate(model, task, eval_prompts, max_len)}


def certificate(model: nn.Module, task: Task, eval_prompts: torch.Tensor, max_len: int) -> dict[str, Any]:
    """The zero-credit certificates: greedy accuracy by forced filler count and its
    homogeneity p-value (flat = filler carries no credit; tasks.certify_zero_credit), and
    the forced-prefix credit of the probe S (exchange.lab.certificate.style_credit:
    exact P(correct) with S forced vs banned on the held-out eval prompts; the report
    certifies it against the bound derived from delta_hat)."""
    accs, n = filler_accuracy(model, task, eval_prompts, max_len)
    flat, p = certify_zero_credit(accs, n)
    style = {mk.cert_style(k): v for k, v in style_credit(model, task, eval_prompts).to_dict().items()}
    return {mk.CERT_FILLER_ACCURACY: accs, mk.CERT_FILLER_FLAT: flat, mk.CERT_FILLER_P: p, **style}


# ------------------------------------------------------- common rollouts
def rollout_path(run_dir: str | Path, step: int) -> Path:
    """Where a baseline run with ``[train] common_rollouts`` stores step ``step``'s rollout."""
    return Path(run_dir) / "rollouts" / f"step{step:05d}.pt"


def rollout_hash(rollout: Rollout) -> int:
    """A 52-bit hash (exact in a JSON float) of what a rollout gives every arm: prompts,
    tokens, mask, rewards and groups. Logged per step (``charts/rollout_hash``), so the
    report can check that arms with common rollouts trained on the same data."""
    h = hashlib.sha256()
    for t in (rollout.prompt_tokens, rollout.tokens, rollout.mask, rollout.rewards, rollout.group):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return int(h.hexdigest()[:13], 16)


@torch.no_grad()
def replay_rollout(model: nn.Module, source: str | Path, step: int) -> Rollout:
    """Step ``step``'s rollout of the baseline run at ``source``, re-scored by ``model``:
    ``old_logprobs`` (= ``logprobs``) and the sampling entropies are recomputed under
    ``model``, so the replaying arm's first-epoch ratios are 1 as on-policy and only its
    objective differs from the baseline's. Raises if the baseline has not written it."""
    path = rollout_path(source, step)
    if not path.exists():
        raise InvalidArgument(
            f"[train] common_rollouts=true: {path} is missing; the baseline arm of this seed must run first "
            "(exchange experiment run orders it so); rerun the experiment.")
    rollout = Rollout.from_dict(torch.load(path, weights_only=False))
    logits, _ = sequence_logits(model, rollout)
    logp = torch.log_softmax(logits.double(), -1)  # [N, T, V]
    ent = -(logp.exp() * logp).sum(-1)
    old = response_logprobs(model, rollout).double()
    zeros = torch.zeros_like(old)
    return rollout.replace(old_logprobs=old, logprobs=old, entropy=torch.where(rollout.mask, ent, zeros))


# --------------------------------------------------------------- the loop
def train_run(cfg: RunConfig, out_dir: str | Path, *, sft_cache: str | Path | None = None,
              progress: bool = True, rollouts_from: str | Path | None = None) -> Path:
    """Train one (arm, seed) into ``out_dir``; resume from ``out_dir/ckpt.pt`` if present.

    Writes ``config.json``, ``init.json`` (metrics of the warm-started policy),
    ``metrics.jsonl`` (one row per step), ``ckpt.pt`` and, at the end, ``done.json``.
    Returns ``out_dir``. Killing the process at any point and calling again gives the
    same ``metrics.jsonl`` as an uninterrupted run. The directory is locked
    (:class:`~exchange.lab.runlog.RunLock`) while it trains; a log with duplicate or
    missing steps is refused; ``env.json`` records the stack of every (re)start.

    With ``[train] common_rollouts`` the baseline stores its rollouts and every other arm
    replays them from ``rollouts_from`` (the baseline's run directory of this seed).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    task = cfg.task.build()
    loss_fn = cfg.arm.loss_fn()
    tc = cfg.train
    replay = tc.common_rollouts and cfg.arm.role != "baseline"
    if replay and rollouts_from is None:
        raise InvalidArgument(f"[train] common_rollouts=true: arm {cfg.arm.name!r} (role {cfg.arm.role}) replays the "
                              "baseline's rollouts; pass rollouts_from=<the baseline's run directory of this seed>.")
    with RunDir(out_dir, cfg.fingerprint(), config=cfg.to_dict()) as rd:  # refuses a second trainer
        if rd.finished(tc.steps):
            return out_dir
        return _train_locked(cfg, rd, task, loss_fn, sft_cache, progress, Path(rollouts_from) if replay else None)


def _train_locked(cfg: RunConfig, rd: RunDir, task: Task, loss_fn, sft_cache, progress: bool,
                  source: Path | None = None) -> Path:
    from tqdm.auto import tqdm

    out_dir = rd.path
    tc = cfg.train
    ckpt = out_dir / "ckpt.pt"
    st = _load(ckpt, cfg, task) if ckpt.exists() else _fresh_state(cfg, task, Path(sft_cache) if sft_cache else None)
    if not ckpt.exists():
        init = initial_metrics(st.model, task, st.eval_prompts, st.probes, tc.max_response_len)
        atomic_write_text(out_dir / "init.json", json.dumps(init))
        _save(ckpt, st)
    log = MetricsLog(out_dir / "metrics.jsonl")
    log.truncate(st.step)  # drop rows computed after the checkpoint; they are recomputed
    check_steps(read_metrics(log.path), st.step, str(out_dir))  # refuse a corrupted log
    record_environment(out_dir, st.step)
    bar = tqdm(range(st.step, tc.steps), initial=st.step, total=tc.steps, disable=not progress,
               desc=f"{cfg.experiment}/{cfg.arm.name}/seed{cfg.seed}", leave=False)
    for step in bar:
        t0 = time.perf_counter()
        if source is not None:  # common rollouts: the baseline's tokens and rewards, this policy's log-probs
            rollout = replay_rollout(st.model, source, step)
        else:
            prompts = task.sample_prompts(tc.prompts_per_step, st.gens["prompts"])
            rollout = sample_group_rollout(st.model, task, prompts, tc.group_size, tc.max_response_len,
                                           tc.temperature, st.gens["sample"])
            if tc.common_rollouts:
                atomic_torch_save(rollout.to_dict(), rollout_path(out_dir, step))
        r_hash = rollout_hash(rollout)  # before any style bonus: the data every arm shares
        spread = rollout.group_max(rollout.rewards) > rollout.group_min(rollout.rewards)  # [N], per group
        zero_spread = 1.0 - float(spread.double().mean())  # rows weight groups equally: groups have G rows each
        if tc.style_bonus:  # injected credit for S (the pilot's sensitivity runs only)
            has_s = (rollout.tokens == STYLE).any(1) & rollout.mask.any(1)
            rollout = rollout.with_fields({"rewards": rollout.rewards + tc.style_bonus * has_s.double()})
        row: dict[str, Any] = {
            "step": step,
            mk.SAMPLES: (step + 1) * rollout.n,
            mk.REWARD: float(rollout.rewards.mean()),
            mk.LENGTH: float(rollout.lengths.double().mean()),
            mk.TRUNCATED: float(rollout.truncated.double().mean()),
            mk.ZERO_SPREAD_GROUPS: zero_spread,
            ROLLOUT_HASH: r_hash,
            mk.COV_REWARD_INV_LEN: reward_length_covariance(rollout),
            **entropy_by_role(rollout),
        }
        if st.att is not None:  # P3 at the sampled contexts (issue 42): the gap the shared part made so far
            row[mk.ATTR_SAMPLED_ENTROPY_GAP] = st.att.at_contexts(lambda m: weak_credit_entropy(m, rollout))
        eval_step = (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps
        row.update(_update(st, loss_fn, rollout, cfg, prop31=tc.measure_prop31 and eval_step))
        if eval_step:
            row.update(evaluate(st.model, task, st.eval_prompts, st.probes, tc.max_response_len))
        if step + 1 == tc.steps:
            row.update(certificate(st.model, task, st.eval_prompts, tc.max_response_len))
        log.append(row)
        st.step = step + 1
        st.wall_s += time.perf_counter() - t0
        if st.step % tc.ckpt_every == 0 or st.step == tc.steps:
            _save(ckpt, st)
        bar.set_postfix(reward=f"{row[mk.REWARD]:.2f}")
    rd.finish(tc.steps, wall_s=st.wall_s)
    return out_dir
