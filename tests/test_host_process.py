"""Process groups and timeouts, with real subprocesses."""

import os
import sys
import time

import pytest

from openjev_repro.errors import HostError
from openjev_repro.host import group_alive, run_with_timeout
from openjev_repro.host.process import pid_exited


def test_exit_status_is_recorded():
    out = run_with_timeout(["sh", "-c", "exit 3"], timeout_s=30, grace_s=1)
    assert (out.exit_status, out.signal, out.timed_out, out.killed) == (3, None, False, False)
    assert out.to_json()["pgid"] == out.pid and out.group_exited


def test_a_process_that_ignores_sigterm_is_killed_at_its_timeout():
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    started = time.monotonic()
    out = run_with_timeout([sys.executable, "-c", ignore], timeout_s=1.0, grace_s=0.5)
    assert out.timed_out and out.sigterm and out.killed
    assert out.signal == "SIGKILL" and out.exit_status is None
    assert out.group_exited and pid_exited(out.pid)
    assert time.monotonic() - started < 10


def test_a_process_that_honours_sigterm_is_not_killed(tmp_path):
    out = run_with_timeout(["sleep", "30"], timeout_s=0.5, grace_s=5)
    assert out.timed_out and out.sigterm and not out.killed
    assert out.signal == "SIGTERM"


def test_the_whole_group_is_stopped_including_grandchildren(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    out = run_with_timeout(["sh", "-c", script], timeout_s=1.0, grace_s=1)
    grandchild = int(pidfile.read_text())
    assert out.timed_out and pid_exited(grandchild)
    assert not group_alive(out.pid)


def test_stragglers_left_after_a_normal_exit_are_stopped(tmp_path):
    pidfile = tmp_path / "straggler.pid"
    out = run_with_timeout(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; exit 0"], timeout_s=30, grace_s=1)
    assert out.exit_status == 0 and not out.timed_out
    assert out.stragglers_stopped and pid_exited(int(pidfile.read_text()))


def test_the_command_runs_in_a_new_session():
    leader = f"import os, sys; sys.exit(0 if os.getpgrp() == os.getpid() == os.getsid(0) != {os.getpgrp()} else 1)"
    out = run_with_timeout([sys.executable, "-c", leader], 30, 1)
    assert out.exit_status == 0


def test_no_command_and_a_missing_command_are_clear_errors():
    with pytest.raises(HostError, match="No command was given"):
        run_with_timeout([], 1)
    with pytest.raises(HostError, match="Cannot start 'no-such-program-xyz'"):
        run_with_timeout(["no-such-program-xyz"], 1)
