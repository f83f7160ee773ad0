"""`invoke lock`: regenerate an image's pins (requirements lock, base digest, Debian package list)."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import DockerError, ReproError
from .lockfile import STATUS_PARTIAL, Lock, LockFailed, resolve, write_lock
from .spec import CACHE_DIR, PLACEHOLDER_DIGEST, ImageSpec

__all__ = ["lock_image", "lock_requirements", "resolve_base_digest"]

Progress = Callable[[str], None]


def _requirements(spec: ImageSpec) -> list[str]:
    lines = spec.requirements_path.read_text().splitlines()
    return [ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip()]


def lock_requirements(spec: ImageSpec, command: str, progress: Progress = print) -> Lock:
    """Full resolution for the image's interpreter and platform; for GPU images, fall back to the
    top-level pins alone (marked partial) when an index the image needs is out of reach."""
    lines = _requirements(spec)
    options = [ln for ln in lines if ln.startswith("--")]
    reqs = [ln for ln in lines if not ln.startswith("--")]
    target = f"cp{spec.python.replace('.', '')} {spec.platform}"
    try:
        lock = Lock(resolve(options + reqs, spec.python, spec.platform, pypi_only=spec.index == "pypi"))
    except LockFailed as exc:
        if not spec.gpu:
            raise
        progress(f"full resolution failed ({exc}); locking top-level requirements only")
        pins, missing = [], []
        for req in reqs:
            try:
                pins += resolve(options + [req], spec.python, spec.platform, no_deps=True, pypi_only=spec.index == "pypi")
            except LockFailed:
                missing.append(req)
        notes = [f"full resolution failed on the lock host: {exc}",
                 "only top-level requirements are locked (no transitive dependencies)"]
        if missing:
            notes.append("not locked at all: " + ", ".join(missing))
        lock = Lock(sorted(pins, key=lambda p: p.name), STATUS_PARTIAL, notes)
    write_lock(lock, spec.lock_path, command, target, options)
    progress(f"wrote {spec.lock_path} ({lock.status}, {len(lock.pins)} pins)")
    return lock


def resolve_base_digest(spec: ImageSpec, progress: Progress = print) -> str | None:
    """Ask the registry for the base tag's digest and write it into image.yaml; None when unreachable."""
    import docker

    from .daemon import connect

    if not spec.base:  # images on our Debian base name no registry image
        return None
    name = spec.base.split("@", 1)[0]
    try:
        digest = connect().images.get_registry_data(name).id
    # registry or daemon unreachable (requests' connection errors are OSErrors): keep the placeholder
    except (ReproError, docker.errors.DockerException, OSError) as exc:
        progress(f"base digest NOT resolved ({str(exc).splitlines()[0][:200]}); {spec.base_digest} stays in image.yaml")
        return None
    if digest is None:
        progress(f"base digest NOT resolved (the registry gave no digest for {name}); {spec.base_digest} stays in image.yaml")
        return None
    path = spec.directory / "image.yaml"
    path.write_text(path.read_text().replace(spec.base, f"{name}@{digest}"))
    progress(f"base {name} resolved to {digest}")
    return digest


def _lock_debian(spec: ImageSpec, progress: Progress) -> None:
    from .debian import debootstrap, installed_packages, release_date, write_packages_lock

    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        root = Path(tmp) / "root"
        debootstrap(spec.debian_pin, root, progress)
        packages, date = installed_packages(root), release_date(root, spec.debian_pin.suite)
    lock_file = (spec.directory / spec.debian_pin.packages_lock).resolve()
    write_packages_lock(lock_file, packages, spec.debian_pin, date)
    for path in sharing_recipes(lock_file):  # every image on this base records the same Release date
        path.write_text(re.sub(r"(?m)^(\s*release_date:).*$", rf'\1 "{date}"', path.read_text()))
    progress(f"wrote {spec.debian_pin.packages_lock}: {len(packages)} packages, Release {date}")


def sharing_recipes(packages_lock: Path) -> list[Path]:
    """The image.yaml of every recipe whose Debian base is pinned by this package lock."""
    from .spec import IMAGES_DIR, load_spec

    found = []
    for path in sorted(IMAGES_DIR.glob("**/image.yaml")):
        spec = load_spec(path.parent.name, path=path)
        if spec.debian is not None and (spec.directory / spec.debian.packages_lock).resolve() == packages_lock.resolve():
            found.append(path)
    return found


def lock_image(spec: ImageSpec, command: str, progress: Progress = print, debian: bool = True) -> None:
    if spec.kind == "rootfs" and debian:
        _lock_debian(spec, progress)
    lock_requirements(spec, command, progress)
    if spec.kind == "dockerfile" and spec.base:  # images on our Debian base have no registry digest
        try:
            resolve_base_digest(spec, progress)
        except DockerError as exc:
            progress(f"base digest NOT resolved: {exc}")
    if spec.kind == "dockerfile" and spec.base and spec.base_digest == PLACEHOLDER_DIGEST:
        progress("reminder: builds refuse the placeholder digest until it is resolved on a host with registry access")
