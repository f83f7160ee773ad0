"""Kernel-family durations per trace, computed from the trace files themselves (issue 43).

A study that traces requests inside our backend (traces.profiler `torch`) writes, under the run's
`traces/` directory, one gzip'd PyTorch-profiler (Kineto) trace per traced request and
`traces/traces.json` (TracesRecord: which backend, length and repeat each file is). From those
files and the recipe's families this module computes `kernel-families.json` (KernelFamilyFile),
and `verify` computes it again from the same files (audit/trace_audit.py): a changed trace file
changes its sha256 and, most likely, its figures.

Per trace:
    kernels, time_us      device kernels (Kineto category `kernel`) and their summed durations; a
                          CPU-only trace (device `cpu`) counts its `cpu_op` events instead, which
                          nest (an op's time includes its children's), so CPU figures overlap
    kernel_launches       runtime/driver kernel-launch calls (cudaLaunchKernel*, cuLaunchKernel*)
    graph_launches        cudaGraphLaunch / cuGraphLaunch calls
    captures              graph captures: stream-capture begins seen in the trace, or the
                          backend's own capture counter moving during the request, whichever is more
    families              per declared family: kernels whose name matches one of its patterns
                          (re.search) and their summed durations
Sums are math.fsum, so every figure is exactly reproducible from the same file.

kernel-families.json format history:
    1  (2026-12) first version.
traces.json (torch profiler) format history:
    2  (2026-12) first version of the torch-profiler record (format 1 is the Nsight record of
       study/traces.py, whose .nsys-rep reports this module cannot read).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from ..errors import EvidenceError
from .files import write_json_atomic

__all__ = [
    "FAMILIES_FILE",
    "FAMILIES_FORMAT_VERSION",
    "MAX_TRACE_BYTES",
    "TORCH_TRACES_FORMAT_VERSION",
    "TRACES_RECORD",
    "TRACE_FILE_RE",
    "FamilyFigures",
    "GraphStats",
    "KernelFamilyFile",
    "TraceEntry",
    "TraceFamilies",
    "TraceMeta",
    "TracesRecord",
    "compute_kernel_families",
    "read_kernel_families",
    "read_traces_record",
    "write_kernel_families",
]

FAMILIES_FILE = "kernel-families.json"
TRACES_RECORD = "traces/traces.json"
FAMILIES_FORMAT_VERSION = 1
TORCH_TRACES_FORMAT_VERSION = 2
MAX_TRACE_BYTES = 256 * 1024 * 1024  # decompressed; a 3399-token eager request on the H200 is a few MB
TRACE_FILE_RE = re.compile(r"traces/[a-z0-9][a-z0-9_.-]{0,99}\.pt\.trace\.json\.gz")
_LAUNCH = re.compile(r"(cudaLaunchKernel(ExC)?|cudaLaunchCooperativeKernel\w*|cuLaunchKernel(Ex)?|cuLaunchCooperativeKernel\w*)(_v\d+)?(_ptsz)?")
_GRAPH_LAUNCH = re.compile(r"(cudaGraphLaunch|cuGraphLaunch)(_v\d+)?(_ptsz)?")
_CAPTURE = re.compile(r"(cudaStreamBeginCapture|cuStreamBeginCapture)\w*")
_API_CATEGORIES = ("cuda_runtime", "cuda_driver")

Count = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
Micros = Annotated[float, msgspec.Meta(ge=0, le=1e15)]
Tokens = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class _Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    def to_json(self) -> dict:
        return msgspec.to_builtins(self)


class GraphStats(_Record, frozen=True):
    """The backend's CUDA Graph cache counters (backend/graphs.py `stats()`)."""

    capacity: Count
    retained: Count
    captures: Count
    replays: Count
    evictions: Count


