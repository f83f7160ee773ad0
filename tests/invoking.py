"""The one way tests run `invoke TASK ...`: a real subprocess of this interpreter, output captured.

    invoke("verify", "--run", str(run), "--pubkey", str(key))
    invoke("plan", "--recipe", str(recipe), "--json", cwd=tmp_path, timeout=60)

Runs `python -m invoke` in `cwd` (the repository by default, where tasks.py is) with stdin closed,
text output captured and the exit status left to the test to assert, and no .pyc files written
into the tree. `env` adds to (never replaces) this process's environment; a test that reads rich
output at a fixed width passes `env={"COLUMNS": "100"}`.

`on_terminal(ARGS, columns=80)` runs it as a user at a terminal sees it: in a real pseudo-terminal of
that width (stdin, stdout and stderr), colours and links removed; `.lines` are the screen's lines.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["INVOKE", "REPO", "Screen", "invoke", "on_terminal"]

REPO = Path(__file__).resolve().parents[1]
INVOKE = [sys.executable, "-m", "invoke"]


def invoke(*args: str, cwd: Path = REPO, timeout: float | None = 120, env: Mapping[str, str | None] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    """`invoke ARGS...` as a subprocess; returns the finished process (returncode, stdout, stderr).

    `env` adds variables to this process's environment; a value of None removes that variable.
    """
    merged = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    full_env = {k: v for k, v in merged.items() if v is not None}
    return subprocess.run([*INVOKE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=full_env, stdin=subprocess.DEVNULL, check=False)


ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")  # colours, cursor moves, hyperlinks
TERMINAL_ONLY = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TERM")


@dataclass(frozen=True)
class Screen:
    """What a command left on a terminal: its exit status and its text (escape codes removed, CRLF as LF)."""

    code: int
    text: str

    @property
    def lines(self) -> list[str]:
        """The lines as the terminal shows them (a carriage return redraws its line: the last drawing counts)."""
        return [line.split("\r")[-1] for line in self.text.split("\n")]


def on_terminal(*args: str, columns: int, cwd: Path = REPO, timeout: float = 300) -> Screen:
    """`invoke ARGS...` in a real pseudo-terminal `columns` wide, as a user at a terminal runs it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_ONLY}
    proc = subprocess.Popen([*INVOKE, *args], cwd=cwd, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                            env={**env, "TERM": "xterm-256color", "PYTHONDONTWRITEBYTECODE": "1"})
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO once the child side closes
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    code = proc.wait(timeout=timeout)
    return Screen(code, ESCAPES.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r\n", "\n"))
