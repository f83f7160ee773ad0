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
from pathlib import Path
from typing import Any

from ..evidence.identity import CacheDigest, LoadedLibrary, RuntimeIdentity, RuntimeVersions
from ..hashing import hash_file, tree_digest

__all__ = ["RuntimeIdentityReporter", "autotune_choices", "mapped_libraries"]

MAPS = Path("/proc/self/maps")
CACHE_ENV = {"triton": "TRITON_CACHE_DIR", "inductor": "TORCHINDUCTOR_CACHE_DIR"}
MAX_CHOICE_BYTES = 1 << 20  # an autotune file larger than this is not one
VOLATILE = {"time_taken_ms"}  # measured anew on every tuning, not a choice
_KERNEL_DEF = re.compile(r"^def (triton_\w+)\(", re.MULTILINE)


def mapped_libraries(maps: Path = MAPS) -> list[Path]:
    """The shared objects mapped into the process, each once, sorted (deleted or vanished files left out)."""
    found = set()
    for line in maps.read_text(errors="replace").splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/") and ".so" in Path(parts[5]).name:
            found.add(parts[5])
    return [Path(p) for p in sorted(found) if Path(p).is_file()]


def _loaded(fragment: str) -> Path | None:
    return next((p for p in mapped_libraries() if p.name.startswith(fragment)), None)


def _int_call(library: Path, function: str, *args: int) -> int | None:
    """An `int f(..., int *out)` of a loaded library (0: success), or None when it cannot be asked."""
    try:
        out = ctypes.c_int()
        status = getattr(ctypes.CDLL(str(library)), function)(*args, ctypes.byref(out))
    except (OSError, AttributeError):
        return None
    return out.value if status == 0 else None


def _versions() -> RuntimeVersions:
    """What the loaded libraries say of themselves (None for a library this process has not loaded)."""
    torch = sys.modules.get("torch")
    cudart, cublas, cudnn, nccl = (_loaded(name) for name in ("libcudart", "libcublas.", "libcudnn.", "libnccl"))
    runtime = _int_call(cudart, "cudaRuntimeGetVersion") if cudart else None
    parts = [_int_call(cublas, "cublasGetProperty", kind) for kind in (0, 1, 2)] if cublas else []
    cudnn_version = getattr(ctypes.CDLL(str(cudnn)), "cudnnGetVersion", lambda: None)() if cudnn else None
    nccl_version = _int_call(nccl, "ncclGetVersion") if nccl else None
    triton = sys.modules.get("triton")
    return RuntimeVersions(
        torch=str(torch.__version__) if torch and hasattr(torch, "__version__") else None,
        cuda_runtime=str(runtime) if runtime is not None else None,
        cublas=".".join(map(str, parts)) if parts and None not in parts else None,
        cudnn=str(cudnn_version) if cudnn_version is not None else None,
        nccl=str(nccl_version) if nccl_version is not None else None,
        triton=str(triton.__version__) if triton and hasattr(triton, "__version__") else None)


def _scalars(config: dict[str, Any]) -> dict[str, Any]:
    """A configuration's parameters (a Triton Config's `kwargs` merged in), scalars only."""
    kwargs = config.get("kwargs")
    flat = {**config, **(kwargs if isinstance(kwargs, dict) else {})}
    return {str(k): v for k, v in sorted(flat.items()) if k not in VOLATILE and k != "kwargs"
            and (v is None or isinstance(v, (bool, int, str)))}


def _read_json(path: Path) -> Any:
    if path.stat().st_size > MAX_CHOICE_BYTES:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def _triton_choice(path: Path) -> dict[str, Any] | None:
    """Triton's autotune cache file: the configuration with the least timing."""
    data = _read_json(path)
    pairs = data.get("configs_timings") if isinstance(data, dict) else None
    timed = [(t if isinstance(t, list) else [t], c) for c, t in pairs or [] if isinstance(c, dict)] \
        if isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 for p in pairs) else []
    return _scalars(min(timed, key=lambda item: item[0])[1]) if timed else None


def _inductor_choice(path: Path) -> tuple[str, dict[str, Any]] | None:
    """Inductor's `.best_config` and the kernel name in the `.py` beside it."""
    data = _read_json(path)
    if not isinstance(data, dict):
        return None
    source = path.with_suffix(".py")
    names = _KERNEL_DEF.findall(source.read_text(errors="replace")) if source.is_file() else []
    return f"inductor/{path.stem}/{names[0] if names else 'kernel'}", _scalars(data)


def autotune_choices(caches: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """`<kind>/<entry>/<kernel>` -> chosen configuration, from the caches' files (sorted by key)."""
    found: dict[str, dict[str, Any]] = {}
    if "triton" in caches:
        for path in sorted(caches["triton"].rglob("*.autotune.json")):
            choice = _triton_choice(path)
            if choice is not None:
                found[f"triton/{path.parent.name}/{path.name.removesuffix('.autotune.json')}"] = choice
    if "inductor" in caches:
        for path in sorted(caches["inductor"].rglob("*.best_config")):
            pair = _inductor_choice(path)
            if pair is not None:
                found[pair[0]] = pair[1]
    return dict(sorted(found.items()))


class RuntimeIdentityReporter:
    """Hashes of the process's shared objects, kept per file; the /health `runtime_identity` value."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self._hashes: dict[tuple[str, int, int, int], str] = {}
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
        digests = tuple(CacheDigest(kind=kind, env=CACHE_ENV[kind],  # type: ignore[arg-type]
                                    files=(d := tree_digest(folder))["files"], sha256=d["sha256"])
                        for kind, folder in caches.items())
        return RuntimeIdentity(libraries=tuple(libraries), versions=_versions(), kernel_caches=digests,
                               autotune=autotune_choices(caches), pending=pending).to_json()
