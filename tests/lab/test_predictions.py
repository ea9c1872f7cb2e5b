"""``RunData`` reads sparse metrics: TRL logs ``reward`` (the lab's ``charts/reward``) only
on the first optimizer step of each rollout, so the last row of a run may lack it."""

from __future__ import annotations

import pytest

from exchange.errors import InvalidArgument
from exchange.lab.predictions import PREDICTIONS, RunData


def _run() -> RunData:
    # two rollouts of two optimizer steps each: reward only at the rollout starts
    rows = [
        {"step": 1, "charts/reward": 0.25, "losses/loss": 0.1},
        {"step": 2, "losses/loss": 0.2},
        {"step": 3, "charts/reward": 0.75, "losses/loss": 0.3},
        {"step": 4, "losses/loss": 0.4},
    ]
    return RunData(init={"eval/accuracy": 0.5}, rows=rows, target_accuracy=0.9, where="runs/x/seed0")


def test_a_metric_missing_from_the_last_row_is_read_from_the_rows_that_have_it():
    run = _run()
    assert run.series("charts/reward").tolist() == [0.25, 0.75]
    assert run.final("charts/reward") == 0.75
    reward = next(p for p in PREDICTIONS if "charts/reward" in p.statistic)
    assert reward.per_run(run) == pytest.approx(0.5)


def test_a_metric_no_row_has_is_named_with_every_known_key():
    with pytest.raises(InvalidArgument, match=r"no metric 'charts/rewrd'; known: charts/reward, losses/loss, step"):
        _run().series("charts/rewrd")
