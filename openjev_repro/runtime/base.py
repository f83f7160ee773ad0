"""The one interface every runtime implements: launch, ready, alive, stop."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .readiness import Readiness, poll_ready

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
    readiness: str = "status-ready"  # runtime/readiness.py: status-ready | any-2xx | first-inference
    endpoint: str = "/v1/systemone"  # polled by first-inference readiness
    model: str = "open-jev"  # named in the hint when a first inference is refused
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
    launched: bool = True  # False: a server the study reached by URL and neither started nor stopped

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

    readiness: Readiness | None = None  # how it became ready (set by wait_ready)

    def request_headers(self) -> dict[str, str]:
        """Headers every request to this backend carries (none; a `url` backend's come from the environment)."""
        return {}

    def base_url(self) -> str:
        host = f"[{self.spec.host}]" if ":" in self.spec.host else self.spec.host
        return f"http://{host}:{self.spec.port}"

    def wait_ready(self, timeout_s: float, poll_s: float = 0.2, probe: bytes | None = None) -> dict:
        """Poll until ready as spec.readiness says (`probe`: the first-inference request's body); fail
        fast if the backend dies meanwhile. Returns the health answer's JSON object ({} if none)."""
        spec = self.spec
        health, self.readiness = poll_ready(
            self, name=spec.name, kind=spec.readiness, base_url=self.base_url(), health=spec.health_path,
            endpoint=spec.endpoint, model=spec.model, probe=probe, timeout_s=timeout_s,
            log_hint=self.log_hint(), poll_s=poll_s, headers=self.request_headers())
        return health

    def log_hint(self) -> str:
        return f"Its log is {self.spec.log_path}."


class Runtime(ABC):
    name: str

    @abstractmethod
    def launch(self, spec: LaunchSpec) -> RunningBackend: ...


def poll_health(backend: RunningBackend, timeout_s: float, poll_s: float = 0.2) -> dict:
    """Poll the health path until it answers our contract (status "ready"); the health body."""
    spec = backend.spec
    health, backend.readiness = poll_ready(
        backend, name=spec.name, kind="status-ready", base_url=backend.base_url(), health=spec.health_path,
        endpoint=spec.endpoint, model=spec.model, probe=None, timeout_s=timeout_s, log_hint=backend.log_hint(),
        poll_s=poll_s, headers=backend.request_headers())
    return health
