"""What a study records about a container image: its digests and every Python package inside it.

The packages are read by the image's own interpreter in a throw-away container (no network, no
capabilities), so the record says what the backend really imported from, not what a lock promised.
"""

from __future__ import annotations

import json
from typing import Any

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
_LABELS = ("io.openjev-repro.image", "io.openjev-repro.lock.sha256", "io.openjev-repro.base.diff-id",
           "io.openjev-repro.debian.release-date", "org.opencontainers.image.revision")


def image_packages(client, image_id: str) -> dict[str, Any]:
    """Python, package versions and torch's CUDA version inside the image (docker run --network none)."""
    import docker

    try:
        out = client.containers.run(image_id, ["python", "-c", _PROBE], remove=True, network_mode="none",
                                    cap_drop=["ALL"], security_opt=["no-new-privileges"], stdout=True, stderr=False)
    except docker.errors.ContainerError as exc:
        return {"available": False, "reason": f"the package probe exited {exc.exit_status}: {str(exc.stderr)[-300:]}"}
    except docker.errors.APIError as exc:
        raise DockerError(f"Docker could not run the package probe in {image_id}: {exc.explanation or exc}.") from exc
    return {"available": True, **json.loads(out.decode().strip().splitlines()[-1])}


def describe_image(client, reference: str) -> dict[str, Any]:
    """Image id, repo digests, layer diff IDs, our pin labels and the packages inside."""
    from .daemon import get_image

    image = get_image(client, reference)
    labels = image.attrs.get("Config", {}).get("Labels") or {}
    return {"reference": reference, "id": image.id,
            "repo_digests": image.attrs.get("RepoDigests", []),
            "diff_ids": image.attrs.get("RootFS", {}).get("Layers", []),
            "labels": {k: v for k, v in sorted(labels.items()) if k in _LABELS or ".source." in k},
            "python": image_packages(client, image.id)}
