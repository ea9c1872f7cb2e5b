"""Run integrity: the lock, duplicate/missing-step detection, the environment record."""

import json
import subprocess
import sys

import pytest

from exchange.errors import InvalidArgument
from exchange.lab.runlog import RunLock, check_steps, environment


def _rows(steps):
    return [{"step": s} for s in steps]


def test_check_steps_accepts_a_clean_log():
    check_steps(_rows(range(5)), 5)


def test_check_steps_refuses_duplicates_gaps_and_short_logs():
    with pytest.raises(InvalidArgument, match="duplicate steps \\[2, 3\\]"):
        check_steps(_rows([0, 1, 2, 3, 2, 3, 4]))
    with pytest.raises(InvalidArgument, match="missing or out-of-order steps \\(missing \\[2\\]"):
        check_steps(_rows([0, 1, 3]))
    with pytest.raises(InvalidArgument, match="have 3 steps, expected 5"):
        check_steps(_rows(range(3)), 5)


def test_lock_refuses_a_second_holder_and_is_released(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(InvalidArgument, match="is locked by pid"):
            with RunLock(tmp_path):
                pass
    with RunLock(tmp_path):  # released on exit
        pass


def test_lock_held_by_another_process_refuses_and_dies_with_it(tmp_path):
    code = (f"import time; from exchange.lab.runlog import RunLock\n"
            f"with RunLock({str(tmp_path)!r}):\n    print('locked', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(InvalidArgument, match=f"locked by pid {proc.pid}"):
            with RunLock(tmp_path):
                pass
    finally:
        proc.kill()
        proc.wait()
    with RunLock(tmp_path):  # the kernel released the dead holder's lock
        pass


def test_environment_is_recorded():
    env = environment()
    assert {"torch", "cpu", "torch_threads", "exchange", "python"} <= set(env)
    json.dumps(env)
