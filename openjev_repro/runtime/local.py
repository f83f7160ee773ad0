"""Local runtime: each backend is a subprocess in its own process group."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from ..host.process import process_stopped, stop_group
from ..host.reaper import Reaper, die_with_parent
from .base import ExitRecord, LaunchSpec, RunningBackend, Runtime

__all__ = ["LocalBackend", "LocalRuntime", "tail"]

# Variables a backend may need from our environment; everything else comes from the recipe,
# so two hosts run the same configuration.
_PASSTHROUGH = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "CUDA_HOME", "LD_LIBRARY_PATH",
                "HF_HOME", "PYTHONPATH", "VIRTUAL_ENV")


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class LocalBackend(RunningBackend):
    def __init__(self, spec: LaunchSpec, prefix: list[str], reaper: Reaper | None = None) -> None:
        self.spec = spec
        env = {k: os.environ[k] for k in _PASSTHROUGH if k in os.environ}
        env.update(spec.env)
        if spec.gpu_uuid:  # the checked, reserved GPU (the recipe's or the run-time override) is the only one seen
            env["CUDA_VISIBLE_DEVICES"] = spec.gpu_uuid
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.argv = prefix + spec.argv
        with open(spec.log_path, "ab") as log:  # the child keeps its own descriptor of the log
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=spec.workdir, start_new_session=True,  # own process group: we stop all of it
                # and it dies with the study, even on kill -9 (reaper: the whole group); die_with_parent
                # only calls prctl, so the threads of the study cannot deadlock the child before exec
                preexec_fn=die_with_parent,  # noqa: PLW1509
            )
        self.pgid = self.proc.pid
        self.reaper = reaper
        if reaper is not None:
            reaper.watch_group(self.pgid)
        self._record: ExitRecord | None = None
        self.binding: dict = {}

    def alive(self) -> bool:
        """Running and not stopped: a SIGSTOPped backend answers nothing, so it counts as dead."""
        return self.proc.poll() is None and not process_stopped(self.proc.pid)

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def describe_exit(self) -> str:
        code = self.proc.poll()
        how = "is stopped (SIGSTOP or a debugger: it answers nothing)" if code is None and process_stopped(
            self.proc.pid) else "is still running" if code is None else (
            f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}")
        return f"The process {how}. Last lines of {self.spec.log_path}:\n{tail(self.spec.log_path)}"

    def stop(self, grace_s: float) -> ExitRecord:
        if self._record is not None:
            return self._record
        stopped_by_us = self.proc.poll() is None
        # The whole group, not just the leader: servers fork workers, and children may outlive it.
        group = stop_group(self.pgid, grace_s, leader=self.proc)
        self.proc.wait()
        if self.reaper is not None and group.group_exited:
            self.reaper.forget_group(self.pgid)
        code = self.proc.returncode
        sig = signal.Signals(-code).name if code < 0 else None
        self._record = ExitRecord(
            name=self.spec.name, runtime="local", ident=str(self.proc.pid), exit_status=code, signal=sig,
            stopped_by_us=stopped_by_us, killed=group.sigkill,
            intentional=stopped_by_us and (sig in ("SIGTERM", "SIGKILL") or code in (0, 143)),
            exited=group.group_exited, binding=self.binding,
        )
        return self._record


class LocalRuntime(Runtime):
    name = "local"

    def __init__(self, prefix: list[str] | None = None, reaper: Reaper | None = None) -> None:
        self.prefix = prefix or []  # e.g. numactl --membind=0 --physcpubind=0-15
        self.reaper = reaper  # the study's reaper: ends every group we start if the study dies

    def launch(self, spec: LaunchSpec) -> LocalBackend:
        backend = LocalBackend(spec, self.prefix, self.reaper)
        backend.binding = {"prefix": self.prefix}
        return backend
