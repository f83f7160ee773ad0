"""Image recipes: images/<backend>/image.yaml (Dockerfile images) and images/<backend>/offline/image.yaml.

An image recipe pins everything a build fetches: the base image by digest (or, for the offline
flavour, a Debian release and its package list), the sources by commit, the Python packages by
hash (the lock file beside it). Builds refuse a recipe whose pins are still placeholders.

Format history:
    1  (2026-11) first version.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import RecipeError

__all__ = [
    "IMAGES_DIR",
    "CACHE_DIR",
    "PLACEHOLDER_DIGEST",
    "ImageSpec",
    "Source",
    "Artifact",
    "DebianPin",
    "load_spec",
    "spec_path",
    "backend_names",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO_ROOT / "images"
CACHE_DIR = REPO_ROOT / ".cache" / "images"
# What `invoke lock` replaces with the registry's digest; a build refuses it.
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64
_COMMIT = r"^[0-9a-f]{40}$"
_SHA256 = r"^[0-9a-f]{64}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    """A git repository fetched at exactly this commit inside the build."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9_-]+$")]
    url: str
    commit: Annotated[str, Field(pattern=_COMMIT)]


class Artifact(_Strict):
    """A file the build produces whose SHA256 is fixed in advance (the build fails on mismatch)."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9_-]+$")]
    path: str
    sha256: Annotated[str, Field(pattern=_SHA256)]


class DebianPin(_Strict):
    """The offline flavour's base: debootstrap of one suite from one mirror, pinned by package list."""

    suite: str = "bookworm"
    mirror: str = "http://deb.debian.org/debian"
    variant: str = "minbase"
    include: list[str] = ["python3", "python3-venv"]
    release_date: str  # the Date: field of the suite's Release file when the lock was made
    snapshot: str | None = None  # snapshot.debian.org timestamp, when it was reachable
    packages_lock: str = "debian-packages.lock"  # "name version" per line, from dpkg-query


class ImageSpec(_Strict):
    format_version: Literal[1]
    name: Annotated[str, Field(pattern=r"^[a-z0-9-]+$")]
    backend: str  # the backend this image serves (hf, fast, native, reference)
    description: str
    tag: str  # local tag the build gives the image
    kind: Literal["dockerfile", "rootfs"]
    base: str | None = None  # digest-pinned base image reference (kind dockerfile)
    dockerfile: str = "Dockerfile"
    python: str  # "3.12": the interpreter the lock is made for
    platform: str = "manylinux_2_28_x86_64"
    requirements: str = "requirements.in"
    lock: str = "requirements.lock"
    gpu: bool = False
    cuda_arch: str | None = None  # "90" for SM90
    source_date_epoch: int
    sources: list[Source] = []
    artifacts: list[Artifact] = []
    build_args: dict[str, str] = {}
    labels: dict[str, str] = {}
    debian: DebianPin | None = None
    env: dict[str, str] = {}
    cmd: list[str] = []

    # Filled by load_spec: the directory the recipe lives in.
    directory: Path = Path(".")

    @property
    def base_digest(self) -> str | None:
        if not self.base or "@" not in self.base:
            return None
        return self.base.split("@", 1)[1]

    @property
    def base_resolved(self) -> bool:
        digest = self.base_digest
        return bool(digest) and digest != PLACEHOLDER_DIGEST and re.fullmatch(r"sha256:[0-9a-f]{64}", digest) is not None

    @property
    def lock_path(self) -> Path:
        return self.directory / self.lock

    @property
    def requirements_path(self) -> Path:
        return self.directory / self.requirements


def backend_names() -> list[str]:
    return sorted(p.parent.name for p in IMAGES_DIR.glob("*/image.yaml"))


def spec_path(backend: str, offline: bool = False) -> Path:
    directory = IMAGES_DIR / backend / ("offline" if offline else "")
    return directory / "image.yaml"


def load_spec(backend: str, offline: bool = False, path: Path | None = None) -> ImageSpec:
    """Load and validate images/<backend>/[offline/]image.yaml."""
    path = path or spec_path(backend, offline)
    if not path.exists():
        known = ", ".join(backend_names()) or "none"
        what = "an offline flavour" if offline and (IMAGES_DIR / backend / "image.yaml").exists() else "an image recipe"
        raise RecipeError(
            f"Backend {backend!r} has no {what} at {path}. Image backends: {known}; "
            "only 'reference' has an offline (CPU, no registry) flavour."
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return ImageSpec.model_validate({**data, "directory": path.parent})
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}: not valid YAML: {exc}.") from exc
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise RecipeError(f"{path}: invalid image recipe: {problems}.") from exc
