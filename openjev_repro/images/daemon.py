"""One place that talks to the Docker daemon, so 'daemon absent' reads the same everywhere."""

from __future__ import annotations

import os

from ..errors import DockerError

__all__ = ["connect", "daemon_address", "get_image"]

_HOW_TO_START = (
    "Start it (`sudo systemctl start docker`, or `sudo dockerd > /tmp/dockerd.log 2>&1 &` where there is "
    "no systemd; scripts/ci-docker.sh does both steps), check DOCKER_HOST, or use --runtime local."
)


def daemon_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(timeout_s: float = 60.0):
    """A docker.DockerClient whose daemon answered a ping; DockerError with what to do otherwise."""
    import docker  # imported here: the local runtime must work without touching docker

    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except docker.errors.DockerException as exc:
        reason = str(exc).split("(Caused by", 1)[0].strip()
        raise DockerError(f"Cannot reach the Docker daemon at {daemon_address()} ({reason}). {_HOW_TO_START}") from exc
    return client


def get_image(client, reference: str):
    """The image object, or DockerError naming how to build it."""
    import docker

    try:
        return client.images.get(reference)
    except docker.errors.ImageNotFound as exc:
        raise DockerError(
            f"Docker image {reference!r} is not present on this host. Build it with "
            "`invoke build --backend reference --offline` (CPU, no registry) or "
            "`invoke build --backend NAME` on a GPU host; see docs/images.md."
        ) from exc
    except docker.errors.APIError as exc:
        raise DockerError(f"Docker could not inspect image {reference!r}: {exc.explanation or exc}.") from exc
