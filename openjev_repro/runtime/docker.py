"""Docker runtime: one container per backend configuration.

The runner builds LaunchSpec.argv for the host (`--host 127.0.0.1`, `{python}` = the host's
interpreter). Inside a container the backend must listen on every interface of its own network
namespace so that docker can forward the published port, and the interpreter is the image's.
So this runtime rewrites exactly two things, and records both in the exit record's binding:

- `--host 127.0.0.1` / `--host=127.0.0.1` become `--host 0.0.0.0`, and a loopback
  `OPEN_JEV_HOST` / `OMNI_JEV_BIND` in the environment likewise;
- an absolute argv[0] whose name starts with `python` loses its directory (`/x/.venv/bin/python`
  becomes `python`, found on the image's PATH).

The port stays the same number inside and out and is published on 127.0.0.1 only. The GPU is
chosen by UUID (device request), CPUs and memory nodes from the recipe's NUMA controls, inputs
are mounted read-only at their own absolute paths, no privileges, every capability dropped.
docker-init is PID 1 so SIGTERM reaches the backend; stop sends SIGTERM, waits the grace
period, then SIGKILL. Logs stream to spec.log_path; the container is removed afterwards.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import msgspec

from ..errors import DockerError
from ..images.daemon import connect, get_image
from .base import ExitRecord, LaunchSpec, RunningBackend, Runtime

__all__ = ["DockerBackend", "DockerRuntime", "container_argv", "container_env"]

_LOOPBACK = ("127.0.0.1", "localhost")
_INSIDE = "0.0.0.0"


def container_argv(argv: list[str]) -> list[str]:
    """The host argv rewritten for the container (see the module docstring)."""
    out = list(argv)
    if out and out[0].startswith("/") and Path(out[0]).name.startswith("python"):
        out[0] = Path(out[0]).name
    for i, arg in enumerate(out):
        if arg == "--host" and i + 1 < len(out) and out[i + 1] in _LOOPBACK:
            out[i + 1] = _INSIDE
        elif arg.startswith("--host=") and arg.split("=", 1)[1] in _LOOPBACK:
            out[i] = f"--host={_INSIDE}"
    return out


def _inside_host(value: str) -> str:
    return _INSIDE if value in _LOOPBACK else value


def _inside_bind(value: str) -> str:
    host, colon, port = value.rpartition(":")
    return f"{_INSIDE}:{port}" if colon and host in _LOOPBACK else value


# Environment variables that name the address a server listens on: loopback means every interface inside.
_ADDRESS_VARIABLES = {"OPEN_JEV_HOST": _inside_host, "OMNI_JEV_BIND": _inside_bind}


def container_env(env: dict[str, str]) -> dict[str, str]:
    out = {"PYTHONUNBUFFERED": "1", **env}
    return {name: _ADDRESS_VARIABLES.get(name, str)(value) for name, value in out.items()}


def _create_kwargs(spec: LaunchSpec) -> dict:
    import docker

    workdir = spec.workdir is not None and any(Path(spec.workdir).is_relative_to(p) for p in spec.read_only_mounts)
    gpus = [docker.types.DeviceRequest(driver="nvidia", device_ids=[spec.gpu_uuid], capabilities=[["gpu"]])
            ] if spec.gpu_uuid else None
    optional = {"working_dir": str(spec.workdir) if workdir else None, "device_requests": gpus,
                "cpuset_cpus": spec.cpus or None,
                "cpuset_mems": str(spec.numa_node) if spec.numa_node is not None else None}
    return {
        "command": container_argv(spec.argv),
        "environment": container_env(spec.env),
        "ports": {f"{spec.port}/tcp": ("127.0.0.1", spec.port)},
        "volumes": {str(p): {"bind": str(p), "mode": "ro"} for p in spec.read_only_mounts},
        "cap_drop": ["ALL"],
        "privileged": False,
        "security_opt": ["no-new-privileges"],
        "init": True,  # docker-init as PID 1 forwards SIGTERM; a bare PID 1 would ignore it
        "user": f"{os.getuid()}:{os.getgid()}",
        "labels": {"io.openjev-repro.backend": spec.name},
        "detach": True,
        **{key: value for key, value in optional.items() if value is not None},
    }


def _signal_name(code: int | None) -> str | None:
    if code is None or code <= 128:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None


class _DeviceRequest(msgspec.Struct):
    device_ids: list[str] | None = msgspec.field(default=None, name="DeviceIDs")


class _HostPort(msgspec.Struct):
    host_ip: str = msgspec.field(default="", name="HostIp")
    host_port: str = msgspec.field(default="", name="HostPort")


class _HostConfig(msgspec.Struct):
    """What the runtime reads of a container's HostConfig (the Docker Engine API's keys; others ignored)."""

    cpuset_cpus: str | None = msgspec.field(default=None, name="CpusetCpus")
    cpuset_mems: str | None = msgspec.field(default=None, name="CpusetMems")
    device_requests: list[_DeviceRequest] | None = msgspec.field(default=None, name="DeviceRequests")
    port_bindings: dict[str, list[_HostPort] | None] | None = msgspec.field(default=None, name="PortBindings")

    @property
    def gpu_uuids(self) -> list[str]:
        """The GPU UUIDs of the container's device requests (HostConfig.DeviceRequests[].DeviceIDs)."""
        return [d for r in self.device_requests or [] for d in r.device_ids or []]


