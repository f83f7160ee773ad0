"""Output read at an 80-column terminal (issue 41, item 2): in a real pty of 80 columns no line is wider
than 80 and no word (a run id, a path, a header) is split across lines; `--list` gives every task's
whole first sentence. The same command through a pipe is the reference for the words."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import sys
import termios

import pytest
from invoking import REPO, invoke

COLUMNS = 80
COMMITTED = REPO / "results" / "h200-reference-27b-shape"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(*args: str, columns: int = COLUMNS) -> str:
    """`invoke ARGS` in a real pseudo-terminal `columns` wide; its output with colours removed."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its stdin, stdout and stderr
        os.chdir(REPO)
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR")}
        os.execve(sys.executable, [sys.executable, "-m", "invoke", *args], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    chunks = []
    while select.select([fd], [], [], 120)[0]:
        try:
            data = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    return ANSI.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r\n", "\n")


COMMANDS = [
    ("verify", "--run", str(COMMITTED / "run"), "--pubkey", str(COMMITTED / "signing-key.pub")),
    ("claims", "--file", "manifests/published/openjev-repro-h200-reference-rerun-2026-11-29.yaml"),
    ("verify", "--help"),
    ("study", "--help"),
    ("compare", "--help"),
    ("plan", "--recipe", "recipes/demo.yaml"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_at_80_columns_no_line_is_wider_and_no_word_is_split(args):
    shown = on_terminal(*args)
    lines = shown.splitlines()
    assert lines, shown
    wide = [line for line in lines if len(line) > COLUMNS and not line.startswith("Usage: inv[oke]")]
    assert not wide, "\n".join(wide)
    piped = invoke(*args).stdout  # unwrapped: every word whole
    on_screen = set(shown.split())
    split = [word for word in piped.split() if word not in on_screen and not set(word) <= set("─━┃│┏┓┗┛┡┩╇╋")]
    assert not split, split[:10]


def test_list_gives_every_task_its_whole_first_sentence():
    shown = on_terminal("--list")
    entries = re.split(r"\n  (?=\S)", shown.split("Available tasks:", 1)[1].strip())
    assert len(entries) > 20
    for entry in entries:
        summary = " ".join(entry.split()[1:])
        assert summary.endswith((".", ")")), entry  # never cut mid-sentence
    assert all(len(line) <= COLUMNS for line in shown.splitlines())
