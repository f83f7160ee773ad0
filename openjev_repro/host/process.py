"""Run a command in its own process group and end the whole group at a deadline.

The group, not just the first pid, is what a timeout kills: servers fork workers and shells
start children, and any of them may hold the GPU.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import HostError

__all__ = ["CommandOutcome", "group_alive", "pid_exited", "process_stopped", "run_with_timeout", "stop_group"]


def pid_exited(pid: int) -> bool:
    """True when the pid is gone or a zombie (it has exited; only its parent has not reaped it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # exists, owned by someone else
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids of a process group, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def group_alive(pgid: int) -> bool:
    return bool(_group_members(pgid))


def _wait_group(pgid: int, timeout_s: float, leader: subprocess.Popen | None) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if leader is not None:
            leader.poll()  # reap the leader so it does not linger as a zombie
        if not group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def process_stopped(pid: int) -> bool:
    """True when the process is stopped (state T or t: SIGSTOP, SIGTSTP or a tracer)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("T", "t")


@dataclass(frozen=True)
class GroupStop:
    """What stopping a process group took: SIGTERM, SIGKILL after the grace period, and whether it is gone."""

    pgid: int
    sigterm: bool = False
    sigkill: bool = False
    group_exited: bool = True


def stop_group(pgid: int, grace_s: float, leader: subprocess.Popen | None = None) -> GroupStop:
    """SIGTERM to the group, `grace_s` to exit, then SIGKILL. Returns what was needed."""
    if not group_alive(pgid):
        return GroupStop(pgid)
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return GroupStop(pgid)
    with contextlib.suppress(ProcessLookupError):  # gone already: the wait below sees it at once
        os.killpg(pgid, signal.SIGCONT)  # a stopped member handles its SIGTERM only once continued
    if _wait_group(pgid, grace_s, leader):
        return GroupStop(pgid, sigterm=True)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return GroupStop(pgid, sigterm=True)
    return GroupStop(pgid, sigterm=True, sigkill=True, group_exited=_wait_group(pgid, 5.0, leader))


def _describe_status(code: int) -> tuple[int | None, str | None]:
    if code < 0:
        return None, signal.Signals(-code).name
    return code, None


@dataclass(frozen=True)
class CommandOutcome:
    """How a command run by `run_with_timeout` ended; `to_json()` is the record `invoke reserve --record` writes."""

    argv: list[str]
    pid: int  # also its process group: the command leads a new session
    exit_status: int | None
    signal: str | None  # the signal that ended it (SIGTERM, SIGKILL, ...), or None
    timed_out: bool
    timeout_s: float
    grace_s: float
    sigterm: bool  # its group was sent SIGTERM (at the deadline, or for stragglers)
    killed: bool  # ... and SIGKILL after the grace period
    group_exited: bool
    duration_s: float

    @property
    def stragglers_stopped(self) -> bool:
        """The command exited on its own but left members of its group, which were stopped."""
        return not self.timed_out and self.sigterm

    def to_json(self) -> dict[str, object]:
        return {"argv": self.argv, "pid": self.pid, "pgid": self.pid, "exit_status": self.exit_status,
                "signal": self.signal, "timed_out": self.timed_out, "timeout_s": self.timeout_s,
                "grace_s": self.grace_s, "stragglers_stopped": self.stragglers_stopped, "sigterm": self.sigterm,
                "killed": self.killed, "group_exited": self.group_exited, "duration_s": self.duration_s}


def run_with_timeout(
    cmd: list[str], timeout_s: float, grace_s: float = 10.0, env: dict[str, str] | None = None
) -> CommandOutcome:
    """Run `cmd` in a new session (its own process group); at `timeout_s` stop the whole group.

    Also stops members left behind when the leader exits on its own (they are ours too).
    Returns how it ended: exit status or signal, whether it timed out and how its group was stopped.
    """
    if not cmd:
        raise HostError("No command was given to run; put it after `--`.")
    started = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, start_new_session=True, env=env)
    except OSError as exc:
        raise HostError(f"Cannot start {cmd[0]!r}: {exc.strerror or exc}.") from exc
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    except BaseException:  # Ctrl-C or SIGTERM to us: do not leave the group running
        stop_group(proc.pid, grace_s, proc)
        raise
    stop = stop_group(proc.pid, grace_s, proc)  # the timed-out group, or stragglers after a normal exit
    proc.wait()
    status, sig = _describe_status(proc.returncode)
    return CommandOutcome(argv=list(cmd), pid=proc.pid, exit_status=status, signal=sig, timed_out=timed_out,
                          timeout_s=timeout_s, grace_s=grace_s, sigterm=stop.sigterm, killed=stop.sigkill,
                          group_exited=stop.group_exited, duration_s=round(time.monotonic() - started, 3))
