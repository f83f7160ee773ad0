"""The backend's runtime identity for /health (issue 39; the record is evidence/identity.py).

After the warm-up inference `RuntimeIdentityReporter.start()` hashes, on a background thread, every shared
object mapped into this process (/proc/self/maps), so readiness is not delayed; each file is hashed once
(keyed by path, size, mtime and inode), so a later /health only hashes what was mapped since. `report()`
is what /health returns under `runtime_identity`: the libraries hashed so far (`pending` counts the rest),
the versions as loaded (asked of the loaded libraries themselves), the kernel caches this process was
pointed at with their tree digests, and every autotuned kernel's chosen configuration read from them:
Triton's `<kernel>.autotune.json` (its fastest configuration; FLA's kernels with FLA_CACHE_RESULTS=1) and
Inductor's `<hash>.best_config` beside the kernel's `<hash>.py`.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ..evidence.identity import CacheDigest, LoadedLibrary, RuntimeIdentity, RuntimeVersions
from ..hashing import hash_file
from ..kernel_cache_files import cache_digest

__all__ = ["RuntimeIdentityReporter", "cached_autotune_choices", "mapped_libraries"]

MAPS = Path("/proc/self/maps")
CACHE_ENV = {"triton": "TRITON_CACHE_DIR", "inductor": "TORCHINDUCTOR_CACHE_DIR"}
MAX_CHOICE_BYTES = 1 << 20  # an autotune file larger than this is not one
VOLATILE = {"time_taken_ms", "kwargs"}  # measured anew on every tuning, not a choice
_KERNEL_DEF = re.compile(r"^def (triton_\w+)\(", re.MULTILINE)
_SHARED_OBJECT = re.compile(r"\.so(\.[0-9][0-9.]*)?$")  # libz.so, libz.so.1.3, not x.sock


def mapped_libraries(maps: Path = MAPS) -> list[Path]:
    """The shared objects mapped into the process, each once, sorted (deleted or vanished files left out)."""
    found = set()  # plain strings until the end: a Path per maps line made /health slow on a loaded host
    for line in maps.read_text(errors="replace").splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/") and _SHARED_OBJECT.search(parts[5].rpartition("/")[2]):
            found.add(parts[5])
    return [Path(p) for p in sorted(found) if os.path.isfile(p)]


def _int_call(library: Path, function: str, *args: int) -> int | None:
    """An `int f(..., int *out)` of a loaded library (0: success), or None when it cannot be asked."""
    try:
        out = ctypes.c_int()
        status = getattr(ctypes.CDLL(str(library)), function)(*args, ctypes.byref(out))
    except (OSError, AttributeError):
        return None
    return out.value if status == 0 else None


def _cublas(library: Path) -> str | None:
    parts = [_int_call(library, "cublasGetProperty", kind) for kind in (0, 1, 2)]  # major, minor, patch
    return None if None in parts else ".".join(map(str, parts))


def _cudnn(library: Path) -> str | None:
    try:
        return str(ctypes.CDLL(str(library)).cudnnGetVersion())
    except (OSError, AttributeError):
        return None


def _asked(function: str) -> Callable[[Path], str | None]:
    def ask(library: Path) -> str | None:
        value = _int_call(library, function)
        return None if value is None else str(value)
    return ask


# RuntimeVersions field -> (the loaded library's file name starts so, how that library is asked its version)
_LIBRARIES: dict[str, tuple[str, Callable[[Path], str | None]]] = {
    "cuda_runtime": ("libcudart", _asked("cudaRuntimeGetVersion")), "cublas": ("libcublas.", _cublas),
    "cudnn": ("libcudnn.", _cudnn), "nccl": ("libnccl", _asked("ncclGetVersion"))}


def _module_version(name: str) -> str | None:
    module = sys.modules.get(name)  # loaded by the backend, not imported here
    return str(module.__version__) if module is not None and hasattr(module, "__version__") else None


def _versions() -> RuntimeVersions:
    """What the loaded libraries say of themselves (None for a library this process has not loaded)."""
    mapped = mapped_libraries()
    found = {field: next((p for p in mapped if p.name.startswith(prefix)), None)
             for field, (prefix, _) in _LIBRARIES.items()}
    asked = {field: ask(path) for field, (_, ask) in _LIBRARIES.items() if (path := found[field]) is not None}
    return RuntimeVersions(torch=_module_version("torch"), triton=_module_version("triton"), **asked)


def _scalars(config: dict[str, Any]) -> dict[str, Any]:
    """A configuration's parameters, scalars only (what is measured anew each time left out)."""
    return {str(k): v for k, v in sorted(config.items()) if k not in VOLATILE
            and (v is None or isinstance(v, (bool, int, str)))}


class _TritonConfig(msgspec.Struct, frozen=True):
    """A triton.Config as Triton's autotuner writes it to `<kernel>.autotune.json` (other keys left alone)."""

    kwargs: dict[str, int | float | str | bool | None] = {}
    num_warps: int | None = None
    num_stages: int | None = None
    num_ctas: int | None = None
    maxnreg: int | None = None


