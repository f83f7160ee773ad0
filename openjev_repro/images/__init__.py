"""Container images: pinned recipes (images/<backend>/image.yaml), locks, builds and build records."""

from .build import build, build_dockerfile, build_offline, check_reproducible, labels_for, read_record, record_path
from .daemon import connect, get_image
from .lockfile import read_lock, verify_wheelhouse
from .relock import lock_image
from .rootfs import diff_members, normalize_tar, read_members
from .sources import check_commit, fetch_source
from .spec import CACHE_DIR, IMAGES_DIR, PLACEHOLDER_DIGEST, ImageSpec, backend_names, load_spec

__all__ = [
    "CACHE_DIR", "IMAGES_DIR", "PLACEHOLDER_DIGEST", "ImageSpec", "backend_names", "build", "build_dockerfile",
    "build_offline", "check_commit", "check_reproducible", "connect", "diff_members", "fetch_source", "get_image",
    "labels_for", "load_spec", "lock_image", "normalize_tar", "read_lock", "read_members", "read_record",
    "record_path", "verify_wheelhouse",
]
