"""Reading a run's metrics (exchange.training_log) from each writer's real format, and
the errors that name the file and line."""

from __future__ import annotations

import json

import pytest

from exchange.errors import InvalidArgument
from exchange.lab.runlog import MetricsLog
from exchange.training_log import read_training_log


def _verl_file(tmp_path, monkeypatch, rows):
    """A JSONL written by verl's own FileLogger class (trainer.logger=[file])."""
    from tests.conftest import need

    need("verl")
    path = tmp_path / "run.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    from verl.utils.tracking import FileLogger

    logger = FileLogger("project", "experiment")
    for step, data in rows:
        logger.log(data, step=step)
    logger.finish()
    return path


def test_verl_file_logger_rows_become_series(tmp_path, monkeypatch):
    path = _verl_file(tmp_path, monkeypatch, [(1, {"tax/shared_residual": 0.25, "actor/entropy": 1.5, "note": "x"}),
                                              (2, {"tax/shared_residual": 0.125, "actor/entropy": 1.25})])
    log = read_training_log(path)
    assert log.source == "verl"
    assert log.series["tax/shared_residual"] == ((1, 0.25), (2, 0.125))
    assert "note" not in log.series  # a string is not a series


def test_lab_metrics_jsonl_from_a_run_folder(tmp_path):
    metrics = MetricsLog(tmp_path / "metrics.jsonl")
    for step in range(3):
        metrics.append({"step": step, "tax/shared_residual": 0.5 / (step + 1), "charts/reward": float(step), "ok": True})
    log = read_training_log(tmp_path)
    assert (log.source, log.path.name) == ("lab", "metrics.jsonl")
    assert log.series["charts/reward"] == ((0, 0.0), (1, 1.0), (2, 2.0))
    assert "ok" not in log.series  # a flag is not a measurement


def test_trl_output_folder_reads_the_newest_checkpoint(tmp_path):
    for n, history in ((5, [{"step": 5, "reward": 1.0}]), (10, [{"step": 5, "reward": 1.0}, {"step": 10, "reward": 2.0}])):
        (tmp_path / f"checkpoint-{n}").mkdir()
        (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    log = read_training_log(tmp_path)
    assert log.source == "trl" and log.path.parent.name == "checkpoint-10"  # 10 > 5 numerically
    assert log.series["reward"] == ((5, 1.0), (10, 2.0))


def test_a_line_cut_off_mid_write_is_dropped_and_said(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "tax/shared_residual": 0.5}\n{"step": 1, "tax/sha')
    log = read_training_log(path)
    assert log.series["tax/shared_residual"] == ((0, 0.5),)
    assert log.notes == ("line 2 was cut off mid-write and is left out",)


@pytest.mark.parametrize("name, text, message", [
    ("a.jsonl", '{"step": 0}\nnot json\n{"step": 1}\n', "a.jsonl:2: not valid JSON"),
    ("a.jsonl", '{"loss": 1.0}\n', "a.jsonl:1: no numeric 'step' field"),
    ("a.jsonl", '[1, 2]\n', "a.jsonl:1: a JSON object per line expected"),
    ("a.jsonl", '{"step": 0, "data": {"x": 1}}\n{"step": 1, "x": 1}\n', "mixes verl FileLogger rows"),
    ("a.jsonl", '\n', "no logged rows"),
    ("trainer_state.json", '{"global_step": 3}', "no 'log_history' list"),
    ("trainer_state.json", '{"log_history": [', "not valid JSON"),
    ("a.csv", 'step,loss\n', "expected a .json (TRL trainer_state.json) or .jsonl"),
])
def test_malformed_files_are_refused_naming_file_and_line(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        read_training_log(tmp_path / name)


def test_a_folder_without_metrics_and_a_missing_path_are_refused(tmp_path):
    with pytest.raises(InvalidArgument, match="no metrics.jsonl, trainer_state.json or checkpoint-N"):
        read_training_log(tmp_path)
    with pytest.raises(InvalidArgument, match="does not exist"):
        read_training_log(tmp_path / "nope.jsonl")