class _TritonAutotune(msgspec.Struct, frozen=True):
    configs_timings: list[tuple[_TritonConfig, list[float] | float]] = []


def _read_json(path: Path) -> Any:
    if path.stat().st_size > MAX_CHOICE_BYTES:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def _triton_choice(path: Path) -> tuple[str, dict[str, Any]] | None:
    """Triton's `<kernel>.autotune.json` and the configuration it timed fastest."""
    try:
        tuned = msgspec.json.decode(path.read_bytes(), type=_TritonAutotune) if path.stat().st_size < MAX_CHOICE_BYTES \
            else None
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    if not tuned or not tuned.configs_timings:
        return None
    best = min(tuned.configs_timings, key=lambda pair: pair[1] if isinstance(pair[1], list) else [pair[1]])[0]
    name = f"triton/{path.parent.name}/{path.name.removesuffix('.autotune.json')}"
    return name, _scalars({**msgspec.structs.asdict(best), **best.kwargs, "kwargs": None})


def _inductor_choice(path: Path) -> tuple[str, dict[str, Any]] | None:
    """Inductor's `.best_config` and the kernel name in the `.py` beside it."""
    data = _read_json(path)
    if not isinstance(data, dict):
        return None
    source = path.with_suffix(".py")
    names = _KERNEL_DEF.findall(source.read_text(errors="replace")) if source.is_file() else []
    return f"inductor/{path.stem}/{names[0] if names else 'kernel'}", _scalars(data)


# cache kind (CACHE_ENV) -> (its choice files, how one is read: (`<kind>/<entry>/<kernel>`, configuration))
_CHOICE_FILES: dict[str, tuple[str, Callable[[Path], tuple[str, dict[str, Any]] | None]]] = {
    "triton": ("*.autotune.json", _triton_choice), "inductor": ("*.best_config", _inductor_choice)}


def cached_autotune_choices(caches: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """`<kind>/<entry>/<kernel>` -> chosen configuration, from the caches' files (sorted by key)."""
    found: dict[str, dict[str, Any]] = {}
    for kind, folder in caches.items():
        pattern, read = _CHOICE_FILES[kind]
        for path in sorted(folder.rglob(pattern)):
            if (choice := read(path)) is not None:
                found[choice[0]] = choice[1]
    return dict(sorted(found.items()))


class RuntimeIdentityReporter:
    """Hashes of the process's shared objects, kept per file; the /health `runtime_identity` value."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self._hashes: dict[tuple[str, int, int, int], str] = {}
        self._digests: dict[str, tuple[tuple[tuple[str, int, int], ...], CacheDigest]] = {}  # kind -> (listing, digest)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Hash what is mapped now, in the background (readiness does not wait for it)."""
        self._thread = threading.Thread(target=self.refresh, name="runtime-identity", daemon=True)
        self._thread.start()

    def _key(self, path: Path) -> tuple[str, int, int, int]:
        info = path.stat()
        return str(path), info.st_size, info.st_mtime_ns, info.st_ino

    def refresh(self) -> None:
        """Hash every mapped shared object not hashed yet (a file that vanishes is skipped)."""
        for path in mapped_libraries():
            try:
                key = self._key(path)
                if key not in self._hashes:
                    digest = hash_file(path)
                    with self._lock:
                        self._hashes[key] = digest
            except OSError:
                continue

    def _cache_digest(self, kind: str, folder: Path) -> CacheDigest:
        """A kernel cache's tree digest, hashed again only when a file in it was added, removed or
        rewritten (by path, size and mtime): every /health reports it, and a shared cache holds many files."""
        listing = tuple(sorted((str(p), (st := p.stat()).st_size, st.st_mtime_ns)
                               for p in folder.rglob("*") if p.is_file() and not p.is_symlink()))
        known = self._digests.get(kind)
        if known is None or known[0] != listing:
            tree = cache_digest(folder)
            known = (listing, CacheDigest(kind=kind, env=CACHE_ENV[kind],  # type: ignore[arg-type]
                                          files=tree["files"], sha256=tree["sha256"], paths="relative"))
            self._digests[kind] = known
        return known[1]

    def caches(self) -> dict[str, Path]:
        return {kind: Path(self.environ[var]) for kind, var in CACHE_ENV.items()
                if self.environ.get(var) and Path(self.environ[var]).is_dir()}

    def report(self) -> dict[str, Any]:
        """The record as /health returns it: hashed libraries, versions, caches and autotune choices."""
        libraries, pending = [], 0
        with self._lock:
            hashes = dict(self._hashes)
        for path in mapped_libraries():
            try:
                key = self._key(path)
            except OSError:
                continue
            if key in hashes:
                libraries.append(LoadedLibrary(path=key[0], size=key[1], sha256=hashes[key]))
            else:
                pending += 1
        caches = self.caches()
        digests = tuple(self._cache_digest(kind, folder) for kind, folder in caches.items())
        return RuntimeIdentity(libraries=tuple(libraries), versions=_versions(), kernel_caches=digests,
                               autotune=cached_autotune_choices(caches), pending=pending).to_json()
