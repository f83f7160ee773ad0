"""SHA256 of files, parallel across files, each byte read exactly once.

Threads are enough for parallelism: `readinto` and hashlib's `update` on large buffers both
release the GIL, so N threads hash N files at once on N cores. Each thread reads into one
reusable buffer (no per-chunk allocation) and tells the kernel the access is sequential so
read-ahead is generous. `docs/benchmarks.md` compares the throughput with `sha256sum`.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .errors import InputMismatch

__all__ = ["CHUNK_BYTES", "PACKAGE_ROOT", "hash_file", "hash_files", "source_digest", "tree_digest"]

PACKAGE_ROOT = Path(__file__).resolve().parent  # the openjev_repro package as it runs

CHUNK_BYTES = 1 << 20  # 1 MiB: large enough that Python overhead per chunk is negligible

Progress = Callable[[int], None]


def hash_file(path: str | os.PathLike[str], chunk: int = CHUNK_BYTES, progress: Progress | None = None) -> str:
    """Hex SHA256 of one file. `progress(n)` is called after every `n` bytes hashed."""
    digest = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    try:
        with open(path, "rb", buffering=0, opener=_open_nonblocking) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # a FIFO or device: never wait on it
                raise InputMismatch(f"{path}: is not a regular file; name a file.")
            os.set_blocking(f.fileno(), True)
            _advise_sequential(f.fileno())
            while n := f.readinto(buf):
                digest.update(view[:n])
                if progress is not None:
                    progress(n)
    except FileNotFoundError:
        raise InputMismatch(f"{path}: no such file; check the path or restore the file.") from None
    except IsADirectoryError:
        raise InputMismatch(f"{path}: is a directory, not a file; name the files inside it.") from None
    except OSError as exc:
        raise InputMismatch(f"{path}: cannot be read ({exc.strerror or exc}).") from None
    return digest.hexdigest()


def hash_files(
    paths: Iterable[Path],
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    chunk: int = CHUNK_BYTES,
) -> dict[Path, str]:
    """Hex SHA256 of every file, keyed by the path as given, hashed in parallel threads.

    `workers` defaults to the number of usable CPUs (at most one per file). `progress(n)` is
    called with the bytes just hashed; calls are serialised, so the callback needs no lock.
    Every path is checked before any is read, so a missing file fails fast.
    """
    unique = list(dict.fromkeys(Path(p) for p in paths))
    sizes = {p: _size(p) for p in unique}
    # Largest first: the longest job starts early, so the threads finish together.
    order = sorted(unique, key=sizes.__getitem__, reverse=True)
    n_workers = max(1, min(workers or _usable_cpus(), len(order) or 1))
    report = _serialised(progress)
    if n_workers == 1:
        return {p: hash_file(p, chunk, report) for p in unique}
    with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="hash") as pool:
        digests = dict(zip(order, pool.map(lambda p: hash_file(p, chunk, report), order), strict=True))
    return {p: digests[p] for p in unique}


def _size(path: Path) -> int:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputMismatch(f"{path}: no such file; check the path or restore the file.") from None
    except OSError as exc:
        raise InputMismatch(f"{path}: cannot be read ({exc.strerror or exc}).") from None
    if not path.is_file():
        raise InputMismatch(f"{path}: is not a regular file; name the files inside it.")
    return st.st_size


def _open_nonblocking(path: str, flags: int) -> int:
    """open(2) that returns at once on a FIFO without a writer (which would otherwise block forever)."""
    return os.open(path, flags | os.O_NONBLOCK)


def _serialised(progress: Progress | None) -> Progress | None:
    if progress is None:
        return None
    lock = threading.Lock()

    def report(n: int) -> None:
        with lock:
            progress(n)

    return report


def _advise_sequential(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except OSError:
            pass  # advice only; some file systems refuse it


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def tree_digest(root: str | os.PathLike[str], suffixes: tuple[str, ...] | None = None, *,
                file_sha256: Callable[[Path], str] | None = None) -> dict:
    """SHA256 over a directory's regular files: one line `<sha256>  <relative posix path>\n` per
    file, sorted by path (what `sha256sum` prints, so it can be recomputed by hand). Links and
    other non-regular entries are skipped and counted; `suffixes` keeps only files ending so;
    `file_sha256` hashes one file (default: its bytes, `hash_file`)."""
    base = Path(root)
    lines, skipped = [], 0
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base).as_posix()
        if "__pycache__" in path.parts or (suffixes is not None and not rel.endswith(suffixes)):
            continue
        if path.is_dir() and not path.is_symlink():
            continue
        if path.is_symlink() or not path.is_file():
            skipped += 1
            continue
        lines.append(f"{(file_sha256 or hash_file)(path)}  {rel}\n")
    digest = hashlib.sha256("".join(lines).encode()).hexdigest()
    return {"sha256": digest, "files": len(lines), "skipped": skipped,
            "method": "sha256 of sorted `sha256sum`-style lines (sha256, two spaces, relative path)"}


def source_digest(root: Path = PACKAGE_ROOT) -> dict:
    """The digest of the package's .py files as they are on disk now (as they run): true whatever
    the git metadata of the tree says (a copied tree keeps a stale commit)."""
    return {**tree_digest(root, (".py",)), "root": root.name}
