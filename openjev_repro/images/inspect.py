"""What a study records about a container image: its digests and every Python package inside it.

The packages are read by the image's own interpreter in a throw-away container (no network, no
capabilities), so the record says what the backend really imported from, not what a lock promised.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ..errors import DockerError

__all__ = ["describe_image", "image_packages"]

# Every installed distribution, name -> version, and the interpreter; torch's CUDA build if torch is there.
_PROBE = (
    "import importlib.metadata as m, json, platform, sys\n"
    "out = {'python': platform.python_version(), 'executable': sys.executable,\n"
    "       'packages': dict(sorted((d.metadata['Name'].lower(), d.version) for d in m.distributions()))}\n"
    "try:\n"
    "    import torch\n"
    "    out['torch'] = {'version': torch.__version__, 'cuda': torch.version.cuda}\n"
    "except Exception as exc:\n"
    "    out['torch'] = {'error': type(exc).__name__ + ': ' + str(exc)[:200]}\n"
    "print(json.dumps(out))\n"
)
class _Config(msgspec.Struct, frozen=True, rename="pascal"):
    labels: dict[str, str] | None = None


class _RootFS(msgspec.Struct, frozen=True, rename="pascal"):
    layers: list[str] = []


class ImageInspect(msgspec.Struct, frozen=True, rename={"repo_digests": "RepoDigests", "root_fs": "RootFS",
                                                        "config": "Config"}):
    """What a study reads of `docker image inspect` (the daemon's other fields are not read)."""

    config: _Config = _Config()
    repo_digests: list[str] | None = []
    root_fs: _RootFS = _RootFS()


class _Waited(msgspec.Struct, frozen=True, rename="pascal"):
    """The answer of `docker wait` (the container's exit)."""

    status_code: int = -1


_LABELS = ("io.openjev-repro.image", "io.openjev-repro.lock.sha256", "io.openjev-repro.base.diff-id",
           "io.openjev-repro.debian.release-date", "org.opencontainers.image.revision")


def _remove_probe(container, reaper) -> None:
    import docker

    try:
        container.remove(force=True)
    except docker.errors.APIError:
        pass  # the reaper (if any) still holds it
    else:
        if reaper is not None:
            reaper.forget_container(container.id)


def image_packages(client, image_id: str, reaper=None) -> dict[str, Any]:
    """Python, package versions and torch's CUDA version inside the image (a --network none container).

    The probe container is registered with the study's reaper (host/reaper.py), if given, from its
    creation until its removal, so a study killed mid-probe leaves no container behind.
    """
    import docker

    try:
        container = client.containers.create(image_id, ["python", "-c", _PROBE], network_mode="none",
                                             cap_drop=["ALL"], security_opt=["no-new-privileges"])
    except docker.errors.APIError as exc:
        raise DockerError(f"Docker could not create the package probe in {image_id}: {exc.explanation or exc}.") from exc
    if reaper is not None:
        reaper.watch_container(container.id)
    try:
        container.start()
        status = msgspec.convert(container.wait(), _Waited).status_code
        out = container.logs(stdout=True, stderr=False)
        err = container.logs(stdout=False, stderr=True) if status else b""
    except docker.errors.APIError as exc:
        raise DockerError(f"Docker could not run the package probe in {image_id}: {exc.explanation or exc}.") from exc
    finally:
        _remove_probe(container, reaper)
    if status:
        return {"available": False, "reason": f"the package probe exited {status}: {err.decode(errors='replace')[-300:]}"}
    return {"available": True, **json.loads(out.decode().strip().splitlines()[-1])}


def describe_image(client, reference: str, reaper=None) -> dict[str, Any]:
    """Image id, repo digests, layer diff IDs, our pin labels and the packages inside."""
    from .daemon import get_image

    image = get_image(client, reference)
    try:
        inspected = msgspec.convert(image.attrs, ImageInspect)
    except msgspec.ValidationError as exc:
        raise DockerError(f"Docker described {reference} in an unexpected shape ({exc}).") from None
    labels = inspected.config.labels or {}
    return {"reference": reference, "id": image.id, "repo_digests": inspected.repo_digests,
            "diff_ids": inspected.root_fs.layers,
            "labels": {k: v for k, v in sorted(labels.items()) if k in _LABELS or ".source." in k},
            "python": image_packages(client, image.id, reaper)}
