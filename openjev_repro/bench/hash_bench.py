"""Throughput of `openjev_repro.hashing` against coreutils `sha256sum` on the same files.

Files are generated once (deterministic pseudo-random bytes from AES-CTR keyed by the seed:
incompressible, not zeros) and reused by later runs. Every side runs warm: all files are read
once before any timing, so both read from the page cache (we say so in the result; a cold-cache
comparison would mostly measure the disk). Rounds alternate which side goes first, and each
side's digests must equal the other's.

    single   hash_file(f1)             vs  sha256sum f1
    several  hash_files([f1..fn])      vs  sha256sum f1 f2 ... fn   (sequential by design)
             and hash_files(..., workers=1), to show what the threads add
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from ..errors import ReproError
from ..evidence.decoding import UNSET, UnsetType
from ..hashing import hash_file, hash_files
from .machine import BenchResult, describe_disk, gib

__all__ = ["BenchUsageError", "Case", "HashBenchResult", "default_dir", "ensure_files", "parse_sizes", "run_hash_bench"]

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_GEN_BLOCK = 8 << 20


class BenchUsageError(ReproError):
    """A benchmark was asked for something it cannot do."""


def parse_sizes(text: str) -> list[int]:
    """'1G,512M,100K' -> bytes (binary units)."""
    sizes = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", part, re.IGNORECASE)
        if not m or int(m.group(1)) == 0:
            raise BenchUsageError(f"size {part!r} is not a positive size like 1G, 512M or 100K; give e.g. --sizes 1G,1G.")
        sizes.append(int(m.group(1)) * _UNITS[m.group(2).upper()])
    return sizes


def default_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "openjev-repro" / "bench-hash"


def _quiet(_message: str) -> None:
    """The default progress sink: say nothing (the task passes one that writes to stderr)."""


def ensure_files(directory: Path, sizes: list[int], seed: int = 0, say: Callable[[str], None] = _quiet) -> list[Path]:
    """The benchmark files, generated on first use; the name pins seed, index and size."""
    directory.mkdir(parents=True, exist_ok=True)
    need = sum(s for i, s in enumerate(sizes) if not _path(directory, seed, i, s).exists())
    free = shutil.disk_usage(directory).free
    say(f"files in {directory}, on {describe_disk(directory)}; "
        + (f"generating {gib(need)} (once, reused by later runs)" if need else "reusing the files there"))
    if need > free - (1 << 30):
        raise BenchUsageError(f"{directory} has {free >> 20} MiB free but the files need {need >> 20} MiB; use --dir elsewhere.")
    paths = []
    for i, size in enumerate(sizes):
        path = _path(directory, seed, i, size)
        if not path.exists():
            say(f"generating file {i + 1} of {len(sizes)} ({gib(size)})")
            _generate(path, size, key=seed.to_bytes(8, "big") + i.to_bytes(8, "big"))
        paths.append(path)
    return paths


def _path(directory: Path, seed: int, index: int, size: int) -> Path:
    return directory / f"hashbench-v1-seed{seed}-{index}-{size}.bin"


def _generate(path: Path, size: int, key: bytes) -> None:
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    zeros = bytes(_GEN_BLOCK)
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as f:
        f.writelines(stream.update(zeros[: min(_GEN_BLOCK, size - offset)]) for offset in range(0, size, _GEN_BLOCK))
    tmp.replace(path)


def _sha256sum(paths: list[Path]) -> dict[Path, str]:
    out = subprocess.run(["sha256sum", *map(str, paths)], capture_output=True, text=True, check=True).stdout
    return {p: line.split()[0] for p, line in zip(paths, out.splitlines(), strict=True)}


class Implementations(msgspec.Struct, frozen=True, kw_only=True):
    """What each side runs on: the likely cause of any difference in throughput."""

    ours: str
    sha256sum: str
    cpu_sha_ni: bool | None

    @classmethod
    def here(cls) -> Implementations:
        version = subprocess.run(["sha256sum", "--version"], capture_output=True, text=True,
                                 check=False).stdout.splitlines()
        try:
            sha_ni = " sha_ni" in Path("/proc/cpuinfo").read_text()
        except OSError:
            sha_ni = None
        return cls(ours=f"hashlib ({ssl.OPENSSL_VERSION})", sha256sum=version[0] if version else "unknown",
                   cpu_sha_ni=sha_ni)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


# A case's sides in the order they are reported: ours, sha256sum, and (several files) ours with one worker.
_Sides = list[tuple[str, Callable[[], dict[Path, str]]]]


def _cases(files: list[Path], workers: int | None) -> dict[str, _Sides]:
    """What is timed: one file, and (with more than one) every file, with and without threads."""
    cases: dict[str, _Sides] = {
        "single": [("ours", lambda: {files[0]: hash_file(files[0])}), ("sha256sum", lambda: _sha256sum(files[:1]))],
    }
    if len(files) > 1:
        cases["several"] = [("ours", lambda: hash_files(files, workers=workers)), ("sha256sum", lambda: _sha256sum(files)),
                            ("ours-1-worker", lambda: hash_files(files, workers=1))]  # what the threads add
    return cases


def _time_case(case: str, sides: _Sides, rounds: int, say: Callable[[str], None]) -> list[list[float]]:
    """Seconds of each side per round, the side that goes first rotating; the digests must agree."""
    seconds: list[list[float]] = [[] for _ in sides]
    digests: list[dict[Path, str]] = [{} for _ in sides]
    for r in range(rounds):
        say(f"{case}: round {r + 1} of {rounds} ({', '.join(name for name, _ in sides)})")
        for i in [*range(r % len(sides), len(sides)), *range(r % len(sides))]:  # rotate who goes first
            elapsed, digests[i] = _timed(sides[i][1])
            seconds[i].append(elapsed)
    if any(d != digests[0] for d in digests):
        raise AssertionError(f"{case}: digests differ between ours and sha256sum")
    return seconds


class HasherTiming(msgspec.Struct, frozen=True, kw_only=True):
    """One hasher's times over one case (ours, sha256sum, ours on one worker) and its throughput."""

    seconds: list[float]
    median_mb_s: float
    best_mb_s: float

    @classmethod
    def of(cls, total: int, times: list[float]) -> HasherTiming:
        return cls(seconds=[round(t, 4) for t in times], median_mb_s=round(total / 1e6 / statistics.median(times), 1),
                   best_mb_s=round(total / 1e6 / min(times), 1))


