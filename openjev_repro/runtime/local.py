"""Local runtime: each backend is a subprocess in its own process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from .base import ExitRecord, LaunchSpec, RunningBackend, Runtime

__all__ = ["LocalRuntime", "LocalBackend", "tail"]

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
    def __init__(self, spec: LaunchSpec, prefix: list[str]) -> None:
        self.spec = spec
        env = {k: os.environ[k] for k in _PASSTHROUGH if k in os.environ}
        env.update(spec.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._log = open(spec.log_path, "ab")
        self.argv = prefix + spec.argv
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=spec.workdir, start_new_session=True,  # own process group: we stop all of it
        )
        self.pgid = self.proc.pid
        self._record: ExitRecord | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def describe_exit(self) -> str:
        code = self.proc.poll()
        how = "is still running" if code is None else (
            f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}")
        return f"The process {how}. Last lines of {self.spec.log_path}:\n{tail(self.spec.log_path)}"

    def stop(self, grace_s: float) -> ExitRecord:
        if self._record is not None:
            return self._record
        stopped_by_us = killed = False
        if self.proc.poll() is None:
            stopped_by_us = True
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                killed = True
                self._signal_group(signal.SIGKILL)
                self.proc.wait()
        # Children that outlived the leader still belong to the group: end them too.
        group_left = self._group_alive()
        if group_left:
            self._signal_group(signal.SIGKILL)
            time.sleep(0.1)
        code = self.proc.returncode
        sig = signal.Signals(-code).name if code is not None and code < 0 else None
        intentional = stopped_by_us and (sig in ("SIGTERM", "SIGKILL") or code in (0, 143, -15))
        self._log.close()
        self._record = ExitRecord(
            name=self.spec.name, runtime="local", ident=str(self.proc.pid), exit_status=code, signal=sig,
            stopped_by_us=stopped_by_us, killed=killed, intentional=intentional,
            exited=not self._group_alive(), binding=self.binding,
        )
        return self._record

    binding: dict = {}

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # A zombie leader keeps the group "alive" until reaped; we reaped it via wait().
        return _group_has_live_members(self.pgid)


def _group_has_live_members(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


class LocalRuntime(Runtime):
    name = "local"

    def __init__(self, prefix: list[str] | None = None) -> None:
        self.prefix = prefix or []  # e.g. numactl --membind=0 --physcpubind=0-15

    def launch(self, spec: LaunchSpec) -> LocalBackend:
        backend = LocalBackend(spec, self.prefix)
        backend.binding = {"prefix": self.prefix}
        return backend