class _State(msgspec.Struct):
    """A container's State (Docker Engine API): "removed" when the container or the daemon is gone."""

    status: str = msgspec.field(default="removed", name="Status")
    exit_code: int | None = msgspec.field(default=None, name="ExitCode")
    oom_killed: bool = msgspec.field(default=False, name="OOMKilled")
    error: str = msgspec.field(default="", name="Error")


class _Inspect(msgspec.Struct):
    state: _State = msgspec.field(default_factory=_State, name="State")
    host_config: _HostConfig = msgspec.field(default_factory=_HostConfig, name="HostConfig")


def _inspect(attrs: object) -> _Inspect:
    """The container's inspect document as far as the runtime reads it; DockerError for another shape."""
    try:
        return msgspec.convert(attrs or {}, _Inspect)
    except msgspec.ValidationError as exc:
        raise DockerError(f"Docker described a container in an unexpected shape: {exc}.") from None


class DockerBackend(RunningBackend):
    def __init__(self, client, spec: LaunchSpec, reaper=None) -> None:
        import docker

        self.spec, self.client, self.reaper = spec, client, reaper
        self._record: ExitRecord | None = None
        if spec.image is None:
            raise DockerError(f"Backend {spec.name} runs in docker but names no image.")
        image = get_image(client, spec.image)
        try:
            self.container = client.containers.create(image.id, **_create_kwargs(spec))
        except docker.errors.APIError as exc:
            raise DockerError(f"Docker could not create the container for {spec.name}: {exc.explanation or exc}.") from exc
        self.image_id = image.id
        if reaper is not None:  # removed by the study's reaper if the study dies (host/reaper.py)
            reaper.watch_container(self.container.id)
        try:
            self.container.start()
        except docker.errors.APIError as exc:
            self.container.remove(force=True)
            raise DockerError(f"Docker could not start the container for {spec.name}: {exc.explanation or exc}.") from exc
        self._log_thread = threading.Thread(target=self._stream_logs, daemon=True)
        self._log_thread.start()

    def _stream_logs(self) -> None:
        with open(self.spec.log_path, "ab") as fh:
            try:
                for chunk in self.container.logs(stream=True, follow=True):
                    fh.write(chunk)
                    fh.flush()
            except Exception as exc:  # noqa: BLE001 - the container vanished under us (docker, requests or urllib3 errors); say so in the log
                fh.write(f"\n[openjev-repro] log stream ended: {exc}\n".encode())

    def _state(self) -> _State:
        import docker

        try:
            self.container.reload()
        except (docker.errors.DockerException, OSError):  # removed, or the daemon is gone
            return _State()
        return _inspect(self.container.attrs).state

    def alive(self) -> bool:
        return self._state().status in ("created", "running", "restarting")

    def describe_exit(self) -> str:
        state = self._state()
        how = "is still running" if state.status == "running" else f"exited with status {state.exit_code}"
        if state.oom_killed:
            how += " (killed: out of memory)"
        if state.error:
            how += f" ({state.error})"
        self._log_thread.join(timeout=2)
        from .local import tail

        return f"Container {self.container.short_id} {how}. Last lines of {self.spec.log_path}:\n{tail(self.spec.log_path)}"

    @property
    def binding(self) -> dict:
        host = _inspect(self.container.attrs).host_config
        return {
            "container_id": self.container.id,
            "image_id": self.image_id,
            "cpuset_cpus": host.cpuset_cpus or None,
            "cpuset_mems": host.cpuset_mems or None,
            "gpu_uuids": host.gpu_uuids,
            "ports": msgspec.to_builtins(host.port_bindings or {}),
            "argv_in_container": container_argv(self.spec.argv),
            "read_only_mounts": [str(p) for p in self.spec.read_only_mounts],
        }

    def _wait(self, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self._state()
            if state.status in ("exited", "dead", "removed"):
                return state.exit_code
            time.sleep(0.1)
        return None

    def stop(self, grace_s: float) -> ExitRecord:
        if self._record is not None:
            return self._record
        binding = self.binding
        stopped_by_us = killed = False
        if self.alive():
            stopped_by_us = True
            self.container.kill(signal="SIGTERM")
            if self._wait(grace_s) is None:
                killed = True
                self.container.kill(signal="SIGKILL")
                self._wait(30)
        code = self._state().exit_code
        self._log_thread.join(timeout=5)
        self.container.remove(force=True)
        if self.reaper is not None:
            self.reaper.forget_container(self.container.id)
        sig = _signal_name(code)
        self._record = ExitRecord(
            name=self.spec.name, runtime="docker", ident=self.container.id, exit_status=code, signal=sig,
            stopped_by_us=stopped_by_us, killed=killed,
            intentional=stopped_by_us and (code in (0, 143, 137) or sig in ("SIGTERM", "SIGKILL")),
            exited=self._gone(), binding=binding,
        )
        return self._record

    def _gone(self) -> bool:
        import docker

        try:
            self.client.containers.get(self.container.id)
        except docker.errors.NotFound:
            return True
        return False


class DockerRuntime(Runtime):
    name = "docker"

    def __init__(self, client=None, reaper=None) -> None:
        self._client = client
        self.reaper = reaper  # the study's reaper (host/reaper.py), or None

    @property
    def client(self):
        if self._client is None:
            self._client = connect()
        return self._client

    def launch(self, spec: LaunchSpec) -> DockerBackend:
        if not spec.image:
            raise DockerError(f"Backend {spec.name} runs with runtime docker but names no image; set `image:` in the recipe.")
        return DockerBackend(self.client, spec, self.reaper)
