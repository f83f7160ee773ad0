"""A study owns its processes: a supervising reaper ends them when the study dies.

Backends run in their own session (so a stop reaches their whole process group), which
also means nothing ends them when `invoke study` itself dies. The reaper closes that gap:

- `Reaper.start()` starts `python -m openjev_repro.host.reaper` in its own session, with
  SIGINT, SIGTERM and SIGHUP ignored, reading commands from a pipe held only by the study.
- The study registers each backend's process group (`watch_group`) and each container
  (`watch_container`) as it starts them, and forgets them once it has stopped them.
- When the pipe reaches end of file, the study has exited for whatever reason (kill -9
  included: the kernel closes its descriptors); the reaper then sends SIGKILL to every
  group still registered, removes every registered container (`docker rm -f`), and exits.

Each backend leader also gets the Linux parent-death signal (PR_SET_PDEATHSIG = SIGKILL)
in `preexec`, so it dies with the study even if the reaper itself was killed first.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import IO, Self

from ..errors import DockerError

__all__ = ["Reaper", "die_with_parent"]

_PR_SET_PDEATHSIG = 1
_PRCTL: Callable[..., int] | None
try:  # looked up once here: a preexec function must not load libraries (other threads may hold locks)
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the thread that started it exits (Linux only; else nothing)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


class Reaper:
    """The study side: a pipe to the reaper process."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self._pipe: IO[str] | None = None

    def start(self) -> Self:
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "openjev_repro.host.reaper"], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, start_new_session=True, text=True)
        except OSError:  # no reaper: the leaders' parent-death signal still ends them with the study
            self.proc = None
            return self
        self._pipe = self.proc.stdin
        return self

    def _send(self, line: str) -> None:
        if self._pipe is None:
            return
        try:
            self._pipe.write(line + "\n")
            self._pipe.flush()
        except (BrokenPipeError, OSError):
            self._pipe = None  # the reaper is gone; PDEATHSIG still covers the leaders

    def watch_group(self, pgid: int) -> None:
        self._send(f"group {int(pgid)}")

    def forget_group(self, pgid: int) -> None:
        self._send(f"forget-group {int(pgid)}")

    def watch_container(self, ident: str) -> None:
        self._send(f"container {ident}")

    def forget_container(self, ident: str) -> None:
        self._send(f"forget-container {ident}")

    def close(self) -> None:
        """A clean end: everything was stopped by the study; the reaper exits on EOF (killing any leftovers)."""
        if self._pipe is not None:
            try:
                self._pipe.close()
            except OSError:
                pass
            self._pipe = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reap(groups: set[int], containers: set[str]) -> None:
    for pgid in sorted(groups):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if not containers:
        return
    try:
        import docker

        from ..images.daemon import connect

        client = connect()
    except (ImportError, DockerError):  # no SDK or no daemon: nothing the reaper can remove
        return
    for ident in sorted(containers):
        # already gone, or the daemon refused or went away (requests' errors are OSErrors): nothing more to do
        with contextlib.suppress(docker.errors.DockerException, OSError):
            client.containers.get(ident).remove(force=True)


class _Watched:
    """The process groups and containers the study has registered and not yet forgotten."""

    def __init__(self) -> None:
        self.groups: set[int] = set()
        self.containers: set[str] = set()

    def group(self, arg: str) -> None:
        if arg.isdigit() and int(arg) > 1:  # never group 0 or 1 (ours, init's)
            self.groups.add(int(arg))

    def forget_group(self, arg: str) -> None:
        if arg.isdigit():
            self.groups.discard(int(arg))

    def container(self, arg: str) -> None:
        if arg:
            self.containers.add(arg)

    def forget_container(self, arg: str) -> None:
        self.containers.discard(arg)

    def read(self, line: str) -> None:
        """One command of the pipe ("VERB ARG"); an unknown verb is ignored."""
        verb, _, arg = line.strip().partition(" ")
        handler = _COMMANDS.get(verb)
        if handler is not None:
            handler(self, arg)


_COMMANDS: dict[str, Callable[[_Watched, str], None]] = {
    "group": _Watched.group, "forget-group": _Watched.forget_group,
    "container": _Watched.container, "forget-container": _Watched.forget_container,
}


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the study's end (EOF) ends the reaper
    watched = _Watched()
    for line in sys.stdin:
        watched.read(line)
    _reap(watched.groups, watched.containers)


if __name__ == "__main__":
    main()
