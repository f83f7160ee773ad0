"""Image tasks: `invoke lock` regenerates an image's pins, `invoke build` builds it (docs/images.md)."""

from __future__ import annotations

from typing import Any

from invoke import Exit, task

from ..printable import printable
from . import user_errors

__all__ = ["build", "lock"]


@task(help={
    "backend": "image to lock: hf, fast, native or reference",
    "offline": "lock an image built from the Debian base (hf, fast, reference): Debian package list and cp311 wheels",
    "skip_debian": "keep the Debian package lock, relock only the Python requirements",
})
@user_errors
def lock(c, backend=None, offline=False, skip_debian=False):
    """Regenerate images/<backend>/[offline/] pins: requirements.lock with hashes, Debian packages."""
    from ..images import load_spec, lock_image

    if not backend:
        raise Exit("error: --backend is required (hf, fast, native or reference).", code=1)

    command = f"invoke lock --backend {backend}" + (" --offline" if offline else "")
    lock_image(load_spec(backend, offline), command, debian=not skip_debian)


@task(help={
    "backend": "image to build: hf, fast, native or reference",
    "offline": "build from the Debian base and the hash-checked wheelhouse, no registry (hf, fast, reference)",
    "no_cache": "Dockerfile images: docker build --no-cache; offline: debootstrap again instead of the cached base",
    "check_reproducible": "offline only: build twice from scratch and name every file that differs",
    "source": "checkout of the image's upstream source at its pinned commit (e.g. the one `invoke prepare` made); "
              "hf/fast: adds the source layer; native: required",
    "target": "Dockerfile images: stop at this stage (native: `toolchain` builds without upstream code)",
    "key": "private key from `invoke keygen`: sign the image's SLSA provenance (DSSE); without it, unsigned",
})
@user_errors
def build(c, backend=None, offline=False, no_cache=False, check_reproducible=False, source=None, target=None,
          key=None):
    """Build an image through the docker SDK; the record goes to .cache/images/<name>.json."""
    from pathlib import Path

    from ..images import build as build_image
    from ..images import check_reproducible as check
    from ..images import load_spec, record_path
    from .identity import write_image_records

    if not backend:
        raise Exit("error: --backend is required (hf, fast, native or reference).", code=1)
    spec = load_spec(backend, offline)
    _check_source_option(spec, backend, source, target)
    if key:
        from ..manifest.keys import load_private_key

        load_private_key(Path(key))  # a bad key is refused before the build, not after it
    if check_reproducible:  # two builds from scratch: exit 1 naming every file that differs
        diffs = check(spec)
        if diffs:
            print(f"NOT reproducible: {len(diffs)} files differ between two builds:")
            for d in diffs[:200]:
                print(f"  {d}")
            raise Exit("error: the two builds differ (files listed above).", code=1)
        print("reproducible: both builds have identical root filesystems (same layer diff IDs)")
        return
    record = build_image(spec, no_cache=no_cache, source=Path(source) if source else None, target=target)
    print(f"built {record['tag']} image {record['image_id']} layers {', '.join(record['diff_ids'])} "
          f"in {record['duration_s']} s; record {record_path(spec)}")
    write_image_records(spec, record, key, {"offline": offline, "no_cache": no_cache, "target": target,
                                            "source": bool(source)})  # issue 39: SBOM and SLSA provenance


def _check_source_option(spec: Any, backend: str, source: str | None, target: str | None) -> None:
    """--source is given where the image compiles upstream code (unless only its toolchain is built), and is a folder."""
    from pathlib import Path

    if spec.source_required and not source and target != "toolchain":
        src = spec.sources[0]
        raise Exit(f"error: --source is required for the {backend} image: a git checkout of {src.url} holding "
                   f"{', '.join(s.commit[:7] for s in spec.sources)} (it compiles upstream code; none is in this repository).",
                   code=1)
    if source and not Path(source).is_dir():
        raise Exit(f"error: --source {printable(str(source))} is not a directory.", code=1)
