"""Opt-in traces, run apart from the timed passes and kept as evidence.

`plan_traces` picks, per traced backend, the requests at each recipe token length (from the
published per-request token counts) and lists one trace per (backend, length, repeat).

Two profilers (recipe `traces.profiler`, docs/traces.md):
- `nsys`: `run_traces` wraps each backend launch in `nsys profile ...` (a command prefix), sends
  the warm-up and the traced request, stops the backend and keeps the report. Where nsys is
  absent every trace is skipped with the reason written to `traces/skipped.json`, never silently.
  (The study runner does not launch backends under nsys yet: this path is run by hand.)
- `torch`: `trace_backend` runs in the study's trace step, once a backend's timed passes are over
  and before it stops: each planned request is sent once more with the trace control's header
  (backend/tracing.py), never timed, and our backend writes its PyTorch-profiler trace into the
  run's `traces/` (its command names `--trace-dir {run}/traces`). A backend that does not offer
  the control (/health `tracing.allowed`) cannot be traced from outside: its traces are recorded
  as skipped, with that reason. `traces/traces.json` (evidence/kernel_families.TracesRecord)
  lists every planned trace; `write_trace_families` then computes kernel-families.json.

skipped.json / traces.json (Nsight) format history:
    1  (2026-11) first version.
traces.json of the torch profiler: format 2 (evidence/kernel_families.py).
"""

from __future__ import annotations

import http.client
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Protocol

import msgspec

from ..errors import BackendError, RecipeError
from ..evidence.files import write_json_atomic
from ..evidence.kernel_families import (
    TRACES_RECORD,
    TraceEntry,
    TracesRecord,
    read_traces_record,
    write_kernel_families,
)
from ..evidence.recipe import Recipe, Traces
from .workload import Request

__all__ = ["TRACES_FORMAT_VERSION", "TraceItem", "TraceLauncher", "TraceTarget", "nsys_prefix", "plan_traces",
           "run_traces", "trace_backend", "write_trace_families"]

TRACES_FORMAT_VERSION = 1


@dataclass(frozen=True)
class TraceItem:
    backend: str
    tokens: int
    repeat: int  # 1-based
    position: int  # 1-based position of the traced request in the workload's request file
    output: str  # report path without extension, relative to the run directory
    wrap: str | None  # aux process to wrap (the GPU worker), or None for the backend command

    def to_dict(self) -> dict:
        return asdict(self)


class TraceLauncher(Protocol):
    """Provided by the study runner: start one backend with `prefix` before the argv of `wrap`
    (the backend command when None), yield its base URL once ready, stop it on exit."""

    def __call__(self, backend: str, prefix: list[str], wrap: str | None) -> AbstractContextManager[str]: ...


def _position(token_counts: list[int], tokens: int) -> int:
    """The 1-based position of the first request with `tokens` input tokens."""
    if tokens not in token_counts:
        raise RecipeError(f"No request of the workload has {tokens} input tokens; check traces.tokens.")
    return token_counts.index(tokens) + 1


def _backend_traces(recipe: Recipe, traces: Traces, backend: str, token_counts: list[int]) -> list[TraceItem]:
    """One backend's traces: every traced length, `per_length` times, wrapped by the aux when it has it."""
    items: list[TraceItem] = []
    for tokens in traces.tokens:
        position = _position(token_counts, tokens)
        wrap = traces.aux if any(a.name == traces.aux for a in recipe.backend(backend).aux) else None
        items.extend(TraceItem(backend, tokens, repeat, position, f"traces/{backend}-{tokens}tok-{repeat}", wrap)
                     for repeat in range(1, traces.per_length + 1))
    return items


def plan_traces(recipe: Recipe, token_counts: list[int] | None = None) -> list[TraceItem]:
    """Every trace the recipe asks for (none unless traces.enabled), in run order."""
    traces = recipe.traces
    if traces is None or not traces.enabled:
        return []
    if token_counts is None:
        raise RecipeError("Traces pick requests by input token count; pass the counts from traces.token_counts.")
    return [item for backend in traces.backends or [b.name for b in recipe.backends]
            for item in _backend_traces(recipe, traces, backend, token_counts)]


def nsys_prefix(recipe: Recipe, item: TraceItem, run_dir: Path, nsys: str = "nsys") -> list[str]:
    assert recipe.traces is not None
    return [nsys, *recipe.traces.nsys_args, "-o", str(run_dir / item.output), "--force-overwrite=false"]


