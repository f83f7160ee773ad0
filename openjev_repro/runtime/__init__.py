"""Runtimes start a backend, wait for it to be ready and stop it: local process, docker."""

from .base import ExitRecord, LaunchSpec, RunningBackend, Runtime

__all__ = ["ExitRecord", "LaunchSpec", "RunningBackend", "Runtime", "get_runtime"]


def get_runtime(name: str) -> Runtime:
    if name == "local":
        from .local import LocalRuntime

        return LocalRuntime()
    if name == "docker":
        from .docker import DockerRuntime

        return DockerRuntime()
    from ..errors import RecipeError

    raise RecipeError(f"Unknown runtime {name!r}; use 'local' or 'docker'.")
