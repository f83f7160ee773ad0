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
from pydantic import Field, ValidationError

from ..errors import RecipeError
from ..schema import StrictModel

__all__ = [
    "CACHE_DIR",
    "IMAGES_DIR",
    "PLACEHOLDER_DIGEST",
    "DebianPin",
    "ImageArtifact",
    "ImageSource",
    "ImageSpec",
    "backend_names",
    "load_spec",
    "offline_backends",
    "spec_path",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO_ROOT / "images"
CACHE_DIR = REPO_ROOT / ".cache" / "images"
# What `invoke lock` replaces with the registry's digest; a build refuses it.
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64
_COMMIT = r"^[0-9a-f]{40}$"
_SHA256 = r"^[0-9a-f]{64}$"


class ImageSource(StrictModel):
    """A git repository fetched at exactly this commit inside the build."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9_-]+$")]
    url: str
    commit: Annotated[str, Field(pattern=_COMMIT)]


class ImageArtifact(StrictModel):
    """A file the build produces whose SHA256 is fixed in advance (the build fails on mismatch)."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9_-]+$")]
    path: str
    sha256: Annotated[str, Field(pattern=_SHA256)]


class DebianPin(StrictModel):
    """The offline flavour's base: debootstrap of one suite from one mirror, pinned by package list."""

    suite: str = "bookworm"
    mirror: str = "http://deb.debian.org/debian"
    variant: str = "minbase"
    include: list[str] = ["python3", "python3-venv"]
    release_date: str  # the Date: field of the suite's Release file when the lock was made
    snapshot: str | None = None  # snapshot.debian.org timestamp, when it was reachable
    packages_lock: str = "debian-packages.lock"  # "name version" per line, from dpkg-query


class ImageSpec(StrictModel):
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
    sources: list[ImageSource] = []
    artifacts: list[ImageArtifact] = []
    build_args: dict[str, str] = {}
    labels: dict[str, str] = {}
    debian: DebianPin | None = None
    env: dict[str, str] = {}
    cmd: list[str] = []
    # Where pins come from: "host" = pip as configured here (the reference image's local CPU torch);
    # "pypi" = PyPI alone, the host's pip configuration (local wheel folders, constraints) ignored.
    index: Literal["host", "pypi"] = "host"
    # Modules the offline install must import before the image is accepted.
    check_imports: list[str] = ["torch", "transformers", "peft", "openjev_repro.backend"]
    # Dockerfile images that compile upstream code: `invoke build` refuses without --source.
    source_required: bool = False

    # Filled by load_spec: the directory the recipe lives in.
    directory: Path = Path(".")

    @property
    def debian_pin(self) -> DebianPin:
        """The Debian base pin, for the steps that build on our Debian base; a RecipeError without one."""
        if self.debian is None:
            raise RecipeError(f"The {self.name} image recipe has no `debian:` pin; only images on our Debian base "
                              "(kind rootfs, or a Dockerfile with `debian:`) are built or locked from it.")
        return self.debian

    @property
    def base_digest(self) -> str | None:
        if not self.base or "@" not in self.base:
            return None
        return self.base.split("@", 1)[1]

    @property
    def base_resolved(self) -> bool:
        digest = self.base_digest
        return digest is not None and digest != PLACEHOLDER_DIGEST and re.fullmatch(r"sha256:[0-9a-f]{64}", digest) is not None

    @property
    def lock_path(self) -> Path:
        return self.directory / self.lock

    @property
    def requirements_path(self) -> Path:
        return self.directory / self.requirements


def backend_names() -> list[str]:
    found = {p.parent.name for p in IMAGES_DIR.glob("*/image.yaml")}
    return sorted(found | {p.parent.parent.name for p in IMAGES_DIR.glob("*/offline/image.yaml")})


def spec_path(backend: str, offline: bool = False) -> Path:
    """images/<backend>/offline/image.yaml for --offline when there is one, else images/<backend>/image.yaml
    (hf and fast have only the offline kind of recipe: their default build needs only Debian and PyPI)."""
    flavour, main = IMAGES_DIR / backend / "offline" / "image.yaml", IMAGES_DIR / backend / "image.yaml"
    if flavour.exists() and (offline or not main.exists()):
        return flavour
    return main


def load_spec(backend: str, offline: bool = False, path: Path | None = None) -> ImageSpec:
    """Load and validate images/<backend>/[offline/]image.yaml."""
    path = path or spec_path(backend, offline)
    if not path.exists():
        known = ", ".join(backend_names()) or "none"
        raise RecipeError(f"Backend {backend!r} has no image recipe at {path}. Image backends: {known}.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        spec = ImageSpec.model_validate({**data, "directory": path.parent})
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}: not valid YAML: {exc}.") from exc
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise RecipeError(f"{path}: invalid image recipe: {problems}.") from exc
    if offline and spec.kind != "rootfs":
        raise RecipeError(
            f"Backend {backend!r} has no offline build: {path} is a Dockerfile recipe (it compiles upstream code). "
            "The offline (Debian + wheelhouse, no registry) builds are: " + ", ".join(offline_backends()) + "."
        )
    return spec


def offline_backends() -> list[str]:
    """Backends whose image builds from the debootstrap base and a wheelhouse alone."""
    names = []
    for name in backend_names():
        path = spec_path(name, offline=True)
        if (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("kind") == "rootfs":
            names.append(name)
    return names