def run_traces(recipe: Recipe, items: list[TraceItem], run_dir: Path, launch: TraceLauncher,
               send: Callable[[str, int], None], *, nsys: str | None = None) -> dict:
    """Run each trace; send(url, position) posts the request at that position. Returns the record written."""
    out = run_dir / "traces"
    out.mkdir(parents=True, exist_ok=True)
    binary = nsys or shutil.which("nsys")
    if not items:
        return {}
    if binary is None:
        record = {"format_version": TRACES_FORMAT_VERSION, "status": "skipped",
                  "reason": "Nsight Systems (nsys) is not on PATH on this host",
                  "planned": [i.to_dict() for i in items]}
        _write(out / "skipped.json", record)
        return record
    done = []
    for item in items:
        with launch(item.backend, nsys_prefix(recipe, item, run_dir, binary), item.wrap) as url:
            send(url, item.position)
        reports = sorted(p.name for p in out.glob(Path(item.output).name + ".*"))
        done.append(dict(item.to_dict(), reports=reports))
    record = {"format_version": TRACES_FORMAT_VERSION, "status": "done", "nsys": binary, "traces": done}
    _write(out / "traces.json", record)
    return record


def _write(path: Path, data: dict) -> None:
    write_json_atomic(path, data, indent=1, sort_keys=False)


# --- the torch profiler inside our backend (issue 43) ---------------------------------------

TRACE_HEADER = "X-OpenJev-Trace"  # backend/tracing.py's control (the study does not import the backend)
TRACE_FILE_HEADER = "X-OpenJev-Trace-File"


@dataclass(frozen=True)
class TraceTarget:
    """One backend as the trace step sees it: ready, its timed passes over, not yet stopped."""

    run_dir: Path
    root: Path  # the inputs root (traces.token_counts is read from it)
    recipe: Recipe
    backend: str
    host: str
    port: int
    health: dict
    requests: dict[str, list[Request]]  # each workload's prepared requests, in pass order

    def traced(self) -> bool:
        traces = self.recipe.traces
        return (traces is not None and traces.enabled and traces.profiler == "torch"
                and self.backend in (traces.backends or [b.name for b in self.recipe.backends]))


class _TokenCounts(msgspec.Struct):
    """traces.token_counts: {"input_tokens": [...]} in request order (other keys, e.g. `source`, ignored)."""

    input_tokens: list[Annotated[int, msgspec.Meta(ge=0, le=10_000_000)]]


class _TraceControl(msgspec.Struct):
    allowed: bool = False


class _Health(msgspec.Struct):
    """The part of a backend's /health the trace step reads: our backend's `tracing` (backend/tracing.py)."""

    tracing: _TraceControl | None = None


class _Usage(msgspec.Struct):
    input_tokens: int | None = None


class _Answer(msgspec.Struct):
    """The part of a traced request's answer the trace step checks."""

    usage: _Usage = msgspec.field(default_factory=_Usage)


def _token_counts(root: Path, traces: Traces) -> list[int]:
    if traces.token_counts is None:
        raise RecipeError("traces.token_counts is required: traced requests are picked by their input token count.")
    path = root / traces.token_counts
    try:
        return msgspec.json.decode(path.read_bytes(), type=_TokenCounts).input_tokens
    except OSError as exc:
        raise RecipeError(f"traces.token_counts {path}: {exc.strerror or exc}.") from None
    except msgspec.DecodeError as exc:  # ValidationError included: says the field, e.g. `$.input_tokens[3]`
        raise RecipeError(f"traces.token_counts {path}: {exc}.") from None


def _not_traceable(health: dict) -> str | None:
    """Why this backend's requests cannot be traced from the study, or None when they can."""
    try:
        tracing = msgspec.convert(health, _Health).tracing
    except msgspec.ValidationError as exc:
        return f"the backend's /health `tracing` is not our trace control's ({exc})"
    if tracing is None:
        return ("the backend has no trace control (/health has no `tracing`): a backend that is not ours "
                "cannot be traced from outside; Nsight Systems wrapping its process is the way, where nsys exists")
    if not tracing.allowed:
        return "our backend was started without --trace-dir (recipe: add --trace-dir {run}/traces to its command)"
    return None


