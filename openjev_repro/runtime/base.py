"""The one interface every runtime implements: launch, ready, alive, stop."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import BackendCrashed, BackendNotReady

__all__ = ["ExitRecord", "LaunchSpec", "RunningBackend", "Runtime", "poll_health"]


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a runtime needs to start one backend configuration."""

    name: str  # backend name from the recipe
    argv: list[str]  # placeholders already substituted
    env: dict[str, str]  # the recipe's environment (added to a minimal base)
    host: str  # loopback address the client connects to
    port: int  # port the client connects to (a free one, chosen by the runner)
    log_path: Path  # stdout+stderr of the backend go here
    health_path: str = "/health"
    image: str | None = None  # docker only
    read_only_mounts: tuple[Path, ...] = ()  # verified inputs, mounted read-only (docker)
    gpu_uuid: str | None = None
    numa_node: int | None = None
    cpus: str | None = None  # e.g. "0-15"
    workdir: Path | None = None


@dataclass
class ExitRecord:
    """How a started backend ended; written to processes.json and the manifest."""

    name: str
    runtime: str
    ident: str  # pid or container id
    exit_status: int | None  # None if it could not be determined
    signal: str | None = None  # the signal that ended it, if any
    stopped_by_us: bool = False  # we sent SIGTERM (and maybe SIGKILL)
    killed: bool = False  # SIGKILL was needed after the grace period
    intentional: bool = False  # ended by our own stop, not a failure
    exited: bool = True  # verified gone afterwards
    binding: dict = field(default_factory=dict)  # effective NUMA/CPU/GPU binding

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def pid(self) -> int | None:
        """The process id of a local process (None for a container)."""
        return int(self.ident) if self.runtime == "local" else None


class RunningBackend(ABC):
    """A started backend. Stop is idempotent and always returns the exit record."""

    spec: LaunchSpec

    @abstractmethod
    def alive(self) -> bool: ...

    @abstractmethod
    def stop(self, grace_s: float) -> ExitRecord: ...

    @abstractmethod
    def describe_exit(self) -> str:
        """A sentence saying how the backend died, with the tail of its log, for error messages."""

    @property
    def pid(self) -> int | None:
        """The host process id of a local process, where its NUMA binding can be read; None for a container."""
        return None

    def wait_ready(self, timeout_s: float, poll_s: float = 0.2) -> dict:
        """Poll /health until it says ready; fail fast if the backend dies meanwhile."""
        return poll_health(self, timeout_s, poll_s)


class Runtime(ABC):
    name: str

    @abstractmethod
    def launch(self, spec: LaunchSpec) -> RunningBackend: ...


def poll_health(backend: RunningBackend, timeout_s: float, poll_s: float = 0.2) -> dict:
    spec = backend.spec
    url = f"http://{spec.host}:{spec.port}{spec.health_path}"
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        if not backend.alive():
            raise BackendCrashed(f"Backend {spec.name} exited before it was ready. {backend.describe_exit()}")
        try:
            with urllib.request.urlopen(url, timeout=2.0) as resp:
                body = json.loads(resp.read() or b"{}")
                if resp.status == 200 and body.get("status") == "ready":
                    return body
                last = f"HTTP {resp.status} {body}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = str(getattr(exc, "reason", exc))
        time.sleep(poll_s)
    raise BackendNotReady(
        f"Backend {spec.name} was not ready within {timeout_s:.0f} s at {url} (last answer: {last}). "
        f"Its log is {spec.log_path}."
    )
