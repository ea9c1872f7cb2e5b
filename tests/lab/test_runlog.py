"""Run integrity: the lock, duplicate/missing-step detection, the environment record."""

import json
import subprocess
import sys

import pytest

from exchange.errors import InvalidArgument
from exchange.lab.runlog import MetricsLog, RunDir, RunLock, check_steps, environment


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


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
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


def test_run_dir_owns_fingerprint_lock_done_and_resume(tmp_path):
    d = tmp_path / "run"
    with RunDir(d, "aaaa", config={"x": 1}) as rd:
        assert json.loads((d / "config.json").read_text()) == {"fingerprint": "aaaa", "x": 1}
        with pytest.raises(InvalidArgument, match="locked by pid"):  # a second trainer is refused
            with RunLock(d):
                pass
        assert not rd.finished(2)
        log = MetricsLog(d / "metrics.jsonl")
        for s in range(2):
            log.append({"step": s})
        rd.finish(2, wall_s=1.23456)
    assert json.loads((d / "done.json").read_text()) == {"fingerprint": "aaaa", "wall_s": 1.235, "steps": 2}
    with RunDir(d, "aaaa") as rd:
        assert rd.finished(2)
        with pytest.raises(InvalidArgument, match="more than steps=1"):
            rd.finished(1)
        assert not rd.finished(3) and not (d / "done.json").exists()  # extended: resumes from its checkpoint
    with pytest.raises(InvalidArgument, match="another config"):
        with RunDir(d, "bbbb"):
            pass
    with RunLock(d):  # the refused entry released its lock
        pass
