"""``exchange check``'s progress bar: the checker calls ``progress(regime, property,
done, total)``; the CLI draws it with rich on a terminal's stderr only, never with
``--json`` or ``--no-progress``, and stdout is the same with or without it."""

from __future__ import annotations

import io
import json

from rich.console import Console

from exchange.cli import main
from exchange.cli.progress import check_progress, describe

FAST = ["--max-examples", "3"]


def test_the_checker_calls_progress_with_what_is_checked_and_a_total():
    from exchange.checker import check
    from exchange.targets import resolve_target

    calls = []
    props = ("zero_sum", "exchangeable")
    check(resolve_target("dr_grpo").loss_fn, properties=props, max_examples=3,
          progress=lambda *a: calls.append(a))
    regimes = ("on_policy", "off_policy")
    # every property of every regime, in order, done counting the pairs before it, one total
    assert calls == [(r, p, i * 2 + j, 4) for i, r in enumerate(regimes) for j, p in enumerate(props)]


def test_the_bar_on_a_terminal_shows_what_is_checked_and_how_far():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with check_progress(True, console) as show:
        assert show is not None
        show("on_policy", "exchangeable", 3, 10)
        show("off_policy", "zero_sum", 7, 10)
        show("on_policy", "zero_sum", 0, 10)  # a second pass (beside the twin) starts again
    text = out.getvalue()
    assert describe("off_policy", "zero_sum") in text and "checking zero_sum (off-policy)" in text
    assert "7/10" in text and "ETA" in text


def test_no_bar_off_a_terminal_or_when_disabled():
    with check_progress(True, Console(file=io.StringIO(), force_terminal=False)) as show:
        assert show is None
    with check_progress(False, Console(file=io.StringIO(), force_terminal=True)) as show:
        assert show is None


def test_cli_draws_the_bar_on_a_terminal_and_never_with_json(monkeypatch, capsys):
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: stderr counts as a terminal
    args = ["check", "dr_grpo", "--regime", "on", "--property", "zero_sum", *FAST]
    assert main(args) == 0
    assert "checking zero_sum (on-policy)" in capsys.readouterr().err
    assert main([*args, "--no-progress"]) == 0
    assert "checking" not in capsys.readouterr().err
    assert main([*args, "--json"]) == 0
    out, err = capsys.readouterr()
    assert "checking" not in err
    assert json.loads(out)["objective"] == "dr_grpo"
