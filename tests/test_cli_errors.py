"""cli.user_errors: the user's input becomes one `error:` line; a bug of ours a traceback and a request to report it."""

from __future__ import annotations

import errno

import pytest
from invoke import Exit

from openjev_repro.cli import BUG_EXIT, user_errors
from openjev_repro.errors import EvidenceError


def _task(exc: BaseException):
    @user_errors
    def body(c, json_=False):
        raise exc

    return body


@pytest.mark.parametrize("exc, line", [
    (EvidenceError("run/state.json is missing."), "error: run/state.json is missing."),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "r.yaml"), "error: r.yaml: No such file or directory."),
    (IsADirectoryError(errno.EISDIR, "Is a directory", "runs"), "error: runs is a directory; give a file."),
    (OSError(errno.ENOSPC, "No space left on device"), "error: No space left on device."),
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "error: Connection refused."),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
     "error: a file is not UTF-8 text (invalid start byte at byte 0); give the file the option expects."),
])
def test_input_errors_are_one_line(exc, line, capsys):
    with pytest.raises(Exit) as info:
        _task(exc)(None)
    assert (info.value.message, info.value.code) == (line, 1)
    assert capsys.readouterr().err == ""  # no traceback


@pytest.mark.parametrize("exc", [KeyError("figures"), AttributeError("'NoneType' object has no attribute 'get'"),
                                 TypeError("unsupported operand"), ValueError("math domain error"),
                                 OSError("bad file descriptor without a name")])
def test_a_bug_prints_its_traceback_and_asks_for_a_report(exc, capsys):
    with pytest.raises(Exit) as info:
        _task(exc)(None)
    assert info.value.code == BUG_EXIT
    assert info.value.message.startswith(f"error: internal error ({type(exc).__name__}), a bug in openjev-repro")
    assert "please report it" in info.value.message
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and type(exc).__name__ in err


def test_a_bug_under_json_is_still_json_on_stdout(capsys):
    with pytest.raises(Exit) as info:
        _task(KeyError("x"))(None, json_=True)
    out = capsys.readouterr()
    assert info.value.code == BUG_EXIT and out.out.startswith('{"error": "internal error (KeyError)')
    assert "Traceback" in out.err
