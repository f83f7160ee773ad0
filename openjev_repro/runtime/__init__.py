"""Runtimes start a backend, wait for it to be ready and stop it: local process, docker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import ExitRecord, LaunchSpec, RunningBackend, Runtime

if TYPE_CHECKING:
    from ..host.reaper import Reaper

__all__ = ["ExitRecord", "LaunchSpec", "RunningBackend", "Runtime", "get_runtime"]


def get_runtime(name: str, *, command_prefix: list[str] | None = None, reaper: Reaper | None = None) -> Runtime:
    """The runtime called `name`, set up once: `command_prefix` (numactl) runs before a local command,
    `reaper` (the study's) ends every process or container started if the study dies."""
    if name == "local":
        from .local import LocalRuntime

        return LocalRuntime(prefix=command_prefix, reaper=reaper)
    if name == "docker":
        from .docker import DockerRuntime

        return DockerRuntime(reaper=reaper)  # a container is bound by its cpuset, not by a command prefix
    from ..errors import RecipeError

    raise RecipeError(f"Unknown runtime {name!r}; use 'local' or 'docker'.")
