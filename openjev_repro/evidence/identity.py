"""What a backend process actually ran (issue 39), as it reports it in /health `runtime_identity` and the
study records it per backend in backends.json: the shared objects mapped into the process, the versions
of torch and the CUDA libraries as loaded, the kernel caches it was pointed at with their digests, and
the configuration every autotuned kernel chose (read from those caches).

    {"format_version": 1,
     "libraries": [{"path": "/…/libtorch_cpu.so", "size": 12345, "sha256": "<64 hex>"}, …],  # sorted by path
     "versions": {"torch": "2.11.0", "cuda_runtime": "12080" | null, "cudnn": "91002" | null,
                  "cublas": "12.8.4" | null, "nccl": "2.27.3" | null, "triton": "3.6.0" | null},
     "kernel_caches": [{"kind": "triton", "env": "TRITON_CACHE_DIR", "files": 1246, "sha256": "<64 hex>"}, …],
     "autotune": {"<cache kind>/<entry>/<kernel>": {"<parameter>": value, …}, …},
     "pending": 0}       # shared objects not hashed yet (0: complete)

A backend that reports none (a foreign server) is recorded as {"available": false, "reason": …}.
`RuntimeIdentity.decode` is the one reader; its type is the well-formedness rule `invoke verify` checks.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

__all__ = ["AutotuneValue", "CacheDigest", "LoadedLibrary", "RuntimeIdentity", "RuntimeVersions", "cache_digest_text"]

Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
Path_ = Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^/[^\n\r\x00]*$")]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
Text = Annotated[str, msgspec.Meta(max_length=200, pattern=r"^[^\n\r\x00]*$")]
# An autotuned parameter: block sizes and warp counts are ints; a few are names or flags.
AutotuneValue = Annotated[int, msgspec.Meta(ge=-(2**62), le=2**62)] | bool | Text | None


class LoadedLibrary(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One shared object mapped into the process (/proc/self/maps), its size and the sha256 of its bytes."""

    path: Path_
    size: Count
    sha256: Sha256


class RuntimeVersions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Versions as the process loaded them (None: that library is not loaded in it)."""

    torch: Text | None = None
    cuda_runtime: Text | None = None
    cudnn: Text | None = None
    cublas: Text | None = None
    nccl: Text | None = None
    triton: Text | None = None


class CacheDigest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A kernel cache the process was pointed at: its tree digest when /health answered. `paths: relative`
    (kernel_cache_files.cache_digest, since 2026-12-05): Triton's group files hashed location-free; without
    it they were hashed as written (hashing.tree_digest), naming the folder the cache lay in."""

    kind: Literal["triton", "inductor"]
    env: Literal["TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"]
    files: Count
    sha256: Sha256
    paths: Literal["relative"] | msgspec.UnsetType = msgspec.UNSET


class RuntimeIdentity(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    format_version: Literal[1] = 1
    libraries: tuple[LoadedLibrary, ...] = ()
    versions: RuntimeVersions = RuntimeVersions()
    kernel_caches: tuple[CacheDigest, ...] = ()
    autotune: dict[Annotated[str, msgspec.Meta(max_length=1000)], dict[Text, AutotuneValue]] = {}
    pending: Count = 0

    def __post_init__(self) -> None:
        paths = [lib.path for lib in self.libraries]
        if paths != sorted(set(paths)):
            raise ValueError("libraries must be sorted by path, each path once")

    @classmethod
    def decode(cls, data: Any) -> RuntimeIdentity:
        """The record of a /health or backends.json value; ValueError names the field that is wrong."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            raise ValueError(str(exc)) from None

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    def library_digests(self) -> dict[str, str]:
        return {lib.path: lib.sha256 for lib in self.libraries}

    def cache_digests(self) -> dict[str, str]:
        return {cache.kind: cache_digest_text(cache.sha256, cache.paths, cache.files) for cache in self.kernel_caches}


def cache_digest_text(sha256: str, paths: str | msgspec.UnsetType, files: int) -> str:
    """A kernel cache digest as compare shows it: one hashed as written says so, since its group files'
    absolute paths make it differ from any other folder's (kernel_cache_files.py); an empty cache's
    digest is the same either way."""
    as_written = paths != "relative" and files > 0
    return f"{sha256} (group files hashed with their absolute paths)" if as_written else sha256
