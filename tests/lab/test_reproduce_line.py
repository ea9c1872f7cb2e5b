"""The reproduce line of an ``exchange experiment run`` with ``--seeds``/``--steps``.

Before the record, such a run's experiment.json kept only ``source``, and the report's
reproduce line (``experiment run CONFIG``) retrained the file's seeds and steps, not the
run's. The CLI now records the overrides (``run_overrides``) and the report puts them in
the line; a run whose experiment.json is not its config file plus those overrides gets no
line, but the reason.
"""

from __future__ import annotations

import json
import types

import torch

from exchange.cli import main
from exchange.lab.experiment_report import _reproduce
from exchange.lab.experiment_report_record import NO_REPRODUCE, RUN_OVERRIDES, RunRecord

from ._tiny import tiny_config


def _line(meta):
    return _reproduce(types.SimpleNamespace(meta=meta))


def test_cli_overrides_are_recorded_and_reproduced(tmp_path):
    torch.set_num_threads(1)
    cfg = tiny_config(tmp_path, seeds=(0, 1), steps=6)
    out = tmp_path / "runs"
    assert main(["experiment", "run", str(cfg), "--out", str(out), "--seeds", "3", "--steps", "2",
                 "--no-progress"]) == 0
    meta = json.loads((out / "tiny" / "experiment.json").read_text())
    assert meta[RUN_OVERRIDES] == {"seeds": [3], "steps": 2}
    assert meta["seeds"] == [3] and meta["train"]["steps"] == 2
    line = _line(meta)
    assert line == (f"`python -m exchange experiment run {cfg} --seeds 3 --steps 2 && "
                    "python -m exchange experiment report runs/tiny`")
    # the old behaviour: no record, so the line would retrain seeds [0, 1] at 6 steps; refused
    old = {k: v for k, v in meta.items() if k != RUN_OVERRIDES}
    refused = _line(old)
    assert refused.startswith(NO_REPRODUCE) and "experiment run" not in refused
    assert "seeds = [3] (the command gives [0, 1])" in refused and "train.steps = 2 (the command gives 6)" in refused


def test_a_run_of_the_file_itself_reproduces_by_the_file(tmp_path):
    """No overrides: the plain command, as before (the published designs' lines)."""
    cfg = tiny_config(tmp_path, seeds=(0, 1), steps=6)
    from exchange.lab.config import load_experiment
    from exchange.lab.experiment_report_record import _plain

    meta = {**_plain(load_experiment(cfg)), "source": str(cfg), RUN_OVERRIDES: RunRecord(str(cfg)).to_dict()}
    assert _line(meta) == f"`python -m exchange experiment run {cfg} && python -m exchange experiment report runs/tiny`"
    meta.pop(RUN_OVERRIDES)  # runs trained before the record: the same line where the config agrees
    assert _line(meta) == f"`python -m exchange experiment run {cfg} && python -m exchange experiment report runs/tiny`"
    meta["task"] = {**meta["task"], "style_p": 0.25}  # the config edited since the run
    assert _line(meta).startswith(NO_REPRODUCE + f"experiment.json is not {cfg}: task.style_p = 0.25")
    assert _line({**meta, "source": None}).startswith(NO_REPRODUCE)
    assert _line({**meta, "source": str(tmp_path / "gone.toml")}).startswith(NO_REPRODUCE + f"{tmp_path / 'gone.toml'} does not load")
