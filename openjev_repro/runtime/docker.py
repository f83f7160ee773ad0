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


def container_env(env: dict[str, str]) -> dict[str, str]:
    out = dict(env)
    if out.get("OPEN_JEV_HOST") in _LOOPBACK:
        out["OPEN_JEV_HOST"] = _INSIDE
    bind = out.get("OMNI_JEV_BIND", "")
    if bind.rpartition(":")[0] in _LOOPBACK:
        out["OMNI_JEV_BIND"] = f"{_INSIDE}:{bind.rpartition(':')[2]}"
    out.setdefault("PYTHONUNBUFFERED", "1")
    return out


def _create_kwargs(spec: LaunchSpec) -> dict:
    import docker

    kwargs: dict = {
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
    }
    if spec.workdir is not None and any(Path(spec.workdir).is_relative_to(p) for p in spec.read_only_mounts):
        kwargs["working_dir"] = str(spec.workdir)
    if spec.gpu_uuid:
        kwargs["device_requests"] = [docker.types.DeviceRequest(driver="nvidia", device_ids=[spec.gpu_uuid],
                                                                capabilities=[["gpu"]])]
    if spec.cpus:
        kwargs["cpuset_cpus"] = spec.cpus
    if spec.numa_node is not None:
        kwargs["cpuset_mems"] = str(spec.numa_node)
    return kwargs


def _signal_name(code: int | None) -> str | None:
    if code is None or code <= 128:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None


def _gpu_uuids(host_config: dict) -> list[str]:
    """The GPU UUIDs of a container's device requests (HostConfig.DeviceRequests[].DeviceIDs)."""
    return [d for r in host_config.get("DeviceRequests") or [] for d in r.get("DeviceIDs") or []]


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

    def _state(self) -> dict:
        import docker

        try:
            self.container.reload()
        except (docker.errors.DockerException, OSError):  # removed, or the daemon is gone
            return {"Status": "removed"}
        return self.container.attrs.get("State", {})

    def alive(self) -> bool:
        return self._state().get("Status") in ("created", "running", "restarting")

    def describe_exit(self) -> str:
        state = self._state()
        how = "is still running" if state.get("Status") == "running" else f"exited with status {state.get('ExitCode')}"
        if state.get("OOMKilled"):
            how += " (killed: out of memory)"
        if state.get("Error"):
            how += f" ({state['Error']})"
        self._log_thread.join(timeout=2)
        from .local import tail

        return f"Container {self.container.short_id} {how}. Last lines of {self.spec.log_path}:\n{tail(self.spec.log_path)}"

    @property
    def binding(self) -> dict:
        host = (self.container.attrs or {}).get("HostConfig", {})
        return {
            "container_id": self.container.id,
            "image_id": self.image_id,
            "cpuset_cpus": host.get("CpusetCpus") or None,
            "cpuset_mems": host.get("CpusetMems") or None,
            "gpu_uuids": _gpu_uuids(host),
            "ports": dict(host.get("PortBindings") or {}),
            "argv_in_container": container_argv(self.spec.argv),
            "read_only_mounts": [str(p) for p in self.spec.read_only_mounts],
        }

    def _wait(self, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self._state()
            if state.get("Status") in ("exited", "dead", "removed"):
                return state.get("ExitCode")
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
        state = self._state()
        code = state.get("ExitCode")
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
