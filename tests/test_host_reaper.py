"""The reaper's command pipe, with real process groups: what it was told to watch it ends at EOF,
what it was told to forget it leaves alone, and lines it does not understand change nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from openjev_repro.host.process import pid_exited
from openjev_repro.host.reaper import Reaper


def _sleeper() -> subprocess.Popen:
    """A process leading its own process group (as a backend does), sleeping until it is killed."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)


def test_a_watched_group_is_killed_at_eof_and_a_forgotten_one_is_left_alone() -> None:
    watched, forgotten = _sleeper(), _sleeper()
    try:
        reaper = Reaper().start()
        assert reaper.proc is not None
        reaper.watch_group(watched.pid)
        reaper.watch_group(forgotten.pid)
        reaper.forget_group(forgotten.pid)
        reaper._send("group 1")  # never init's group, nor group 0
        reaper._send("no-such-verb 123")
        reaper.close()  # EOF: the reaper kills what it still watches, then exits
        assert reaper.proc.returncode == 0
        assert watched.wait(timeout=10) == -signal.SIGKILL
        assert not pid_exited(forgotten.pid) and forgotten.poll() is None
    finally:
        for proc in (watched, forgotten):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
