"""Output read at an 80-column terminal (issue 41, item 2): in a real pty of 80 columns no line is wider
than 80 and no word (a run id, a path, a header) is split across lines; `--list` gives every task's
whole first sentence. The same command through a pipe is the reference for the words."""

from __future__ import annotations

import re

import invoking
import pytest
from invoking import REPO, invoke

COLUMNS = 80
COMMITTED = REPO / "results" / "h200-reference-27b-shape"


def on_terminal(*args: str) -> str:
    """`invoke ARGS` in a real pseudo-terminal 80 columns wide; its text."""
    return invoking.on_terminal(*args, columns=COLUMNS).text


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