class TraceMeta(_Record, frozen=True):
    """The `openjev` key our backend adds to a Kineto trace (backend/tracing.py)."""

    format_version: Literal[1]
    name: Name
    profiler: str
    torch: str
    device: str
    activities: list[str]
    input_tokens: list[Tokens]
    graphs_before: GraphStats | None
    graphs_after: GraphStats | None

    @property
    def device_events(self) -> Literal["kernel", "cpu_op"]:
        """What counts as a kernel: device kernels on CUDA, CPU ops on a CPU."""
        return "kernel" if self.device.startswith("cuda") else "cpu_op"

    def captures(self) -> int:
        """Graphs the backend captured during the traced request (its own counter)."""
        if self.graphs_before is None or self.graphs_after is None:
            return 0
        return self.graphs_after.captures - self.graphs_before.captures


class _Event(msgspec.Struct):
    """One Kineto chrome-trace event; Kineto writes many more keys, which are not read."""

    name: str = ""
    cat: str = ""
    ph: str = ""
    dur: float = 0.0  # microseconds; checked where counted (an event not counted may hold anything)


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]  # Kineto's key
    openjev: TraceMeta | msgspec.UnsetType = msgspec.UNSET

    def meta(self) -> TraceMeta:
        if isinstance(self.openjev, msgspec.UnsetType):
            raise EvidenceError("the trace has no `openjev` key: it was not written by our backend's trace control")
        return self.openjev

    def kernels(self, kind: str) -> list[_Event]:
        """The complete events of one category, each with a duration."""
        found = [e for e in self.traceEvents if e.cat == kind and e.ph == "X"]
        bad = next((e for e in found if not 0 <= e.dur <= 1e15), None)
        if bad is not None:
            raise EvidenceError(f"a {kind} event ({bad.name[:60]!r}) lasts {bad.dur!r} µs, not a duration")
        return found

    def calls(self, api: re.Pattern[str]) -> int:
        """Runtime and driver API calls whose whole name matches `api`."""
        return sum(1 for e in self.traceEvents if e.cat in _API_CATEGORIES and api.fullmatch(e.name))


class TraceEntry(_Record, frozen=True):
    """One planned trace of traces.json: done (its file) or skipped (why)."""

    backend: Name
    tokens: Tokens
    repeat: Annotated[int, msgspec.Meta(ge=1, le=1000)]
    case_id: str
    status: Literal["done", "skipped"]
    file: str | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.status == "done" and (self.file is None or not TRACE_FILE_RE.fullmatch(self.file)):
            raise msgspec.ValidationError(f"a done trace names its file as traces/<name>.pt.trace.json.gz, "
                                          f"not {str(self.file)[:80]!r}")


class TracesRecord(_Record, frozen=True):
    """traces/traces.json of the torch profiler: every planned trace, in the order taken."""

    format_version: Literal[2]
    profiler: Literal["torch"]
    header: str
    entries: Annotated[list[TraceEntry], msgspec.Meta(max_length=100_000)]


class FamilyFigures(_Record, frozen=True):
    kernels: Count
    time_us: Micros


class TraceFamilies(_Record, frozen=True):
    backend: Name
    tokens: Tokens
    repeat: Annotated[int, msgspec.Meta(ge=1, le=1000)]
    file: str
    sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
    device: str
    device_events: Literal["kernel", "cpu_op"]
    kernels: Count
    time_us: Micros
    kernel_launches: Count
    graph_launches: Count
    captures: Count
    families: dict[str, FamilyFigures]


class KernelFamilyFile(_Record, frozen=True):
    """kernel-families.json: the recipe's families and, per trace, the figures above."""

    format_version: Literal[1]
    families: dict[str, list[str]]
    traces: list[TraceFamilies]

    def at(self, backend: str, tokens: int) -> list[TraceFamilies]:
        return [t for t in self.traces if t.backend == backend and t.tokens == tokens]