def _traced_request(target: TraceTarget, item: TraceItem, request: Request, timeout_s: float) -> str:
    """POST one request with the trace header; returns the trace file's run-relative path."""
    name = Path(item.output).name
    endpoint = target.recipe.backend(target.backend).endpoint
    connection = http.client.HTTPConnection(target.host, target.port, timeout=timeout_s)
    try:
        connection.request("POST", endpoint, body=request.body,
                           headers={"Content-Type": "application/json", TRACE_HEADER: name})
        response = connection.getresponse()
        body, written = response.read(), response.getheader(TRACE_FILE_HEADER)
    except (OSError, http.client.HTTPException) as exc:
        raise BackendError(f"Backend {target.backend}: traced request {name} failed: {exc}.") from None
    finally:
        connection.close()
    if response.status != 200:
        raise BackendError(f"Backend {target.backend}: traced request {name} answered {response.status}: "
                           f"{body[:200].decode('utf-8', 'replace')}")
    tokens = _input_tokens(body)
    if tokens != item.tokens:
        raise BackendError(f"Backend {target.backend}: traced request {name} ({request.id}) has {tokens} input tokens, "
                           f"not {item.tokens}: traces.token_counts does not match the workload.")
    relative = f"traces/{written}"
    if written != f"{name}.pt.trace.json.gz" or not (target.run_dir / relative).is_file():
        raise BackendError(f"Backend {target.backend}: the trace of {name} is not in the run's traces/ "
                           f"(the backend wrote {written!r}); start it with --trace-dir {{run}}/traces.")
    return relative


def _input_tokens(body: bytes) -> int | None:
    try:
        return msgspec.json.decode(body, type=_Answer).usage.input_tokens
    except msgspec.DecodeError:
        return None


def trace_backend(target: TraceTarget, say: Callable[[str], None]) -> None:
    """The trace step of one backend (torch profiler only; nothing for an untraced backend)."""
    if not target.traced():
        return
    traces = target.recipe.traces
    assert traces is not None
    items = [i for i in plan_traces(target.recipe, _token_counts(target.root, traces)) if i.backend == target.backend]
    requests = target.requests[traces.workload]
    reason = _not_traceable(target.health)
    timeout = target.recipe.protocol.request_timeout_s + 120.0  # the profiler's own work comes on top
    entries = []
    for item in items:
        request = requests[item.position - 1]
        if reason is not None:
            entries.append(TraceEntry(backend=item.backend, tokens=item.tokens, repeat=item.repeat, case_id=request.id,
                                      status="skipped", reason=reason))
            continue
        entries.append(TraceEntry(backend=item.backend, tokens=item.tokens, repeat=item.repeat, case_id=request.id,
                                  status="done", file=_traced_request(target, item, request, timeout)))
    _record(target.run_dir, entries)
    say(f"{target.backend}: {len(items)} traces skipped: {reason}" if reason
        else f"{target.backend}: {len(items)} traced requests (torch profiler, not timed) in traces/")


def _record(run_dir: Path, entries: list[TraceEntry]) -> None:
    """traces/traces.json with this backend's entries after the earlier backends'."""
    (run_dir / "traces").mkdir(exist_ok=True)
    earlier = read_traces_record(run_dir)
    record = TracesRecord(format_version=2, profiler="torch", header=TRACE_HEADER,
                          entries=[*(earlier.entries if earlier else []), *entries])
    write_json_atomic(run_dir / TRACES_RECORD, record.to_json(), indent=1, sort_keys=True)


def write_trace_families(run_dir: Path, recipe: Recipe, root: Path) -> None:
    """After every backend: kernel-families.json from the torch profiler's traces, or, for `nsys`,
    traces/skipped.json saying why no trace was taken (the runner does not launch under nsys)."""
    traces = recipe.traces
    if traces is None or not traces.enabled:
        return
    if traces.profiler == "torch":
        write_kernel_families(run_dir, traces.families)
        return
    counts = _token_counts(root, traces)
    reason = ("Nsight Systems (nsys) is not on PATH on this host" if shutil.which("nsys") is None else
              "the study runner does not launch backends under Nsight Systems; run study.traces.run_traces "
              "by hand, or trace our backend with traces.profiler torch (docs/traces.md)")
    out = run_dir / "traces"
    out.mkdir(exist_ok=True)
    _write(out / "skipped.json", {"format_version": TRACES_FORMAT_VERSION, "status": "skipped", "reason": reason,
                                  "planned": [i.to_dict() for i in plan_traces(recipe, counts)]})
