"""User code must never make the CLI pass silently or print a traceback: every exit or
exception (at import or inside the loss) is exit 2 and one line. Also --regularizer,
--param for user functions, and module:function from the current directory."""


import pytest

from exchange.cli import main

FAST = ["--max-examples", "3", "--regime", "on"]

GOOD = """
def pg(logprobs, rollout, scale=1.0):
    adv = rollout.rewards - rollout.group_mean(rollout.rewards)
    return -scale * (adv[:, None] * logprobs * rollout.fmask).sum() / rollout.fmask.sum()

def factory(scale):
    def loss(logprobs, rollout):
        return pg(logprobs, rollout, scale)
    return loss

def penalty(logprobs, rollout):
    return 1e-3 * (((logprobs - rollout.old_logprobs) ** 2) * rollout.fmask).sum()

def exits(logprobs, rollout):
    import sys
    sys.exit(7)

def raises(logprobs, rollout):
    raise RuntimeError("boom")
"""


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err):
    lines = [l for l in err.strip().splitlines() if l.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "source",
    ["import sys\nsys.exit(0)\n", "import sys\nsys.exit(7)\n", "raise RuntimeError('at import')\n", "def f(:\n"],
    ids=["exit0", "exit7", "raise", "syntax"],
)
@pytest.mark.parametrize("form", ["file", "module"])
def test_import_time_exit_or_error_is_exit_2_one_line(source, form, tmp_path, monkeypatch, capsys):
    name = f"bad_{form}_{abs(hash(source)) % 10**6}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    target = f"{tmp_path / name}.py:fn" if form == "file" else f"{name}:fn"
    code, _, err = _run(["check", target, *FAST], capsys)
    assert code == 2
    assert "failed to import" in _one_line(err)


@pytest.mark.parametrize("fn,word", [("exits", "sys.exit(7)"), ("raises", "boom")])
def test_exit_or_exception_inside_the_loss_is_exit_2(fn, word, tmp_path, capsys):
    (tmp_path / "inloss.py").write_text(GOOD)
    code, _, err = _run(["check", f"{tmp_path / 'inloss.py'}:{fn}", *FAST], capsys)
    assert code == 2
    assert word in _one_line(err)


@pytest.mark.parametrize("target", [":", "mod:", ":fn"])
def test_malformed_target_is_one_line(target, capsys):
    code, _, err = _run(["check", target, *FAST], capsys)
    assert code == 2
    assert "TARGET" in _one_line(err)


def test_module_target_resolves_from_the_current_directory(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "mylib_cwd17"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "losses.py").write_text(GOOD)
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(["check", "mylib_cwd17.losses:pg", *FAST], capsys)
    assert code == 0, err


def test_param_is_passed_to_a_user_function_and_a_factory(tmp_path, capsys):
    (tmp_path / "withparams.py").write_text(GOOD)
    for fn in ("pg", "factory"):
        code, out, err = _run(["check", f"{tmp_path / 'withparams.py'}:{fn}", "--param", "scale=2.5", *FAST], capsys)
        assert code == 0, err
        assert "scale=2.5" in out
    code, _, err = _run(["check", f"{tmp_path / 'withparams.py'}:pg", "--param", "nope=1", *FAST], capsys)
    assert code == 2 and "scale" in _one_line(err)


def test_regularizer_option_moves_an_m6_term_to_its_own_channel(tmp_path, capsys):
    (tmp_path / "reg.py").write_text(GOOD)
    code, out, err = _run(
        ["check", f"{tmp_path / 'reg.py'}:pg", "--regularizer", f"{tmp_path / 'reg.py'}:penalty", "--max-examples", "3"], capsys
    )
    assert code == 0, out + err
    assert "regularizer channel" in out and "--regularizer" in out


SLOW = """
import time
def slow(logprobs, rollout):
    time.sleep(0.3)
    adv = rollout.rewards - rollout.group_mean(rollout.rewards)
    return -(adv[:, None] * logprobs * rollout.fmask).sum()
"""


def test_timeout_stops_a_slow_loss_with_one_line(tmp_path, capsys):
    (tmp_path / "slow.py").write_text(SLOW)
    code, _, err = _run(["check", f"{tmp_path / 'slow.py'}:slow", "--timeout", "0.1", *FAST], capsys)
    assert code == 2
    assert "time limit" in _one_line(err)


def test_plot_path_is_checked_before_the_work(tmp_path, capsys):
    code, _, err = _run(["credit", "grpo", "--plot", str(tmp_path / "missing" / "x.png")], capsys)
    assert code == 2 and "does not exist" in _one_line(err)


def test_hypothesis_profile_is_respected_and_no_hypothesis_folder_is_written(tmp_path, monkeypatch, capsys):
    from hypothesis import settings

    settings.register_profile("exchange_test_five", max_examples=5, database=None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    (tmp_path / "good.py").write_text(GOOD)
    code, out, err = _run(
        ["check", "good.py:pg", "--hypothesis-profile", "exchange_test_five", "--regime", "on", "--json"], capsys
    )
    assert code == 0, err
    import json

    data = json.loads(out)
    assert data["properties"]["exchangeable"]["examples"] <= 5
    assert not (tmp_path / ".hypothesis").exists()


SLEEPS = """
import time
def sleeps(logprobs, rollout):
    time.sleep(5)
    return (logprobs * rollout.fmask).sum()
"""


def test_timeout_interrupts_a_running_call(tmp_path, capsys):
    """A call that would sleep 5 s is stopped at the 0.5 s limit (SIGALRM), not after it ends."""
    import signal
    import time

    (tmp_path / "sleeps.py").write_text(SLEEPS)
    before = signal.getsignal(signal.SIGALRM)
    start = time.perf_counter()
    code, _, err = _run(["check", f"{tmp_path / 'sleeps.py'}:sleeps", "--timeout", "0.5", *FAST], capsys)
    took = time.perf_counter() - start
    assert code == 2
    line = _one_line(err)
    assert "time limit of 0.5 s" in line and "--timeout" in line
    assert took < 3.0, f"the check took {took:.1f} s: the 5 s call was not interrupted"
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_timeout_outside_the_main_thread_checks_after_the_call():
    """No signal reaches another thread: there the limit is checked once the call returns."""
    import threading
    import time

    import torch

    from exchange.checker.time_limit import time_limited as _time_limited
    from exchange.errors import ObjectiveError

    def slow(logprobs, rollout):
        time.sleep(0.3)
        return logprobs.sum()

    outcome = {}

    def worker():
        start = time.perf_counter()
        try:
            _time_limited(slow, 0.05, "slow")(torch.zeros(1), None)
        except ObjectiveError as err:
            outcome["err"] = str(err)
        outcome["took"] = time.perf_counter() - start

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert "time limit of 0.05 s" in outcome["err"]
    assert outcome["took"] >= 0.3  # ran to its end: not interruptible there


def test_timeout_keeps_an_enclosing_alarm():
    """A fast call under the limit leaves a caller's own SIGALRM timer running."""
    import signal

    import torch

    from exchange.checker.time_limit import time_limited as _time_limited

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        _time_limited(lambda lp, r: lp.sum(), 5.0, "fast")(torch.zeros(1), None)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 20.0 < left <= 30.0
        assert signal.getsignal(signal.SIGALRM) is not None and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