def _decode(data: bytes, kind: type, where: str) -> Any:
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise EvidenceError(f"{where}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise EvidenceError(f"{where} is not JSON of the expected shape: {exc}") from None


class _Versioned(msgspec.Struct):
    format_version: int = 0


def read_traces_record(run_dir: Path) -> TracesRecord | None:
    path = Path(run_dir) / TRACES_RECORD
    if not path.is_file():
        return None
    data = path.read_bytes()
    version = _decode(data, _Versioned, TRACES_RECORD).format_version
    if version != TORCH_TRACES_FORMAT_VERSION:  # the Nsight record (format 1): nothing this module can read
        return None
    return _decode(data, TracesRecord, TRACES_RECORD)


def read_kernel_families(run_dir: Path) -> KernelFamilyFile | None:
    """The run's kernel-families.json, or None when it has none (no torch traces)."""
    path = Path(run_dir) / FAMILIES_FILE
    if not path.is_file():
        return None
    return _decode(path.read_bytes(), KernelFamilyFile, FAMILIES_FILE)


def _read_trace(path: Path, where: str) -> tuple[_Trace, str]:
    """A gzip'd Kineto trace, bounded when decompressed, with the sha256 of its file bytes."""
    raw = path.read_bytes()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as stream:
            data = stream.read(MAX_TRACE_BYTES + 1)
    except (OSError, EOFError) as exc:
        raise EvidenceError(f"{where} is not a gzip file: {exc}") from None
    if len(data) > MAX_TRACE_BYTES:
        raise EvidenceError(f"{where} decompresses to more than {MAX_TRACE_BYTES} bytes")
    return _decode(data, _Trace, where), hashlib.sha256(raw).hexdigest()


def _family(kernels: list[_Event], patterns: list[re.Pattern[str]]) -> FamilyFigures:
    members = [e.dur for e in kernels if any(p.search(e.name) for p in patterns)]
    return FamilyFigures(kernels=len(members), time_us=math.fsum(members))


def _figures(trace: _Trace, patterns: dict[str, list[re.Pattern[str]]]) -> dict:
    meta = trace.meta()
    kernels = trace.kernels(meta.device_events)
    return {"device": meta.device, "device_events": meta.device_events, "kernels": len(kernels),
            "time_us": math.fsum(e.dur for e in kernels), "kernel_launches": trace.calls(_LAUNCH),
            "graph_launches": trace.calls(_GRAPH_LAUNCH), "captures": max(meta.captures(), trace.calls(_CAPTURE)),
            "families": {name: _family(kernels, compiled) for name, compiled in patterns.items()}}


def _done(record: TracesRecord) -> Iterator[TraceEntry]:
    return (e for e in record.entries if e.status == "done")


def compute_kernel_families(run_dir: Path, record: TracesRecord, families: dict[str, list[str]]) -> KernelFamilyFile:
    """kernel-families.json's content, from the trace files that `record` lists as done."""
    patterns = {name: [re.compile(p) for p in pats] for name, pats in families.items()}
    traces = []
    for entry in _done(record):
        assert entry.file is not None  # TraceEntry checks a done entry's file
        trace, sha256 = _read_trace(Path(run_dir) / entry.file, entry.file)
        try:
            figures = _figures(trace, patterns)
        except EvidenceError as exc:
            raise EvidenceError(f"{entry.file}: {exc}") from None
        traces.append(TraceFamilies(backend=entry.backend, tokens=entry.tokens, repeat=entry.repeat,
                                    file=entry.file, sha256=sha256, **figures))
    return KernelFamilyFile(format_version=1, families=families, traces=traces)


def write_kernel_families(run_dir: Path, families: dict[str, list[str]]) -> KernelFamilyFile | None:
    """Compute and write kernel-families.json when the run has torch traces; None otherwise."""
    record = read_traces_record(run_dir)
    if record is None:
        return None
    table = compute_kernel_families(run_dir, record, families)
    write_json_atomic(Path(run_dir) / FAMILIES_FILE, table.to_json(), indent=1, sort_keys=True)
    return table
