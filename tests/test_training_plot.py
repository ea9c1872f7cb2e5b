"""``exchange plot``: images drawn from a real TRL run's trainer_state.json and from a
file written by verl's FileLogger; what is drawn and the errors."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from exchange.cli import main
from exchange.core.metric_keys import SHARED_EVENTS, SHARED_KAPPA_SHARE, SHARED_RESIDUAL
from exchange.errors import InvalidArgument
from exchange.training_log import read_training_log
from exchange.training_plot import plot_training_log, select_series
from tests.test_training_log import _verl_file


def _ink(png) -> float:
    """The share of pixels that are not the figure's white background."""
    import matplotlib.image

    img = matplotlib.image.imread(png)[..., :3]
    return float((np.abs(img - 1.0).max(-1) > 0.05).mean())


def _lines(svg) -> dict[str, int]:
    """The data lines of the SVG (each drawn with ``gid="series:KEY"``) and their vertices."""
    root = ET.parse(svg).getroot()
    ns = {"s": "http://www.w3.org/2000/svg"}
    return {g.get("id")[len("series:"):]: g.find("s:path", ns).get("d").count("L") + 1
            for g in root.iterfind(".//s:g", ns) if g.get("id", "").startswith("series:")}


_ROWS = [(s, {SHARED_RESIDUAL: 0.5 / s, "critic/score/mean": 0.1 * s, "actor/entropy": 2.0 - 0.1 * s}) for s in range(1, 6)]


def test_a_verl_file_logger_run_plots_tax_then_reward_then_entropy(tmp_path, monkeypatch):
    log = read_training_log(_verl_file(tmp_path, monkeypatch, _ROWS))
    selection = select_series(log)
    assert selection.keys == (SHARED_RESIDUAL, "critic/score/mean", "actor/entropy")
    assert selection.missing == ("KL",)
    png, svg = tmp_path / "t.png", tmp_path / "t.svg"
    plot_training_log(log, png)
    plot_training_log(log, svg)
    assert _ink(png) > 0.01  # axes, titles and three lines: not a blank image
    assert _lines(svg) == {k: 5 for k in selection.keys}  # one data line per series, a vertex per step


def test_an_empty_series_list_is_refused_and_metric_selects(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0 / (s + 1)}) + "\n" for s in range(3)))
    log = read_training_log(path)
    with pytest.raises(InvalidArgument, match="none of tax/\\*, reward, KL or entropy is logged"):
        select_series(log)
    assert select_series(log, ["loss"]).keys == ("loss",)
    with pytest.raises(InvalidArgument, match="did you mean 'loss'"):
        select_series(log, ["losss"])
    with pytest.raises(InvalidArgument, match="--out .* use one of .png, .svg"):
        plot_training_log(log, tmp_path / "x.pdf", ["loss"])
    assert not (tmp_path / "x.pdf").exists()


def test_cli_writes_the_image_and_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    run = _verl_file(tmp_path, monkeypatch, _ROWS)
    out = tmp_path / "tax.svg"
    assert main(["plot", str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 series" in printed and "steps 1-5" in printed and "not logged: KL" in printed
    assert set(_lines(out)) == {SHARED_RESIDUAL, "critic/score/mean", "actor/entropy"}
    assert main(["plot", str(run), "--out", str(tmp_path / "missing" / "x.png")]) == 2
    assert main(["plot", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "does not exist" in err[-1]


@pytest.mark.slow
def test_a_real_trl_run_with_the_callback_plots_its_tax(tmp_path, trl_ready):
    """Three steps of TRL's GRPOTrainer with ExchangeCallback on a tiny Qwen2 (built in
    code), ``save_state()``, then the plot of its ``trainer_state.json``."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from exchange.libraries.trl.callback import ExchangeCallback
    from tests.libraries.trl.test_trainer import _reward, _tiny_model_and_tokenizer

    model, tokenizer = _tiny_model_and_tokenizer()
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, max_steps=3, logging_steps=1,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=6,
                      learning_rate=1e-3, save_strategy="no", seed=0, bf16=False)
    trainer = GRPOTrainer(model=model, reward_funcs=_reward, args=args, processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": ["a b c", "d e f"]}),
                          callbacks=[ExchangeCallback()])
    trainer.train()
    trainer.save_state()
    log = read_training_log(tmp_path)
    assert log.source == "trl"
    selection = select_series(log)
    assert {SHARED_RESIDUAL, SHARED_EVENTS, SHARED_KAPPA_SHARE, "reward", "entropy"} <= set(selection.keys)
    assert [s for s, _ in log.series[SHARED_RESIDUAL]] == [1, 2, 3]
    png = tmp_path / "tax.png"
    assert main(["plot", str(tmp_path), "--out", str(png)]) == 0
    assert _ink(png) > 0.01
