"""Exit 2 for the user's errors, exit 3 for the package's own bugs (issue 40), and
``--debug`` / ``EXCHANGE_DEBUG=1`` for the traceback. The rule is
``exchange.cli.is_internal_error``; here both sides of it, with errors planted inside
the package's code, in user code, in a training engine and in a library."""

import functools
import importlib.util
import operator
import sys

import pytest

import exchange.audit
from exchange.cli import BUG_REPORT, DEBUG_ENV, ENGINE_PACKAGES, cmd_audit, main

FAST = ["--max-examples", "3", "--regime", "on"]

LOSSES = """
def raises(logprobs, rollout):
    raise RuntimeError("boom in my loss")
"""


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _lines(err):
    return [line for line in err.strip().splitlines() if line.strip()]


def _one_line(err):
    lines = _lines(err)
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)


@pytest.fixture
def malformed_rows(monkeypatch):
    """``exchange audit`` gets a row without its report: ``AuditRow.holds`` (exchange/audit.py)
    raises KeyError while the table renders, a bug inside the package's own code."""
    monkeypatch.setattr(exchange.audit, "audit", lambda *a, **k: [exchange.audit.AuditRow("grpo", "src", {})])


@pytest.fixture
def divides_by_zero(monkeypatch):
    """The audit's table function divides by zero (``1 / 0``, called from cmd_audit.run)."""
    monkeypatch.setattr(exchange.audit, "audit", lambda *a, **k: 0)
    monkeypatch.setattr(cmd_audit, "_table", functools.partial(operator.truediv, 1))


def test_a_bug_inside_the_package_is_exit_3_and_says_so(malformed_rows, capsys):
    code, _, err = _run(["audit", "grpo"], capsys)
    assert code == 3
    line = _one_line(err)
    assert line.startswith("exchange audit: internal error: KeyError: 'properties' -- this is a bug in exchange;")
    assert f"rerun with --debug (or {DEBUG_ENV}=1) for the traceback" in line
    assert line.endswith(f"report it with the command and the traceback at {BUG_REPORT}")


def test_a_zero_division_inside_a_command_is_exit_3(divides_by_zero, capsys):
    code, _, err = _run(["audit", "grpo"], capsys)
    assert code == 3
    assert "internal error: ZeroDivisionError: division by zero -- this is a bug in exchange" in _one_line(err)


@pytest.mark.parametrize("how", ["before", "after", "env"])
def test_debug_prints_the_traceback_of_a_bug(how, malformed_rows, monkeypatch, capsys):
    argv = {"before": ["--debug", "audit", "grpo"], "after": ["audit", "grpo", "--debug"], "env": ["audit", "grpo"]}[how]
    if how == "env":
        monkeypatch.setenv(DEBUG_ENV, "1")
    code, _, err = _run(argv, capsys)
    assert code == 3
    lines = _lines(err)
    assert lines[0] == "Traceback (most recent call last):"
    assert any("exchange" in line and "audit.py" in line and "in holds" in line for line in lines), err
    assert lines[-1].startswith("exchange audit: internal error: KeyError: 'properties' -- this is a bug in exchange;")
    assert lines[-1].endswith(f"report it with the command and the traceback above at {BUG_REPORT}")


def test_debug_env_zero_is_off(malformed_rows, monkeypatch, capsys):
    monkeypatch.setenv(DEBUG_ENV, "0")
    code, _, err = _run(["audit", "grpo"], capsys)
    assert code == 3 and "rerun with --debug" in _one_line(err)


def test_a_user_loss_that_raises_stays_exit_2_one_line(tmp_path, capsys):
    (tmp_path / "userloss.py").write_text(LOSSES)
    code, _, err = _run(["check", f"{tmp_path / 'userloss.py'}:raises", *FAST], capsys)
    assert code == 2
    line = _one_line(err)
    assert line.startswith("exchange check: error:") and "boom in my loss" in line
    assert "bug" not in line


def test_debug_prints_the_traceback_of_a_user_error_and_keeps_exit_2(tmp_path, capsys):
    (tmp_path / "userloss.py").write_text(LOSSES)
    code, _, err = _run(["--debug", "check", f"{tmp_path / 'userloss.py'}:raises", *FAST], capsys)
    assert code == 2
    lines = _lines(err)
    assert lines[0] == "Traceback (most recent call last):"
    assert any("userloss.py" in line for line in lines), err  # the user's own frame is shown
    assert lines[-1].startswith("exchange check: error:") and "boom in my loss" in lines[-1]


def test_an_exchange_error_is_the_users_even_with_debug(capsys):
    code, _, err = _run(["audit", "--jobs", "0"], capsys)
    assert code == 2 and _one_line(err) == "exchange audit: error: --jobs=0 must be >= 1."
    code, _, err = _run(["--debug", "audit", "--jobs", "0"], capsys)
    assert code == 2 and "Traceback" in err and _lines(err)[-1] == "exchange audit: error: --jobs=0 must be >= 1."


def _raises_here(*args, **kwargs):
    raise RuntimeError("raised by code outside the package")


