"""Cause 4 of issue 25: GPU lock files never follow links, never chmod an existing file, and a
malformed holder is reported as such (one error line), for real through `invoke reserve`."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest
from advkit import invoke, one_error_line

GPU = "GPU-cbf66259-f4ab-0ede-1811-82037dde5924"


def _reserve(lock_dir, *extra):
    return invoke("reserve", "--gpu-ids", GPU, *extra, "--", "true", env={"OPENJEV_LOCK_DIR": str(lock_dir)})


def test_a_planted_symlink_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("private\n")
    victim.chmod(0o600)
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / f"{GPU}.lock").symlink_to(victim)
    line = one_error_line(_reserve(locks))
    assert line == (f"error: The GPU lock file {locks / (GPU + '.lock')} is a symbolic link; refused. Remove it, "
                    "or set OPENJEV_LOCK_DIR to a directory only lock files live in.")
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600 and victim.read_text() == "private\n"


@pytest.mark.parametrize("kind, problem", [("hardlink", "has 2 hard links"), ("fifo", "is not a regular file")])
def test_a_hard_link_or_fifo_is_refused(tmp_path, kind, problem):
    locks = tmp_path / "locks"
    locks.mkdir()
    lock = locks / f"{GPU}.lock"
    if kind == "hardlink":
        victim = tmp_path / "victim"
        victim.write_text("private\n")
        os.link(victim, lock)
    else:
        os.mkfifo(lock)
    line = one_error_line(_reserve(locks))
    assert line.startswith(f"error: The GPU lock file {lock} {problem}; refused.")
    if kind == "hardlink":
        assert victim.read_text() == "private\n"


def test_an_existing_lock_file_is_never_chmod_ed(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    lock = locks / f"{GPU}.lock"
    lock.write_text("")
    lock.chmod(0o600)
    proc = _reserve(locks)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600


HOLD = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b'{"format_version": 1, "pid": [1], "note": "x"}')
    print("held", flush=True)
    sys.stdin.read()
""")


def test_a_malformed_holder_is_reported_as_such(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(locks / f"{GPU}.lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        line = one_error_line(_reserve(locks, "--wait", "0s"))
        assert line.startswith(f"error: GPU {GPU} is reserved by a holder whose lock file is malformed "
                               "(pid is [1], not a number) and was not released within 0 s.")
    finally:
        holder.kill()
        holder.wait()