class Case(msgspec.Struct, frozen=True, kw_only=True, rename={"ours_1_worker": "ours-1-worker"}):
    """One case's sides and ours/sha256sum throughput ratios (from unrounded times: a tiny file on a loaded
    machine rounds sha256sum's rate to 0.0 MB/s)."""

    files: int
    bytes: int
    ours: HasherTiming
    sha256sum: HasherTiming
    ours_1_worker: HasherTiming | UnsetType = UNSET
    ratio_median: float
    ratio_best: float
    parallel_speedup_median: float | UnsetType = UNSET

    @classmethod
    def of(cls, total: int, n_files: int, ours: list[float], sha256sum: list[float],
           one_worker: list[float] | None = None) -> Case:
        median, best = statistics.median, min
        return cls(files=n_files, bytes=total, ours=HasherTiming.of(total, ours),
                   sha256sum=HasherTiming.of(total, sha256sum),
                   ours_1_worker=HasherTiming.of(total, one_worker) if one_worker else UNSET,
                   ratio_median=round(median(sha256sum) / median(ours), 2), ratio_best=round(best(sha256sum) / best(ours), 2),
                   parallel_speedup_median=round(median(one_worker) / median(ours), 2) if one_worker else UNSET)

    def sides(self) -> list[tuple[str, HasherTiming]]:
        return [("ours", self.ours), ("sha256sum", self.sha256sum),
                *([("ours-1-worker", self.ours_1_worker)] if isinstance(self.ours_1_worker, HasherTiming) else [])]


class FileEntry(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    bytes: int


class HashBenchResult(BenchResult, frozen=True, kw_only=True):
    """bench-results/hash.json."""

    files: list[FileEntry]
    rounds: int
    workers: int
    cache: str
    implementations: Implementations
    cases: dict[str, Case]

    def table(self) -> str:
        rows = [f"{'case':<9}{'files':>6}{'MB':>8}{'side':>15}{'median MB/s':>13}{'best MB/s':>11}"]
        for name, c in self.cases.items():
            rows += [f"{name:<9}{c.files:>6}{c.bytes / 1e6:>8.0f}{side:>15}{s.median_mb_s:>13.1f}{s.best_mb_s:>11.1f}"
                     for side, s in c.sides()]
        rows.append(f"({self.cache}; {self.rounds} rounds, {self.workers} workers)")
        for name, c in self.cases.items():
            rows.append(f"{name} ours/sha256sum throughput ratio: {c.ratio_median:.2f} (median), "
                        f"{c.ratio_best:.2f} (best)")
            if isinstance(c.parallel_speedup_median, float):
                rows.append(f"{name} ours parallel/1-worker: {c.parallel_speedup_median:.2f} (median)")
        return "\n".join(rows)


def run_hash_bench(
    sizes: list[int], directory: Path | None = None, rounds: int = 3, workers: int | None = None,
    say: Callable[[str], None] = _quiet,
) -> HashBenchResult:
    """Time ours and sha256sum `rounds` times each, warm, on files of `sizes`; return the record.
    `say` gets one line per step (files, warm-up, each round)."""
    if shutil.which("sha256sum") is None:
        raise BenchUsageError("sha256sum is not installed (it comes with GNU coreutils).")
    header = BenchResult.header("hash")
    files = ensure_files(directory or default_dir(), sizes, say=say)
    say("reading every file once (warm page cache)")
    hash_files(files, workers=workers)  # warm the page cache: every side reads cached pages
    cases = {}
    for case, sides in _cases(files, workers).items():
        several = case == "several"
        seconds = _time_case(case, sides, rounds, say)
        cases[case] = Case.of(sum(sizes) if several else sizes[0], len(files) if several else 1, *seconds)
    return HashBenchResult(
        **header, files=[FileEntry(name=p.name, bytes=p.stat().st_size) for p in files], rounds=rounds,
        workers=workers or min(len(files), len(os.sched_getaffinity(0))),
        cache="warm: every file read once before timing; both sides read from the page cache",
        implementations=Implementations.here(), cases=cases)