def test_a_frame_of_user_code_on_the_way_makes_it_the_users(monkeypatch, capsys):
    """Code outside the package and its libraries (here: this test file, standing for a
    user's callback) raised: exit 2, one line."""
    monkeypatch.setattr(exchange.audit, "audit", lambda *a, **k: [])
    monkeypatch.setattr(cmd_audit, "_table", _raises_here)
    code, _, err = _run(["audit", "grpo"], capsys)
    assert code == 2
    assert _one_line(err) == "exchange audit: error: RuntimeError: raised by code outside the package"


def _plant(monkeypatch, tmp_path, package):
    """``cmd_audit._table`` replaced by a function of a module installed under a
    site-packages folder as ``package/planted.py``, which raises ValueError."""
    folder = tmp_path / "site-packages" / package
    folder.mkdir(parents=True)
    (folder / "planted.py").write_text("def table(rows):\n    raise ValueError('rejected setting')\n")
    spec = importlib.util.spec_from_file_location(f"_exchange_test_planted_{package}", folder / "planted.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(exchange.audit, "audit", lambda *a, **k: [])
    monkeypatch.setattr(cmd_audit, "_table", module.table)


@pytest.mark.parametrize("engine", ENGINE_PACKAGES)
def test_a_training_engine_that_raises_is_the_users(engine, monkeypatch, tmp_path, capsys):
    """An engine (TRL, verl, ...) raises on the user's configuration: exit 2."""
    _plant(monkeypatch, tmp_path, engine)
    code, _, err = _run(["audit", "grpo"], capsys)
    assert code == 2
    assert _one_line(err) == "exchange audit: error: ValueError: rejected setting"


def test_a_library_the_package_calls_is_transparent(monkeypatch, tmp_path, capsys):
    """A library (anything else under site-packages: torch, numpy, ...) that raises on
    what the package handed it: the innermost other frame is the package's, a bug."""
    _plant(monkeypatch, tmp_path, "somelibrary")
    code, _, err = _run(["audit", "grpo"], capsys)
    assert code == 3
    assert "internal error: ValueError: rejected setting -- this is a bug in exchange" in _one_line(err)


def test_an_os_error_is_the_machines_not_a_bug(monkeypatch, tmp_path, capsys):
    missing = tmp_path / "missing" / "file"
    monkeypatch.setattr(exchange.audit, "audit", lambda *a, **k: missing)
    monkeypatch.setattr(cmd_audit, "_table", open)  # open(missing), called by cmd_audit.run
    code, _, err = _run(["audit", "grpo"], capsys)
    assert code == 2
    assert _one_line(err).startswith("exchange audit: error: FileNotFoundError:")


def test_a_deliberate_exit_of_the_package_keeps_its_status(monkeypatch, capsys):
    """``sys.exit(5)`` from the package (the verl plugin exits 2 on purpose, its line
    already printed): the status stands, and the user is not blamed."""
    monkeypatch.setattr(exchange.audit, "audit", lambda *a, **k: 5)
    monkeypatch.setattr(cmd_audit, "_table", sys.exit)  # sys.exit(5), called by cmd_audit.run
    code, _, err = _run(["audit", "grpo"], capsys)
    assert code == 5 and err == ""


def test_a_user_exit_inside_a_command_is_exit_2(monkeypatch, capsys):
    def exits(rows):
        sys.exit(7)

    monkeypatch.setattr(exchange.audit, "audit", lambda *a, **k: [])
    monkeypatch.setattr(cmd_audit, "_table", exits)
    code, _, err = _run(["audit", "grpo"], capsys)
    assert code == 2 and "user code called sys.exit(7)" in _one_line(err)


def test_an_internal_error_raised_from_a_users_is_the_users(monkeypatch, capsys):
    """``raise X from err``: the package re-raised what user code raised; the cause decides."""
    def users(rows):
        raise KeyError("user's key")

    def wraps(rows):
        try:
            users(rows)
        except KeyError as err:
            raise RuntimeError("wrapped") from err

    from exchange.cli import is_internal_error

    try:
        wraps([])
    except RuntimeError as err:
        # every frame here is this file's (user code); strip the outer ones to leave only the cause's
        outer = err.with_traceback(None)
        assert outer.__cause__ is not None
        assert is_internal_error(outer) is False  # the cause's frames are user code
        outer.__cause__ = None
        assert is_internal_error(outer) is True  # no frame at all: nothing says it is the user's


def test_engine_packages_are_the_adapted_libraries():
    from exchange.libraries import LIBRARIES

    import_names = {"skyrl": "skyrl_train"}  # skyrl-train installs the package skyrl_train
    assert {import_names.get(lib, lib) for lib in LIBRARIES} == set(ENGINE_PACKAGES)


def test_help_names_debug_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "--debug" in out and DEBUG_ENV in out
    assert "3 a bug in exchange" in " ".join(out.split())


def test_version_names_the_distribution(capsys):
    from exchange.cli import main
    from exchange.core.distribution import DISTRIBUTION, VERSION

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"exchange {VERSION} ({DISTRIBUTION})"
