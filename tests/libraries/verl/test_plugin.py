"""Ray workers see the exchange losses: a *fresh* Python process that only imports verl
finds ``exchange_dapo`` through verl's own plugin loading; the registered loss honours the
actor's clip settings, ``loss_agg_mode`` and the global batch info, and emits verl's metrics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytestmark = pytest.mark.usefixtures("verl_ready")

ROOT = Path(__file__).resolve().parents[3]
LOOKUP = (
    "from verl.trainer.ppo import core_algos\n"
    "fn = core_algos.get_policy_loss_fn('exchange_dapo')\n"
    "print('FOUND', fn.__name__)\n"
)


def _fresh(env_extra: dict, extra_path: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    env.update(env_extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-c", LOOKUP], capture_output=True, text=True, timeout=240, env=env)


def test_pyproject_declares_the_verl_plugin():
    text = (ROOT / "pyproject.toml").read_text()
    assert '[project.entry-points."verl.plugins"]' in text
    assert 'exchange = "exchange.libraries.verl.plugin"' in text


# ~5 s: the slow tier (the full suite, what CI runs, includes it; -m "not slow" stays under 3 minutes)
@pytest.mark.slow
def test_fresh_process_finds_the_loss_through_the_entry_point(tmp_path):
    # What `pip install` writes for the declaration in pyproject.toml, on a path of its own.
    dist = tmp_path / "exchange_verl_probe-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: exchange-verl-probe\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text("[verl.plugins]\nexchange = exchange.libraries.verl.plugin\n")
    proc = _fresh({"VERL_USE_EXTERNAL_PLUGINS": "exchange"}, str(tmp_path))
    assert "FOUND exchange_dapo" in proc.stdout, proc.stderr[-3000:]


# ~5 s: the slow tier (the full suite, what CI runs, includes it; -m "not slow" stays under 3 minutes)
@pytest.mark.slow
def test_fresh_process_finds_the_loss_through_external_modules():
    proc = _fresh({"VERL_USE_EXTERNAL_MODULES": "exchange.libraries.verl.plugin", "VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert "FOUND exchange_dapo" in proc.stdout, proc.stderr[-3000:]


# ~5 s: the slow tier (the full suite, what CI runs, includes it; -m "not slow" stays under 3 minutes)
@pytest.mark.slow
def test_without_the_plugin_a_fresh_process_does_not_find_it():
    proc = _fresh({"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert "FOUND" not in proc.stdout


def _batch():
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    old = -torch.rand(4, 4, dtype=torch.float64)
    new = (old + 0.5 * torch.randn(4, 4, dtype=torch.float64)).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)[:, None].expand(4, 4).clone()
    return old, new, adv, mask


def test_actor_clip_settings_and_metrics():
    from exchange.libraries.verl.register import register
    from verl.trainer.ppo import core_algos

    register(["dapo"])
    fn = core_algos.get_policy_loss_fn("exchange_dapo")
    old, new, adv, mask = _batch()
    loose = SimpleNamespace(clip_ratio=0.2, clip_ratio_low=0.999, clip_ratio_high=10.0, clip_ratio_c=3.0,
                            global_batch_info=None)
    tight = SimpleNamespace(clip_ratio=0.2, clip_ratio_low=0.01, clip_ratio_high=0.01, clip_ratio_c=3.0,
                            global_batch_info=None)
    loss_loose, metrics_loose = fn(old, new, adv, mask, "token-mean", loose)
    loss_tight, metrics_tight = fn(old, new, adv, mask, "token-mean", tight)
    assert not torch.allclose(loss_loose, loss_tight)  # clip settings reach the objective
    for key in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
        assert key in metrics_tight
    assert metrics_tight["actor/pg_clipfrac"] > metrics_loose["actor/pg_clipfrac"] == 0.0
    # verl's own vanilla loss reports the same clip fraction and KL on the same tensors.
    _, native = core_algos.compute_policy_loss_vanilla(old, new.detach(), adv, mask, "token-mean", _verl_config(tight))
    assert metrics_tight["actor/pg_clipfrac"] == pytest.approx(native["actor/pg_clipfrac"])
    assert metrics_tight["actor/ppo_kl"] == pytest.approx(native["actor/ppo_kl"])


def _verl_config(ns):
    from verl.workers.config import ActorConfig  # noqa: F401  (import check only)
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"clip_ratio": ns.clip_ratio, "clip_ratio_low": ns.clip_ratio_low,
                            "clip_ratio_high": ns.clip_ratio_high, "clip_ratio_c": ns.clip_ratio_c,
                            "global_batch_info": {}})
    return cfg


def test_loss_agg_mode_and_global_batch_info():
    from exchange.libraries.verl.register import register
    from verl.trainer.ppo import core_algos

    register(["grpo"])
    fn = core_algos.get_policy_loss_fn("exchange_grpo")
    old, new, adv, mask = _batch()
    base = dict(clip_ratio=0.2, clip_ratio_low=None, clip_ratio_high=None, clip_ratio_c=3.0)
    local = SimpleNamespace(**base, global_batch_info=None)
    tok, _ = fn(old, new, adv, mask, "token-mean", local)
    seq, _ = fn(old, new, adv, mask, "seq-mean-token-mean", local)
    assert not torch.allclose(tok, seq)  # grpo takes loss_agg_mode
    n_tokens = int(mask.sum())
    doubled = SimpleNamespace(**base, global_batch_info={"dp_size": 1, "batch_num_tokens": 2 * n_tokens,
                                                         "global_batch_size": 8})
    half, _ = fn(old, new, adv, mask, "token-mean", doubled)
    assert torch.allclose(half, tok / 2)  # this micro-batch is half of the global batch's tokens
