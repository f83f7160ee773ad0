"""Image tasks: `invoke lock` regenerates an image's pins, `invoke build` builds it (docs/images.md)."""

from __future__ import annotations

from invoke import Exit, task

from . import user_errors

__all__ = ["lock", "build"]


@task(help={
    "backend": "image to lock: hf, fast, native or reference",
    "offline": "lock the offline CPU flavour (reference only): debootstrap package list and cp311 wheels",
    "skip_debian": "with --offline: keep the Debian package lock, relock only the Python requirements",
})
@user_errors
def lock(c, backend, offline=False, skip_debian=False):
    """Regenerate images/<backend>/[offline/] pins: requirements.lock with hashes, base digest, Debian packages."""
    from ..images import load_spec, lock_image

    command = f"invoke lock --backend {backend}" + (" --offline" if offline else "")
    lock_image(load_spec(backend, offline), command, debian=not skip_debian)


@task(help={
    "backend": "image to build: hf, fast, native or reference",
    "offline": "build the CPU flavour with no registry access (reference only)",
    "no_cache": "Dockerfile images: docker build --no-cache; offline: debootstrap again instead of the cached base",
    "check_reproducible": "offline only: build twice from scratch and name every file that differs",
})
@user_errors
def build(c, backend, offline=False, no_cache=False, check_reproducible=False):
    """Build an image through the docker SDK; the record goes to .cache/images/<name>.json."""
    from ..images import build as build_image
    from ..images import check_reproducible as check
    from ..images import load_spec, record_path

    spec = load_spec(backend, offline)
    if check_reproducible:
        diffs = check(spec)
        if diffs:
            print(f"NOT reproducible: {len(diffs)} files differ between two builds:")
            for d in diffs[:200]:
                print(f"  {d}")
            raise Exit("error: the two builds differ (files listed above).", code=1)
        print("reproducible: both builds have identical root filesystems (same layer diff IDs)")
        return
    record = build_image(spec, no_cache=no_cache)
    print(f"built {record['tag']} image {record['image_id']} layers {', '.join(record['diff_ids'])} "
          f"in {record['duration_s']} s; record {record_path(spec)}")
