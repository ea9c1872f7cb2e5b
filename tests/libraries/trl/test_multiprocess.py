"""Two real processes with gradient accumulation 2: the callback's metrics and TRL's own
metrics are in the log; ExchangeGRPOTrainer's step equals GRPOTrainer's with a group split
between the processes (bnpo, plain and with TRL's high-entropy mask, whose quantile pools
both processes' tokens).

``torchrun --nproc_per_node 2`` starts them: ``accelerate launch --cpu --num_processes 2``
(accelerate 1.x) goes to its simple launcher, which starts ONE process unless MPI is
installed. Accelerate reads torchrun's environment and runs two CPU (gloo) processes;
the test checks ``num_processes == 2`` from inside the run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from exchange.core.metric_keys import SHARED_EVENTS, SHARED_KAPPA_SHARE, SHARED_RESIDUAL

pytestmark = [pytest.mark.usefixtures("trl_ready"), pytest.mark.slow]


def test_two_processes_with_gradient_accumulation(tmp_path):
    script = Path(__file__).with_name("two_process_run.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(script), str(tmp_path)]
    root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", ACCELERATE_USE_CPU="true",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    for name in ("callback", "trainer"):
        assert result[name]["num_processes"] == 2
        logged = [h for h in result[name]["log_history"] if SHARED_RESIDUAL in h]
        assert len(logged) == 2, result[name]["log_history"]
        for entry in logged:
            for key in ("entropy", "clip_ratio/region_mean", "reward", SHARED_EVENTS, SHARED_KAPPA_SHARE):
                assert key in entry, (name, key, entry)
    # a group split between processes: the gathered rewards' advantages, TRL's normalisers;
    # with top_entropy_quantile, the entropy quantile over both processes' tokens
    for pair in (("trl_bnpo", "exchange_bnpo"), ("trl_entropy", "exchange_entropy")):
        trl, ours = (torch.tensor(result[name]["step"], dtype=torch.float64) for name in pair)
        assert float(trl.norm()) > 0
        ratio, cosine = float(ours.norm() / trl.norm()), float(ours @ trl / (ours.norm() * trl.norm()))
        assert abs(ratio - 1) < 1e-4 and cosine > 0.9999, (pair, ratio, cosine)
    plain, masked = (torch.tensor(result[name]["step"], dtype=torch.float64) for name in ("trl_bnpo", "trl_entropy"))
    assert not torch.allclose(plain, masked)  # the mask changes the step: the pair tests it
