"""Bundles: a run directory, or a `.tar.gz` of one written by `publish`.

`opened(path)` yields a directory for either, extracting a tarball into a temporary
directory with tarfile's "data" filter (no absolute paths, no links out, no devices).
"""

from __future__ import annotations

import contextlib
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator

from ..errors import EvidenceError

__all__ = ["opened"]


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Path]:
    path = Path(path)
    if path.is_dir():
        yield path
        return
    if not path.is_file():
        raise EvidenceError(f"{path} is neither a run directory nor a bundle file.")
    with tempfile.TemporaryDirectory(prefix="openjev-bundle-") as tmp:
        try:
            with tarfile.open(path, "r:gz") as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise EvidenceError(f"{path} is not a readable bundle (.tar.gz): {exc}.") from exc
        yield Path(tmp)
